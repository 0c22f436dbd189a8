"""First contact: which receiver binding a sealed packet to an address carries.

Every sealed packet is bound to its receiver's node and run
(kernel/sealing.py). The cores address members by `Address`; this maps an
address to the node tag last heard from there, and the node tag to its
newest run (`Sessions`). For an address not known yet (a seed, a member
heard of only by gossip) it sends an unbound `Hello`, holds what was to be
sent, and sends it bound when the `Welcome` comes back (one round trip, once
per peer and run). A peer that receives a packet bound to an earlier run of
its own (it restarted) says hello back, so the sender learns the new run.

Nothing here changes a core's state: a replayed `Hello` earns one small
`Welcome`, bound to the run the hello claims (useless to anyone but that
run), and can teach only a run newer than the one known.

Both carry what their sender understands (kernel/versions.py): a hello or
welcome from a peer whose versions do not overlap ours is refused — nothing
held is released to it — counted (`contact_refused_version`) and logged
once per peer and versions, naming both. A refused hello is still welcomed,
so that the other side learns our versions and refuses us in turn, saying
why, rather than waiting for an answer.
"""

from __future__ import annotations

import asyncio
import itertools
from collections import Counter
from collections.abc import Callable

import structlog

from shoal.daemon.network.wire import Received, Wire
from shoal.kernel.contract import Address, Send
from shoal.kernel.sealing import UNBOUND, Hello, Welcome
from shoal.kernel.versions import Versions, incompatible

log = structlog.get_logger("shoal")

HELLO_RETRY_S = 0.5  # a hello unanswered this long is sent again
HELD_FOR_S = 3.0  # what waited longer for its hello is dropped, not sent late
MAX_HELD = 64  # per address; the oldest goes first
MAX_ADDRESSES = 65_536
REPLY_GAP_S = 1.0  # at most one hello per address per gap in answer to misdirected packets


class _Pending:
    __slots__ = ("sent_at", "held", "waiters", "retry")

    def __init__(self) -> None:
        self.sent_at = -HELLO_RETRY_S
        self.held: list[tuple[float, Send]] = []
        self.waiters: list[asyncio.Future[bytes]] = []
        self.retry: asyncio.TimerHandle | None = None


class FirstContact:
    """Receiver bindings by address, learned by hello and by what arrives."""

    def __init__(self, wire: Wire, send_datagram: Callable[[bytes, Address], None],
                 resend: Callable[[Send], None], counters: Counter[str]) -> None:  # fmt: skip
        """Args:
        wire: the agent's wire (its `sessions` hold every peer's run).
        send_datagram: puts bytes on the UDP socket.
        resend: sends a held `Send` once it can be bound (`Network.send`).
        counters: the agent's counters (`hellos_out`, `held_dropped`).
        """
        self._wire = wire
        self._send_datagram = send_datagram
        self._resend = resend
        self._counters = counters
        self._tags: dict[Address, bytes] = {}  # address -> node tag heard from there
        self._pending: dict[Address, _Pending] = {}
        self._refs: dict[int, Address] = {}
        self._replied_at: dict[Address, float] = {}
        self._next_ref = itertools.count(1)
        self._refused: set[tuple[Address, Versions]] = set()

    def to(self, addr: Address) -> bytes | None:
        """The binding for a packet to `addr`, or None until a hello is answered."""
        if not self._wire.sealing:
            return UNBOUND
        tag = self._tags.get(addr)
        return None if tag is None else self._wire.sessions.binding_of(tag)

    def hold(self, send: Send) -> None:
        """Keep `send` until `send.to` answers a hello (sent now if due)."""
        now = _now()
        pending = self._pending.get(send.to)
        if pending is None:
            pending = self._pending[send.to] = _Pending()
        if len(pending.held) >= MAX_HELD:
            pending.held.pop(0)
            self._counters["held_dropped"] += 1
        pending.held.append((now, send))
        self._hello(send.to, pending, now)
        if pending.retry is None:
            pending.retry = asyncio.get_running_loop().call_later(
                HELLO_RETRY_S, self._retry, send.to)  # fmt: skip

    def _retry(self, addr: Address) -> None:
        """Say hello again while something is held for `addr` (a lost hello
        must not wait for the next send), until it is too old to send."""
        pending = self._pending.get(addr)
        if pending is None:
            return
        pending.retry = None
        now = _now()
        kept = [(at, send) for at, send in pending.held if now - at <= HELD_FOR_S]
        self._counters["held_dropped"] += len(pending.held) - len(kept)
        pending.held = kept
        if not kept:
            if not pending.waiters:
                del self._pending[addr]
            return
        self._hello(addr, pending, now)
        pending.retry = asyncio.get_running_loop().call_later(HELLO_RETRY_S, self._retry, addr)

    async def bound(self, addr: Address, timeout_s: float) -> bytes:
        """The binding for `addr`, saying hello first if needed.

        Raises:
            TimeoutError: no welcome within `timeout_s`.
        """
        found = self.to(addr)
        if found is not None:
            return found
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        pending = self._pending.get(addr)
        if pending is None:
            pending = self._pending[addr] = _Pending()
        waiter: asyncio.Future[bytes] = loop.create_future()
        pending.waiters.append(waiter)
        try:
            while True:
                self._hello(addr, pending, _now())
                left = deadline - loop.time()
                if left <= 0:
                    raise TimeoutError(f"no answer to hello from {addr[0]}:{addr[1]}")
                try:
                    return await asyncio.wait_for(asyncio.shield(waiter), min(left, HELLO_RETRY_S))
                except TimeoutError:
                    continue
        finally:
            if not waiter.done():
                waiter.cancel()
                pending.waiters.remove(waiter)
                if not pending.waiters and not pending.held and self._pending.get(addr) is pending:
                    del self._pending[addr]

    def arrived(self, received: Received, addr: Address) -> bool:
        """Learn from an accepted sealed datagram from `addr`; whether it was a
        hello or a welcome (consumed here, not for the node)."""
        envelope = received.envelope
        if envelope is None:
            return False
        tags = self._tags
        if tags.get(addr) != envelope.sender:
            if len(tags) >= MAX_ADDRESSES:
                tags.clear()
            tags[addr] = envelope.sender
        messages = received.messages
        first = messages[0] if messages else None
        if type(first) is Hello:
            # Welcomed even when refused: the welcome tells our versions, so
            # the refused peer says why in its log instead of "no answer".
            refused = self._refuse(first.versions, addr)
            self._welcome(first.ref, envelope.sender, addr)
            if not refused:
                self._release(addr)
            return True
        if type(first) is Welcome and len(messages) == 1:
            if self._refuse(first.versions, addr):
                return True
            hello_to = self._refs.pop(first.ref, None)
            if hello_to is not None and hello_to != addr:
                tags[hello_to] = envelope.sender  # answered from another address
                self._release(hello_to)
            self._release(addr)
            return True
        self._release(addr)
        return False

    def _refuse(self, theirs: Versions, addr: Address) -> bool:
        """Whether a peer that says it understands `theirs` is refused."""
        mine = self._wire.versions
        protocols = incompatible(mine, theirs)
        if not protocols:
            return False
        self._counters["contact_refused_version"] += 1
        key = (addr, theirs)
        if key not in self._refused and len(self._refused) < MAX_ADDRESSES:
            self._refused.add(key)
            log.warning("member-refused", address=f"{addr[0]}:{addr[1]}",
                        protocols=protocols, theirs=theirs.describe(), mine=mine.describe(),
                        why="no common version: upgrade one release at a time "
                            "(docs/operations.md, 'An upgrade')")  # fmt: skip
        return True

    def misdirected(self, addr: Address) -> None:
        """A packet from `addr` was bound to an earlier run of ours (or to
        someone else): say hello, so a restarted peer's sender learns our
        run (at most once per `REPLY_GAP_S` per address)."""
        if not self._wire.sealing:
            return
        now = _now()
        if now - self._replied_at.get(addr, -REPLY_GAP_S) < REPLY_GAP_S:
            return
        if len(self._replied_at) >= MAX_ADDRESSES:
            self._replied_at.clear()
        self._replied_at[addr] = now
        self._send_hello(addr)

    def _hello(self, addr: Address, pending: _Pending, now: float) -> None:
        if now - pending.sent_at >= HELLO_RETRY_S:
            pending.sent_at = now
            self._send_hello(addr)

    def _send_hello(self, addr: Address) -> None:
        ref = next(self._next_ref)
        if len(self._refs) >= MAX_ADDRESSES:
            self._refs.clear()
        self._refs[ref] = addr
        self._counters["hellos_out"] += 1
        self._send_datagram(self._wire.datagram([Hello(ref, self._wire.versions)]), addr)

    def _welcome(self, ref: int, sender: bytes, addr: Address) -> None:
        to = self._wire.sessions.binding_of(sender)
        assert to is not None  # the hello was just accepted: its run is known
        self._send_datagram(self._wire.datagram([Welcome(ref, self._wire.versions)], to), addr)

    def _release(self, addr: Address) -> None:
        pending = self._pending.get(addr)
        if pending is None or self.to(addr) is None:
            return
        del self._pending[addr]
        if pending.retry is not None:
            pending.retry.cancel()
        binding = self.to(addr)
        assert binding is not None
        for waiter in pending.waiters:
            if not waiter.done():
                waiter.set_result(binding)
        now = _now()
        for at, send in pending.held:
            if now - at <= HELD_FOR_S:
                self._resend(send)
            else:
                self._counters["held_dropped"] += 1


def _now() -> float:
    return asyncio.get_running_loop().time()
