"""GcPauses: how long each of Python's garbage collections stopped the agent.

The cyclic collector runs inside whatever allocation crosses its
threshold, on the event loop's thread: while it runs, the agent answers
nothing. `gc.callbacks` tells when each collection starts and stops;
this keeps, per generation, how many there were, their total and longest
time, and a histogram (exported as `shoal_gc_pause_seconds`, api/metrics.py).
A callback costs a clock read per collection, nothing between them.
"""

from __future__ import annotations

import gc
import time
from typing import Any

import msgspec

# Upper bounds of the histogram's buckets, in seconds (+Inf is implied).
BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)


class GcStatus(msgspec.Struct, frozen=True):
    """The collections so far, one entry per generation (0, 1, 2)."""

    counts: list[int]
    seconds: list[float]  # their total time
    longest: list[float]
    buckets: list[list[int]]  # per generation: collections <= BUCKETS[i], not cumulative


class GcPauses:
    """Times every collection through `gc.callbacks` once installed."""

    def __init__(self) -> None:
        self.counts = [0, 0, 0]
        self.seconds = [0.0, 0.0, 0.0]
        self.longest = [0.0, 0.0, 0.0]
        self.buckets = [[0] * (len(BUCKETS) + 1) for _ in range(3)]
        self._began = 0.0

    def install(self) -> None:
        gc.callbacks.append(self._on_gc)

    def remove(self) -> None:
        if self._on_gc in gc.callbacks:
            gc.callbacks.remove(self._on_gc)

    def _on_gc(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._began = time.perf_counter()
            return
        took = time.perf_counter() - self._began
        generation: int = info["generation"]
        self.counts[generation] += 1
        self.seconds[generation] += took
        self.longest[generation] = max(self.longest[generation], took)
        self.buckets[generation][_bucket(took)] += 1

    def status(self) -> GcStatus:
        return GcStatus(list(self.counts), list(self.seconds), list(self.longest),
                        [list(b) for b in self.buckets])  # fmt: skip


def _bucket(took: float) -> int:
    for i, bound in enumerate(BUCKETS):
        if took <= bound:
            return i
    return len(BUCKETS)


def settle_collector(pauses: GcPauses) -> None:
    """Once the agent runs: what start-up built is frozen out of the
    collector (it lives as long as the agent), the pauses are timed, and
    the collector is turned on."""
    import os

    gc.freeze()
    pauses.install()
    wanted = os.environ.get("SHOAL_GC_THRESHOLD")
    if wanted:
        gc.set_threshold(*(int(n) for n in wanted.split(",")))
    gc.enable()
