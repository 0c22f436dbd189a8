"""SimDisk: one simulated host's disk, written the way the agent writes it.

The agent (daemon/agent.py) syncs the incarnation in place, and writes the
election's state unsynced, then makes it durable with a group commit off the
event loop (daemon/disk/commit.py): one fsync covers every write made before it
starts, a write made while one runs waits for the next. Meanwhile the sends
that the `Persist` items release are held, in order, and leave together once
every write so far is durable. This models exactly that, with an fsync
latency drawn per sync, and a crash that loses what was not yet synced (and
the held sends with it). With a latency of 0 every write is durable at once
and nothing is held: the simulator's behaviour before it modelled the disk.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from shoal.election.voters import VoterConfig
from shoal.kernel.contract import Send
from shoal.metalog.log import PersistLog
from shoal.metalog.messages import Entry
from shoal.metalog.snapshot import PersistSnapshot, Snapshot

ElectionState = tuple[int, VoterConfig | None]
"""(highest epoch granted, voter configuration), as `PersistElection` holds."""

FsyncLatency = Callable[[random.Random], float]
"""Draws one fsync's latency in seconds."""


class SimDisk:
    """What survives a crash of one host, and what waits for its fsync."""

    __slots__ = ("incarnation", "election", "_written", "_writes", "_durable", "_syncing",
                 "_covers", "_held", "crashes", "log", "_log_written", "_log_covers",
                 "wiped", "snapshot", "_snap_written", "_snap_covers")  # fmt: skip

    def __init__(self) -> None:
        self.incarnation = 0  # synced in place, as the agent does
        self.election: ElectionState = (0, None)  # durable
        self._written: ElectionState = (0, None)  # latest, maybe not durable
        # The metadata log (metalog/): durable entries and snapshot, and the
        # latest written (the entries, contiguous, from any index).
        self.log: tuple[Entry, ...] = ()
        self._log_written: list[Entry] = []
        self._log_covers: tuple[Entry, ...] = ()
        self.snapshot: Snapshot | None = None
        self._snap_written: Snapshot | None = None
        self._snap_covers: Snapshot | None = None
        self.wiped = 0  # times the disk was lost (a new data directory)
        self._writes = 0
        self._durable = 0  # writes covered by completed syncs
        self._syncing = False
        self._covers: tuple[int, ElectionState] = (0, (0, None))
        self._held: list[Send] = []
        self.crashes = 0  # a sync that started before a crash never completes

    @property
    def pending(self) -> bool:
        """Whether a write is not yet durable."""
        return self._durable < self._writes

    def write_election(self, state: ElectionState) -> bool:
        """Write unsynced; True when a sync must start now (none running)."""
        self._written = state
        self._writes += 1
        return not self._syncing

    def write_log(self, write: PersistLog | PersistSnapshot) -> bool:
        """Write log entries unsynced (the tail from `from_index` replaced),
        or a snapshot and the log's compaction behind it (one atomic
        write); True when a sync must start now."""
        self._write_log(write)
        self._writes += 1
        return not self._syncing

    def write_log_synced(self, write: PersistLog | PersistSnapshot) -> None:
        """The same, durable at once (no fsync latency modelled)."""
        self._write_log(write)
        self.log, self.snapshot = tuple(self._log_written), self._snap_written

    def _write_log(self, write: PersistLog | PersistSnapshot) -> None:
        held = self._log_written
        if isinstance(write, PersistSnapshot):
            self._snap_written = write.snapshot
            self._log_written = [e for e in held if e.index > write.drop_through]
            return
        first = held[0].index if held else write.from_index
        assert first <= write.from_index <= first + len(held), "a gap in the log"
        del held[write.from_index - first :]
        held.extend(write.entries)

    def start_sync(self) -> None:
        """A sync starts: it covers every write made so far."""
        assert not self._syncing
        self._syncing = True
        self._covers = (self._writes, self._written)
        self._log_covers = tuple(self._log_written)
        self._snap_covers = self._snap_written

    def sync_done(self) -> tuple[list[Send], bool]:
        """The running sync completed. Returns the sends it releases (all
        held ones once everything written is durable) and whether another
        sync must start (writes arrived meanwhile)."""
        self._syncing = False
        self._durable, self.election = self._covers
        self.log, self.snapshot = self._log_covers, self._snap_covers
        if self.pending:
            return [], True
        held, self._held = self._held, []
        return held, False

    def release(self, sends: tuple[Send, ...]) -> tuple[Send, ...]:
        """Sends released by a `Persist`: the ones that may leave now (none
        while any write is not yet durable; those are held, in order)."""
        if self.pending or self._held:
            self._held.extend(sends)
            return ()
        return sends

    def crash(self) -> None:
        """The host stops: unsynced writes and held sends are lost."""
        self._written = self.election
        self._log_written = list(self.log)
        self._snap_written = self.snapshot
        self._writes = self._durable
        self._syncing = False
        self._held = []
        self.crashes += 1

    def wipe(self) -> None:
        """The disk is lost (replaced, or its data directory removed): the
        node comes back with nothing, as a new data directory."""
        self.crash()
        self.incarnation = 0
        self.election = self._written = (0, None)
        self.log, self._log_written = (), []
        self.snapshot = self._snap_written = None
        self.wiped += 1
