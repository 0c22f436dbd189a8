"""The entries of one node's metadata log, in memory, and what to persist.

Raft's log (etcd raft's `raftLog`, without its unstable/stable split: the
core hands every change to the driver as a `PersistLog` and the driver
makes it durable before anything that relies on it leaves). Indexes start
at 1; index 0 is the empty log's (epoch 0). Compaction (metalog/snapshot.py)
drops a prefix: the log then holds the entries after `offset`, and knows
the epoch of the entry at `offset` (etcd raft's `dummy entry`), so that an
append following it can still be checked.
"""

from __future__ import annotations

import msgspec

from shoal.metalog.messages import Entry
from shoal.metalog.snapshot import Snapshot, restore
from shoal.metalog.state import MetaState


class PersistLog(msgspec.Struct, frozen=True):
    """Replace the log from `from_index` on with `entries` (a truncation
    of a conflicting tail, then an append), durably."""

    from_index: int
    entries: tuple[Entry, ...]


class Log:
    """The entries, and the changes not yet handed to the driver."""

    def __init__(self, entries: tuple[Entry, ...] = (), offset: int = 0,
                 offset_epoch: int = 0) -> None:  # fmt: skip
        """`entries` follow index `offset`, whose entry is of `offset_epoch`
        (compacted into a snapshot; 0, 0: the log from its start)."""
        self.offset, self.offset_epoch = offset, offset_epoch
        self.entries: list[Entry] = list(entries)
        assert all(e.index == offset + i + 1 for i, e in enumerate(self.entries))
        self._dirty_from: int | None = None  # the first index changed since `take_persist`

    @property
    def last_index(self) -> int:
        """The index of the last entry (0: empty)."""
        return self.offset + len(self.entries)

    def held_from(self) -> int:
        """The first index the log still holds (entries before it are
        compacted into a snapshot; 1: none are). A watch is served from
        here on."""
        return self.offset + 1

    def last(self) -> tuple[int, int]:
        """(epoch, index) of the last entry: what the voters compare."""
        return (self.entries[-1].epoch if self.entries else self.offset_epoch, self.last_index)

    def epoch_at(self, index: int) -> int | None:
        """The epoch of the entry at `index` (0 for index 0; None: none
        there, or compacted away)."""
        at = index - self.offset
        if at == 0:
            return self.offset_epoch
        if 0 < at <= len(self.entries):
            return self.entries[at - 1].epoch
        return None

    def entry(self, index: int) -> Entry:
        """The entry at `index` (held: after `offset`)."""
        assert index > self.offset, f"entry {index} compacted (log from {self.offset + 1})"
        return self.entries[index - self.offset - 1]

    def since(self, index: int, limit: int) -> tuple[Entry, ...]:
        """Up to `limit` entries from `index` on (after `offset`)."""
        at = index - self.offset - 1
        assert at >= 0, f"entries from {index} compacted"
        return tuple(self.entries[at : at + limit])

    def append(self, entry: Entry) -> None:
        """The controller appends an entry of its own."""
        assert entry.index == self.last_index + 1
        self.entries.append(entry)
        self._mark(entry.index)

    def compact(self, through: int) -> None:
        """Forget the entries up to `through` (in a snapshot now)."""
        if through <= self.offset:
            return
        epoch = self.epoch_at(through)
        assert epoch is not None and through <= self.last_index
        del self.entries[: through - self.offset]
        self.offset, self.offset_epoch = through, epoch

    def install(self, index: int, epoch: int) -> int:
        """A snapshot at `index` (of `epoch`) replaces the log: the entries
        after it are kept if the log holds that entry (Raft §7: they may be
        what a majority confirmed), else everything goes. Returns the last
        index whose entry the driver must delete."""
        if self.epoch_at(index) == epoch:
            self.compact(index)
            return index
        last = self.last_index
        self.entries = []
        self.offset, self.offset_epoch = index, epoch
        self._dirty_from = None
        return max(last, index)

    def merge(self, entries: tuple[Entry, ...]) -> None:
        """A follower takes `entries` (which follow an entry it holds): a
        conflicting tail (same index, another epoch) is cut off first;
        entries it holds already are kept as they are (Raft §5.3)."""
        for e in entries:
            held = self.epoch_at(e.index)
            if held == e.epoch:
                continue
            if held is not None:
                assert e.index > self.offset, "a compacted (committed) entry conflicts"
                del self.entries[e.index - self.offset - 1 :]
            assert e.index == self.last_index + 1
            self.entries.append(e)
            self._mark(e.index)

    def take_persist(self) -> PersistLog | None:
        """The changes since the last call, as one write (None: none)."""
        start = self._dirty_from
        if start is None:
            return None
        self._dirty_from = None
        start = max(start, self.offset + 1)
        return PersistLog(start, tuple(self.entries[start - self.offset - 1 :]))

    def _mark(self, index: int) -> None:
        if self._dirty_from is None or index < self._dirty_from:
            self._dirty_from = index


def resume(snapshot: Snapshot | None, entries: tuple[Entry, ...]) -> tuple[Log, MetaState]:
    """The log and state machine a previous run left: the snapshot's state,
    and the entries after it (those before it, a kept tail, are dropped)."""
    if snapshot is None:
        return Log(entries), MetaState()
    after = tuple(e for e in entries if e.index > snapshot.index)
    return Log(after, snapshot.index, snapshot.epoch), restore(snapshot)
