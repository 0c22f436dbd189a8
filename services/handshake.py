"""First contact, the protocol state: which run a packet to an address is bound to.

Theory of operation. Every sealed packet is bound to its receiver's node
and run (kernel/sealing.py). The cores address members by `Address`; this
core maps an address to the node tag last heard from there, and the
`ReplayWindows` map that tag to its newest run. For an address not known yet (a
seed, a member heard of only by gossip) the driver asks `to(addr)`, gets
None, and hands the send to `hold`: the core says an unbound `Hello`, holds
the send, and releases it (`Released`) when the `Welcome` comes back — one
round trip, once per peer and run. A hello unanswered for `HELLO_RETRY_S`
is said again while something is held or awaited (`want`), and what waited
longer than `HELD_FOR_S` is dropped, not sent late. A peer that receives a
packet bound to an earlier run of its own (it restarted) says hello back
(`misdirected`), so the sender learns the new run.

Nothing here changes another core's state: a replayed `Hello` earns one
small `Welcome`, bound to the run the hello claims (useless to anyone but
that run), and can teach only a run newer than the one known (the
`ReplayWindows` refuse an older run or a counter seen before, before this core
is told anything).

Both carry what their sender understands (kernel/versions.py): a hello or
welcome from a peer whose versions do not overlap ours is refused —
nothing held is released to it — counted (`contact_refused_version`) and
reported (`Refused`, `first` once per peer and versions, for one log line
naming both). A refused hello is still welcomed, so that the other side
learns our versions and refuses us in turn, saying why, rather than
waiting for an answer.

The core follows the contract of the others (kernel/contract.py): the
driver hands it what arrived (`receive`), asks for bindings, calls
`tick(now)` at `next_deadline()` and sends what `drain()` returns: the
hellos and welcomes as `Sealed` datagrams (each with the binding it
carries), then the events (`Released`, `Refused`). It reads no clock and
does no IO: the agent drives it from its sockets (daemon/network/), the
simulator from sim/handshake.py.
"""

from __future__ import annotations

import itertools
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from shoal.kernel.contract import Address, Send
from shoal.kernel.deadlines import Deadlines
from shoal.kernel.sealing import UNBOUND, Hello, ReplayWindows, Welcome
from shoal.kernel.versions import Versions, incompatible

HELLO_RETRY_S = 0.5  # a hello unanswered this long is sent again
HELD_FOR_S = 3.0  # what waited longer for its hello is dropped, not sent late
MAX_HELD = 64  # per address; the oldest goes first
MAX_ADDRESSES = 65_536
REPLY_GAP_S = 1.0  # at most one hello per address per gap in answer to misdirected packets
ANSWER_WITHIN_S = HELD_FOR_S  # a welcome from another address later than this teaches nothing
OTHER_AFTER_HELLOS = 2  # an answer from another address counts once these go unanswered


@dataclass(frozen=True, slots=True)
class Sealed:
    """One datagram for the driver to seal bound to `binding` and send to `to`."""

    to: Address
    binding: bytes
    message: Hello | Welcome


@dataclass(frozen=True, slots=True)
class Released:
    """`to` answered: packets to it carry `binding`; `sends` were held for it
    (the driver sends them again, now bound) and its waiters are answered."""

    to: Address
    binding: bytes
    sends: tuple[Send, ...]


@dataclass(frozen=True, slots=True)
class Refused:
    """A hello or welcome from `address` shares no version with us;
    `first`: the first time for this peer and versions (log it)."""

    address: Address
    protocols: tuple[str, ...]
    theirs: Versions
    mine: Versions
    first: bool


@dataclass(frozen=True, slots=True)
class ContactOutput:
    """One batch for the driver: datagrams to send, then events."""

    send: tuple[Sealed, ...] = ()
    events: tuple[Released | Refused, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.send or self.events)


EMPTY = ContactOutput()


@dataclass(slots=True)
class _Pending:
    sent_at: float = -HELLO_RETRY_S
    held: list[tuple[float, Send]] = field(default_factory=list)
    wanted: int = 0  # waiters for the binding itself (`want`)
    retry_at: float | None = None
    refs: list[int] = field(default_factory=list)  # the hellos said for it
    hellos: int = 0  # said so far
    other: tuple[bytes, int] | None = None  # (tag, hellos said) answered from another address


class Handshake:
    """Receiver bindings by address, learned by hello and by what arrives.

    `mutation` (class-wide, None in production) puts a deliberate bug in,
    for tests/sim/test_handshake_sim.py to show that its checks catch it.

    Args:
        sessions: this node's run and every sender's newest run (shared with
            the driver's wire, which checks each packet against it first).
        versions: what this build understands, told in every hello and welcome.
        sealing: False when encryption is off: every packet is unbound.
        counters: where counts go (`hellos_out`, `held_dropped`,
            `contact_refused_version`); a fresh Counter if None.
    """

    mutation: str | None = None

    def __init__(self, sessions: ReplayWindows, versions: Versions, sealing: bool = True,
                 counters: Counter[str] | None = None) -> None:  # fmt: skip
        self.sessions = sessions
        self.versions = versions
        self.sealing = sealing
        self.counters: Counter[str] = Counter() if counters is None else counters
        self._tags: dict[Address, bytes] = {}  # address -> node tag heard from there
        self._pending: dict[Address, _Pending] = {}
        self._refs: dict[int, tuple[Address, float]] = {}  # hello ref -> (to, said at)
        self._replied_at: dict[Address, float] = {}
        self._next_ref = itertools.count(1)
        self._refused: set[tuple[Address, Versions]] = set()
        self._deadlines = Deadlines()
        self._send: list[Sealed] = []
        self._events: list[Released | Refused] = []

    # -- the core contract -----------------------------------------------------

    def receive(self, sender: bytes, messages: tuple[Any, ...] | list[Any], addr: Address,
                now: float) -> bool:  # fmt: skip
        """Learn from a datagram from `addr` whose envelope the `ReplayWindows`
        accepted (its sender's node tag: `sender`); whether it was a hello
        or a welcome (consumed here, not for the node)."""
        tags = self._tags
        if tags.get(addr) != sender:
            if len(tags) >= MAX_ADDRESSES:
                tags.clear()
            tags[addr] = sender
        first = messages[0] if messages else None
        if type(first) is Hello:
            # Welcomed even when refused: the welcome tells our versions, so
            # the refused peer says why in its log instead of "no answer".
            refused = self._refuse(first.versions, addr)
            to = self.sessions.binding_of(sender)
            assert to is not None  # the hello was just accepted: its run is known
            self._send.append(Sealed(addr, to, Welcome(first.ref, self.versions)))
            if not refused:
                self._release(addr, now)
            return True
        if type(first) is Welcome and len(messages) == 1:
            if self._refuse(first.versions, addr):
                return True
            self._answered(first.ref, sender, addr, now)
            self._release(addr, now)
            return True
        self._release(addr, now)
        return False

    def tick(self, now: float) -> None:
        """Say hello again where it is due; drop what waited too long."""
        self._deadlines.run_due(now)

    def next_deadline(self) -> float | None:
        """When `tick` is next due (None: nothing held or awaited)."""
        return self._deadlines.next_at()

    def drain(self) -> ContactOutput:
        """The datagrams to send, then the events, since the last drain."""
        if not (self._send or self._events):
            return EMPTY
        out = ContactOutput(tuple(self._send), tuple(self._events))
        self._send.clear()
        self._events.clear()
        return out

    # -- commands ------------------------------------------------------------------

    def to(self, addr: Address) -> bytes | None:
        """The binding for a packet to `addr`, or None until a hello is answered."""
        if not self.sealing:
            return UNBOUND
        tag = self._tags.get(addr)
        return None if tag is None else self.sessions.binding_of(tag)

    def hold(self, send: Send, now: float) -> None:
        """Keep `send` until `send.to` answers a hello (said now if due)."""
        pending = self._pending_for(send.to, now)
        if len(pending.held) >= MAX_HELD:
            pending.held.pop(0)
            self.counters["held_dropped"] += 1
        pending.held.append((now, send))
        self._hello(send.to, pending, now)

    def want(self, addr: Address, now: float) -> None:
        """Someone awaits the binding for `addr` (a stream to open): say
        hello until it is answered (`Released`) or `unwant` is called."""
        pending = self._pending_for(addr, now)
        pending.wanted += 1
        self._hello(addr, pending, now)

    def unwant(self, addr: Address) -> None:
        """A waiter for `addr` gave up."""
        pending = self._pending.get(addr)
        if pending is None:
            return
        pending.wanted -= 1
        assert pending.wanted >= 0, "unwant without want"
        if not pending.wanted and not pending.held:
            del self._pending[addr]

    def misdirected(self, addr: Address, now: float) -> None:
        """A packet from `addr` was bound to an earlier run of ours (or to
        someone else): say hello, so a restarted peer's sender learns our
        run (at most once per `REPLY_GAP_S` per address)."""
        if not self.sealing:
            return
        if now - self._replied_at.get(addr, -REPLY_GAP_S) < REPLY_GAP_S:
            return
        if len(self._replied_at) >= MAX_ADDRESSES:
            self._replied_at.clear()
        self._replied_at[addr] = now
        self._send_hello(addr, now)

    def forget(self, addr: Address) -> None:
        """Drop what is known of `addr` (tests, and a driver that knows the
        peer there is gone)."""
        self._tags.pop(addr, None)

    def pending(self) -> int:
        """How many addresses a hello is outstanding for."""
        return len(self._pending)

    # -- inside ----------------------------------------------------------------------

    def _pending_for(self, addr: Address, now: float) -> _Pending:
        pending = self._pending.get(addr)
        if pending is None:
            pending = self._pending[addr] = _Pending()
        if pending.retry_at is None:
            pending.retry_at = now + HELLO_RETRY_S
            self._deadlines.push(pending.retry_at, self._retry, addr)
        return pending

    def _retry(self, addr: Address, now: float) -> None:
        """Say hello again while something is held or awaited for `addr` (a
        lost hello must not wait for the next send), until it is too old."""
        pending = self._pending.get(addr)
        if pending is None or pending.retry_at is None or pending.retry_at > now:
            return  # released meanwhile, or a newer retry is queued
        pending.retry_at = None
        other = pending.other
        if other is not None and pending.hellos - other[1] >= OTHER_AFTER_HELLOS:
            # Answered from another address, and not from its own meanwhile.
            self.counters["contact_other_address"] += 1
            self._tags[addr] = other[0]
            self._release(addr, now)
            if addr not in self._pending:
                return
        kept = [(at, send) for at, send in pending.held if now - at <= HELD_FOR_S]
        self.counters["held_dropped"] += len(pending.held) - len(kept)
        pending.held = kept
        if not kept and not pending.wanted:
            del self._pending[addr]
            return
        self._hello(addr, pending, now)
        pending.retry_at = now + HELLO_RETRY_S
        self._deadlines.push(pending.retry_at, self._retry, addr)

    def _answered(self, ref: int, sender: bytes, addr: Address, now: float) -> None:
        """A welcome from `addr` answers hello `ref`: when that hello went to
        another address, `sender` may be answering for it (a member that
        listens on several addresses answers from its own).

        A hello is unbound, so a copy of ours replayed to a third member
        earns a true welcome from it; taken at once as the answer for the
        address the hello went to, it would bind that address to the wrong
        member (found by sim/handshake.py's replayer). So such an answer is
        only a candidate, taken if the address itself has not answered the
        next `OTHER_AFTER_HELLOS` hellos (`_retry`; a member there would),
        and only for a hello still outstanding and said recently: the refs
        of an address go once it is bound (`_release`)."""
        found = self._refs.pop(ref, None)
        if found is None or found[0] == addr:
            return
        hello_to, said_at = found
        if Handshake.mutation == "trust_any_welcome":
            self._tags[hello_to] = sender
            self._release(hello_to, now)
            return
        pending = self._pending.get(hello_to)
        if pending is None or now - said_at > ANSWER_WITHIN_S or self.to(hello_to) is not None:
            self.counters["contact_late_welcome"] += 1
            return
        if pending.other is None:
            pending.other = (sender, pending.hellos)

    def _refuse(self, theirs: Versions, addr: Address) -> bool:
        """Whether a peer that says it understands `theirs` is refused."""
        mine = self.versions
        protocols = incompatible(mine, theirs)
        if not protocols:
            return False
        self.counters["contact_refused_version"] += 1
        key = (addr, theirs)
        first = key not in self._refused and len(self._refused) < MAX_ADDRESSES
        if first:
            self._refused.add(key)
        self._events.append(Refused(addr, tuple(protocols), theirs, mine, first))
        return True

    def _hello(self, addr: Address, pending: _Pending, now: float) -> None:
        if now - pending.sent_at >= HELLO_RETRY_S:
            pending.sent_at = now
            pending.hellos += 1
            self._send_hello(addr, now)

    def _send_hello(self, addr: Address, now: float) -> None:
        ref = next(self._next_ref)
        if len(self._refs) >= MAX_ADDRESSES:
            self._refs.clear()
        self._refs[ref] = (addr, now)
        pending = self._pending.get(addr)
        if pending is not None:
            pending.refs.append(ref)
        self.counters["hellos_out"] += 1
        self._send.append(Sealed(addr, UNBOUND, Hello(ref, self.versions)))

    def _release(self, addr: Address, now: float) -> None:
        pending = self._pending.get(addr)
        if pending is None:
            return
        binding = self.to(addr)
        if binding is None:
            return
        del self._pending[addr]
        if Handshake.mutation != "trust_any_welcome":
            for ref in pending.refs:  # answered: a copy of one of them teaches nothing
                self._refs.pop(ref, None)
        sends = []
        for at, send in pending.held:
            if now - at <= HELD_FOR_S:
                sends.append(send)
            else:
                self.counters["held_dropped"] += 1
        self._events.append(Released(addr, binding, tuple(sends)))
