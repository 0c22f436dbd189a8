"""BroadcastQueue: updates waiting to be piggybacked (SWIM §4.1).

Each update about a member is sent a limited number of times (about λ·log N,
see `SwimConfig.retransmit_limit`), least-sent first, as memberlist's
TransmitLimitedQueue does; among equals, the one that most recently reached
that count goes first (memberlist orders those strictly by age; the
difference does not change how fast news spreads, and keeps picking cheap). A newer update about the
same member replaces the older one at once, so stale news is never spread.

Entries sit in buckets by how often they were sent; picking walks the buckets
from the least-sent upwards and stops when the byte budget is full, so one
call costs about what it returns, not the queue length (which reaches the
cluster size during a mass join). "Full" means that the room left is smaller
than the smallest message queued (a histogram of sizes tells which); without
that test a typical pick scanned 50 entries that could not fit for every 29
it took.
"""

from __future__ import annotations

from typing import Any


class _Entry:
    __slots__ = ("key", "message", "size", "transmits")

    def __init__(self, key: str, message: Any, size: int) -> None:
        self.key = key
        self.message = message
        self.size = size
        self.transmits = 0


class BroadcastQueue:
    """Transmit-limited, invalidating queue of gossip updates."""

    # After this many entries that do not fit, the datagram is as full as
    # it will usefully get; scanning on would cost O(queue).
    _MAX_MISSES = 16

    def __init__(self) -> None:
        self._by_key: dict[str, _Entry] = {}
        self._buckets: list[dict[str, _Entry]] = []
        self._sizes: dict[int, int] = {}  # encoded size -> entries queued

    def __len__(self) -> int:
        return len(self._by_key)

    def push(self, key: str, message: Any, size: int) -> None:
        """Queue `message` (of `size` encoded bytes), replacing any older one for `key`."""
        old = self._by_key.pop(key, None)
        if old is not None:
            del self._buckets[old.transmits][key]
            self._forget_size(old.size)
        entry = _Entry(key, message, size)
        self._by_key[key] = entry
        self._bucket(0)[key] = entry
        sizes = self._sizes
        sizes[size] = sizes.get(size, 0) + 1

    def take(self, budget_bytes: int, limit: int) -> list[Any]:
        """Messages that fit in `budget_bytes`, each counted as sent once more.

        Args:
            budget_bytes: room left in the datagram.
            limit: how many sends an update gets before it is dropped.

        Returns:
            The chosen messages, least-sent and newest first.
        """
        if not self._by_key:
            return []
        picked = self._pick(budget_bytes)
        self._count_sent(picked, limit)
        return [entry.message for entry in picked]

    def _pick(self, budget_bytes: int) -> list[_Entry]:
        """The entries that fit in `budget_bytes`, least-sent and newest first."""
        picked: list[_Entry] = []
        room = budget_bytes
        # Below the smallest queued size nothing more can fit.
        smallest = min(self._sizes)
        misses = 0
        # The hottest loop of a mass join: locals only, one test per branch.
        for bucket in self._buckets:
            if not bucket:
                continue
            for entry in reversed(bucket.values()):
                size = entry.size
                if size <= room:
                    picked.append(entry)
                    room -= size
                    if room < smallest:
                        break
                else:
                    misses += 1
                    if misses >= self._MAX_MISSES or room < smallest:
                        break
            else:
                continue
            break
        return picked

    def _count_sent(self, picked: list[_Entry], limit: int) -> None:
        """Move each picked entry one bucket up, or drop it at `limit` sends."""
        buckets = self._buckets
        by_key = self._by_key
        emptied: list[int] = []
        for entry in picked:
            t = entry.transmits
            key = entry.key
            bucket = buckets[t]
            del bucket[key]
            if not bucket:
                emptied.append(t)
            t += 1
            entry.transmits = t
            if t >= limit:
                del by_key[key]
                self._forget_size(entry.size)
            else:
                if t == len(buckets):
                    buckets.append({})
                buckets[t][key] = entry
        if emptied:
            # A dict never gives back the table it grew to: after a mass
            # join an empty bucket would keep hundreds of bytes per former
            # entry. Only the buckets this pick emptied are replaced (every
            # empty one was: up to 16 new dicts per pick at 1,000 nodes).
            for t in emptied:
                if not buckets[t]:
                    buckets[t] = {}
            if not by_key:
                self._by_key = {}

    def pending(self, key: str) -> Any | None:
        """The queued message for `key`, if any."""
        entry = self._by_key.get(key)
        return entry.message if entry is not None else None

    def _forget_size(self, size: int) -> None:
        sizes = self._sizes
        left = sizes[size] - 1
        if left:
            sizes[size] = left
        else:
            del sizes[size]

    def _bucket(self, transmits: int) -> dict[str, _Entry]:
        while len(self._buckets) <= transmits:
            self._buckets.append({})
        return self._buckets[transmits]
