"""ReadIndex (Ongaro's thesis §6.4): the leader's reads waiting for a
majority to confirm, under its epoch, a heartbeat round sent after they
arrived.

Each read notes the commit index when it arrived and the round it waits
for (`seq`); a round is confirmed by a voter's answer to it or to any later
round. A read asked before the leader has committed an entry of its own
epoch waits for that first (`early`): until then its commit index may be
behind entries committed by an earlier controller. No clock is read.
"""

from __future__ import annotations

from collections.abc import Callable

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
