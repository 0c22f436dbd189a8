"""The origin's side of the metadata log: what this node asked the
controller (writes and reads forwarded for its clients), until when it
waits, and what it tells its clients.

**Outcomes.** A write proposed anywhere is forwarded to the controller. Its
origin is told exactly one of: committed, conflict, *not applied* (nothing
was sent: no controller known), or *unknown* (sent: the controller asked
no longer leads, or lost its leadership after appending it, or did not
answer in time: it may yet commit). A minority never acknowledges a write.
A controller that no longer leads the epoch a proposal names refuses it,
but its origin still reports it unknown: with a network that duplicates
datagrams, the refusal may answer a copy of a proposal whose original it
appended while it led.

Pure: time is passed in; answers go out through the core's outbox.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from shoal.kernel.contract import Address, Send
from shoal.kernel.outbox import Outbox
from shoal.metalog.events import KeepaliveDone, MetaConfig, MetaCounters, ProposalDone, ReadDone
from shoal.metalog.messages import (
    OUTCOME_NOT_APPLIED,
    OUTCOME_UNKNOWN,
    Keepalive,
    KeepaliveResult,
    Propose,
    ProposeResult,
    ReadRequest,
    ReadResult,
)
from shoal.metalog.state import MetaOp


class Origin:
    """The proposals and reads this node forwarded, by id, with deadlines."""

    def __init__(self, name: str, config: MetaConfig, rng: random.Random, out: Outbox,
                 counters: MetaCounters, controller: Callable[[], tuple[str, int] | None],
                 addr_of: Callable[[str], Address | None]) -> None:  # fmt: skip
        self.name, self.config, self.out, self.counters = name, config, out, counters
        self._controller, self._addr_of = controller, addr_of
        # Ids start at random, so a restarted node's are not its last run's
        # (the state machine skips a proposal id it applied before).
        self._next_id = rng.getrandbits(48)
        self._asked: dict[int, float] = {}  # pid -> deadline
        self._reading: dict[int, float] = {}  # rid -> deadline
        self._renewing: dict[int, float] = {}  # rid -> deadline (session keepalives)

    def next_id(self) -> int:
        """A new proposal or read id."""
        self._next_id += 1
        return self._next_id

    def _controller_addr(self) -> tuple[Address, int] | None:
        known = self._controller()
        addr = None if known is None else self._addr_of(known[0])
        if known is None or addr is None or known[0] == self.name:
            return None
        return addr, known[1]

    def propose(self, pid: int, op: MetaOp, now: float) -> None:
        """Forward proposal `pid` to the controller (not applied: none known)."""
        to = self._controller_addr()
        if to is None:
            self.counters.proposals_not_applied += 1
            self.out.event(ProposalDone(pid, OUTCOME_NOT_APPLIED, 0))
            return
        self._asked[pid] = now + self.config.answer_timeout_s
        self.out.send(Send(to[0], (Propose(self.name, pid, op, to[1]),)))

    def read(self, rid: int, key: bytes, now: float) -> None:
        """Ask the controller for read `rid` (not served: none known)."""
        to = self._controller_addr()
        if to is None:
            self.out.event(ReadDone(rid, False, None, 0, 0))
            return
        self._reading[rid] = now + self.config.answer_timeout_s
        self.out.send(Send(to[0], (ReadRequest(self.name, rid, key),)))

    def keepalive(self, rid: int, ids: tuple[bytes, ...], now: float) -> None:
        """Ask the controller to renew sessions `ids` (not served: none known)."""
        to = self._controller_addr()
        if to is None:
            self.out.event(KeepaliveDone(rid, False))
            return
        self._renewing[rid] = now + self.config.answer_timeout_s
        self.out.send(Send(to[0], (Keepalive(self.name, rid, ids),)))

    def on_keepalive_result(self, msg: KeepaliveResult, sender: Address, now: float) -> None:
        """The controller's answer to one of our renewals."""
        if self._renewing.pop(msg.rid, None) is not None:
            self.out.event(KeepaliveDone(msg.rid, msg.ok, msg.ended))

    def expire(self, now: float) -> None:
        """Answer what timed out: a write unknown, a read not served."""
        for pid, deadline in list(self._asked.items()):
            if now >= deadline:
                del self._asked[pid]
                self.counters.proposals_unknown += 1
                self.out.event(ProposalDone(pid, OUTCOME_UNKNOWN, 0))
        for rid, deadline in list(self._reading.items()):
            if now >= deadline:
                del self._reading[rid]
                self.out.event(ReadDone(rid, False, None, 0, 0))
        for rid, deadline in list(self._renewing.items()):
            if now >= deadline:
                del self._renewing[rid]
                self.out.event(KeepaliveDone(rid, False))

    def deadlines(self) -> list[float]:
        """When each answer times out."""
        return [*self._asked.values(), *self._reading.values(), *self._renewing.values()]

    def answer(self, origin: str, result: ProposeResult | ReadResult) -> None:
        """The leader's answer to `origin`'s proposal or read: an event
        when this node asked it, else a message to the origin."""
        if type(result) is ProposeResult and result.outcome == OUTCOME_UNKNOWN:
            self.counters.proposals_unknown += 1
        if origin != self.name:
            addr = self._addr_of(origin)
            if addr is not None:
                self.out.send(Send(addr, (result,)))
        elif type(result) is ProposeResult:
            self.out.event(ProposalDone(result.pid, result.outcome, result.revision, result.txn))
        else:
            assert type(result) is ReadResult
            self.out.event(ReadDone(result.rid, result.ok, result.value, result.mod_revision,
                                    result.revision))  # fmt: skip

    def on_result(self, msg: ProposeResult, sender: Address, now: float) -> None:
        """The controller's answer to one of our proposals."""
        if self._asked.pop(msg.pid, None) is None:
            return  # answered already (timed out as unknown), or not ours
        outcome = msg.outcome
        if outcome == OUTCOME_NOT_APPLIED:
            # The controller asked no longer leads that epoch, but it may
            # have appended a copy of this proposal while it did (a
            # duplicated datagram answered after the original was appended:
            # the swarm's checker found it), and that copy may yet commit.
            # Only a write never sent is surely not applied.
            outcome = OUTCOME_UNKNOWN
        if outcome == OUTCOME_UNKNOWN:
            self.counters.proposals_unknown += 1
        self.out.event(ProposalDone(msg.pid, outcome, msg.revision, msg.txn))

    def on_read_result(self, msg: ReadResult, sender: Address, now: float) -> None:
        """The controller's answer to one of our reads."""
        if self._reading.pop(msg.rid, None) is None:
            return
        self.out.event(ReadDone(msg.rid, msg.ok, msg.value, msg.mod_revision, msg.revision))
