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
        self.transmits = 0  # also its bucket; -1 once replaced


class BroadcastQueue:
    """Transmit-limited, invalidating queue of gossip updates."""

    # After this many entries that do not fit, the datagram is as full as
    # it will usefully get; scanning on would cost O(queue).
    _MAX_MISSES = 16

    def __init__(self) -> None:
        self._by_key: dict[str, _Entry] = {}
        # Bucket t lists, oldest first, the entries sent t times, and stale
        # references to entries that have moved on (sent again, replaced,
        # dropped): an entry is in bucket t when its `transmits` is t. Moving
        # an entry is an increment and an append, where buckets that were
        # dicts by key cost a delete and an insert: `take` went from 15 % to
        # 10 % of `shoal simulate --nodes 1000 --duration 20` (perf, compiled).
        # Picked entries leave from the tail; a list mostly stale is compacted.
        self._buckets: list[list[_Entry]] = []
        self._live: list[int] = []  # entries really in each bucket
        self._sizes: dict[int, int] = {}  # encoded size -> entries queued

    def __len__(self) -> int:
        return len(self._by_key)

    def push(self, key: str, message: Any, size: int) -> None:
        """Queue `message` (of `size` encoded bytes), replacing any older one for `key`."""
        old = self._by_key.pop(key, None)
        if old is not None:
            t = old.transmits
            self._live[t] -= 1
            old.transmits = -1
            self._forget_size(old.size)
            self._tidy(t)
        entry = _Entry(key, message, size)
        self._by_key[key] = entry
        if not self._buckets:
            self._buckets.append([])
            self._live.append(0)
        self._buckets[0].append(entry)
        self._live[0] += 1
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
        live = self._live
        # The hottest loop of a mass join: locals only, one test per branch.
        for t, bucket in enumerate(self._buckets):
            if not live[t]:
                continue
            for entry in reversed(bucket):
                if entry.transmits != t:
                    continue  # moved on
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
        live = self._live
        by_key = self._by_key
        left: list[int] = []  # buckets some entries left
        for entry in picked:
            t = entry.transmits
            live[t] -= 1
            if not left or left[-1] != t:
                left.append(t)
            t += 1
            entry.transmits = t
            if t >= limit:
                del by_key[entry.key]
                self._forget_size(entry.size)
            else:
                if t == len(buckets):
                    buckets.append([])
                    live.append(0)
                buckets[t].append(entry)
                live[t] += 1
        for t in left:
            self._tidy(t)
        if not by_key:
            self._by_key = {}  # a dict never gives back the table it grew to

    def _tidy(self, t: int) -> None:
        """Drop the stale references at the tail of bucket `t`, and compact it
        when most of it is stale (an empty one is replaced: a list never
        gives back what it grew to, hundreds of bytes per former entry)."""
        bucket = self._buckets[t]
        n = self._live[t]
        if not n:
            self._buckets[t] = []
            return
        while bucket[-1].transmits != t:
            bucket.pop()
        if len(bucket) > 2 * n + 16:
            self._buckets[t] = [e for e in bucket if e.transmits == t]

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
