"""The entries of one node's metadata log, in memory, and what to persist.

Raft's log (etcd raft's `raftLog`, without its unstable/stable split: the
core hands every change to the driver as a `PersistLog` and the driver
makes it durable before anything that relies on it leaves). Indexes start
at 1; index 0 is the empty log's (epoch 0). No compaction yet: the whole
log is kept (snapshots are the next step of the metadata-log issue).
"""

from __future__ import annotations

import msgspec

from shoal.metalog.messages import Entry


class PersistLog(msgspec.Struct, frozen=True):
    """Replace the log from `from_index` on with `entries` (a truncation
    of a conflicting tail, then an append), durably."""

    from_index: int
    entries: tuple[Entry, ...]


class Log:
    """The entries, and the changes not yet handed to the driver."""

    def __init__(self, entries: tuple[Entry, ...] = ()) -> None:
        self.entries: list[Entry] = list(entries)
        assert all(e.index == i + 1 for i, e in enumerate(self.entries))
        self._dirty_from: int | None = None  # the first index changed since `take_persist`

    @property
    def last_index(self) -> int:
        """The index of the last entry (0: empty)."""
        return len(self.entries)

    def held_from(self) -> int:
        """The first index the log still holds (entries before it are
        compacted; 1: none are). A watch is served from here on."""
        return 1

    def last(self) -> tuple[int, int]:
        """(epoch, index) of the last entry: what the voters compare."""
        n = len(self.entries)
        return (self.entries[-1].epoch, n) if n else (0, 0)

    def epoch_at(self, index: int) -> int | None:
        """The epoch of the entry at `index` (0 for index 0; None: none there)."""
        if index == 0:
            return 0
        if 0 < index <= len(self.entries):
            return self.entries[index - 1].epoch
        return None

    def since(self, index: int, limit: int) -> tuple[Entry, ...]:
        """Up to `limit` entries from `index` on."""
        return tuple(self.entries[index - 1 : index - 1 + limit])

    def append(self, entry: Entry) -> None:
        """The controller appends an entry of its own."""
        assert entry.index == len(self.entries) + 1
        self.entries.append(entry)
        self._mark(entry.index)

    def merge(self, entries: tuple[Entry, ...]) -> None:
        """A follower takes `entries` (which follow an entry it holds): a
        conflicting tail (same index, another epoch) is cut off first;
        entries it holds already are kept as they are (Raft §5.3)."""
        for e in entries:
            held = self.epoch_at(e.index)
            if held == e.epoch:
                continue
            if held is not None:
                del self.entries[e.index - 1 :]
            assert e.index == len(self.entries) + 1
            self.entries.append(e)
            self._mark(e.index)

    def take_persist(self) -> PersistLog | None:
        """The changes since the last call, as one write (None: none)."""
        start = self._dirty_from
        if start is None:
            return None
        self._dirty_from = None
        return PersistLog(start, tuple(self.entries[start - 1 :]))

    def _mark(self, index: int) -> None:
        if self._dirty_from is None or index < self._dirty_from:
            self._dirty_from = index
