"""ReadIndex (Ongaro's thesis §6.4): the leader's reads waiting for a
majority to confirm, under its epoch, a heartbeat round sent after they
arrived.

Each read notes the commit index when it arrived and the round it waits
for (`seq`); a round is confirmed by a voter's answer to it or to any later
round. A read asked before the leader has committed an entry of its own
epoch waits for that first (`early`): until then its commit index may be
behind entries committed by an earlier controller. No clock is read.

`Reading` is the leader's side of it in `MetaLog` (core.py): a read asked
here or forwarded by another agent, confirmed, then served from the
applied state. Pure.
"""

from __future__ import annotations

from collections.abc import Callable

from shoal.kernel.contract import Address, Send
from shoal.kernel.outbox import Outbox
from shoal.metalog.events import MetaCounters
from shoal.metalog.messages import ReadRequest, ReadResult
from shoal.metalog.origin import Origin
from shoal.metalog.state import MetaState

Read = tuple[int, int, str, int, bytes]
"""(round, commit index when asked, origin, read id, key)."""


class ReadIndex:
    """The reads a leader holds, and the rounds its voters confirmed."""

    def __init__(self) -> None:
        self.seq = 0  # the last round started
        self.acked: dict[str, int] = {}  # voter -> the latest round it answered
        self.waiting: list[Read] = []
        self.early: list[tuple[str, int, bytes]] = []  # before our epoch's first commit

    def reset(self) -> None:
        """A new leadership: nothing confirmed yet."""
        self.acked = {}

    def start(self, origin: str, rid: int, key: bytes, commit: int) -> None:
        """A read arrives at `commit`: it waits for the next round."""
        self.seq += 1
        self.waiting.append((self.seq, commit, origin, rid, key))

    def answered(self, voter: str, seq: int) -> None:
        """`voter` answered round `seq` under our epoch."""
        if seq > self.acked.get(voter, 0):
            self.acked[voter] = seq

    def ready(self, me: str, applied: int,
              quorum: Callable[[Callable[[str], bool]], bool]) -> list[Read]:  # fmt: skip
        """The reads now confirmed by a `quorum` and applied; they leave."""
        acked = self.acked
        kept: list[Read] = []
        done: list[Read] = []
        for read in self.waiting:
            seq, index = read[0], read[1]

            def confirmed(voter: str, seq: int = seq) -> bool:
                return voter == me or acked.get(voter, 0) >= seq

            (done if applied >= index and quorum(confirmed) else kept).append(read)
        self.waiting = kept
        return done

    def drop(self) -> list[tuple[str, int]]:
        """The leadership ended: every read waiting, as (origin, read id)."""
        dropped = [(origin, rid) for _, _, origin, rid, _ in self.waiting]
        dropped += [(origin, rid) for origin, rid, _ in self.early]
        self.waiting, self.early = [], []
        return dropped


class Reading:
    """The leader's reads (a part of `MetaLog`, which sets everything declared here)."""

    mutation: str | None  # MetaLog's deliberate bug, "read_without_quorum" here
    name: str
    epoch: int | None
    commit: int
    state: MetaState
    out: Outbox
    counters: MetaCounters
    _reads: ReadIndex
    _noop_index: int
    _origin: Origin

    def _replicate(self, now: float, heartbeat: bool) -> None:
        raise NotImplementedError  # MetaLog's

    def _quorum(self, has: Callable[[str], bool]) -> bool:
        raise NotImplementedError  # MetaLog's

    def _on_read(self, msg: ReadRequest, sender: Address, now: float) -> None:
        if self.epoch is None:
            self.out.send(Send(sender, (ReadResult(msg.rid, False, None, 0, 0),)))
            return
        self._start_read(msg.origin, msg.rid, msg.key, now)

    def _start_read(self, origin: str, rid: int, key: bytes, now: float) -> None:
        """ReadIndex: note the commit index, confirm leadership with a fresh
        heartbeat round, answer once a majority acknowledged it."""
        if self.mutation == "read_without_quorum":
            self._answer_read(origin, rid, key)
            return
        if self.commit < self._noop_index:
            self._reads.early.append((origin, rid, key))  # our epoch's entry first
            return
        self._reads.start(origin, rid, key, self.commit)
        self._replicate(now, heartbeat=True)
        self._serve_reads()

    def _serve_reads(self) -> None:
        if self._reads.waiting:
            for _, _, origin, rid, key in self._reads.ready(self.name, self.state.revision,
                                                            self._quorum):  # fmt: skip
                self._answer_read(origin, rid, key)

    def _answer_read(self, origin: str, rid: int, key: bytes | None) -> None:
        """Serve (`key`) or refuse (None) a read from the applied state."""
        if key is None:
            answer = ReadResult(rid, False, None, 0, 0)
        else:
            self.counters.reads_served += 1
            held = self.state.get(key)
            answer = ReadResult(
                rid,
                True,
                None if held is None else held.value,
                0 if held is None else held.mod_revision,
                self.state.revision,
            )
        self._origin.answer(origin, answer)
