"""Deadlines: one typed heap of due work per core.

A core pushes `(at, handler, arg)`; `tick(now)` pops and runs what is due, in
time order (ties in push order, so runs are deterministic). The cost of a
tick is O(work due · log n), not O(members): at 10,000 simulated nodes a scan
per tick would dominate (STYLE.md §1, "timers are deadlines").

Handlers are bound methods taking `(arg, now)`; a stale entry (a probe that
was answered, a suspicion already refuted) is the handler's to ignore, which
is cheaper than removing it from the heap.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable
from typing import Any

Handler = Callable[[Any, float], None]


class Deadlines:
    """A min-heap of (at, seq, handler, arg)."""

    __slots__ = ("_heap", "_seq")

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, Handler, Any]] = []
        self._seq = itertools.count()

    def push(self, at: float, handler: Handler, arg: Any = None) -> None:
        """Run `handler(arg, now)` at the first tick at or after `at`."""
        heapq.heappush(self._heap, (at, next(self._seq), handler, arg))

    def run_due(self, now: float) -> None:
        """Run every handler due at or before `now` (including ones that
        become due while they run)."""
        heap = self._heap
        while heap and heap[0][0] <= now:
            _, _, handler, arg = heapq.heappop(heap)
            handler(arg, now)

    def next_at(self) -> float | None:
        """The earliest deadline, or None when nothing is pending."""
        return self._heap[0][0] if self._heap else None

    def __len__(self) -> int:
        return len(self._heap)
