"""GcPauses: Python's garbage collections in the agent, timed and kept short.

The cyclic collector runs inside whatever allocation crosses its
threshold, on the event loop's thread: while it runs, the agent answers
nothing. A full (generation-2) collection walks every tracked object, and
CPython 3.11 runs one whenever the objects promoted since the last grow
past a quarter of those it kept then: while a restore or a load doubles
what the agent holds (10^5 records: the Merkle tree's lists, the change
log's 65,536 entries), that is a full pass over a few hundred thousand
objects every second or two.

**Survivors are frozen.** After each full collection, what survived it is
moved to the permanent generation (`gc.freeze()`, as the agent's start
does with what start-up built), so the next full pass walks only what came
since. A frozen object is still freed by its reference count, as nearly
everything here is (records, tree nodes, change entries); only a cycle
that dies while frozen waits. So that such cycles cannot pile up, a full
collection once the frozen objects are THAW_FACTOR times as many as after
the last thorough one thaws them first (`gc.unfreeze()`) and walks
everything: what waits is bounded by what the agent holds, at the cost of
one pass as long as Python's per doubling of it (Python's own: one per
quarter). Measured (bench/gc_pauses.py: three agents, 10^5 metadata keys
and 10^5 kv records, an online restore, then 120 s of overwrites; load
average 5-16 on 2 cores, pure-Python build; docs/performance.md, "Garbage
collection"): during the restore, full passes took 0.4-1.2 s in all per
agent against Python's 0.8-5.0 s, the longest 100-436 ms (760 ms a
thorough one) against 381-1,104 ms; in 120 s of steady writes 0.21-0.43 s
against 0.73-1.06 s; the resident memory grew the same either way.
Tried and not taken: a young generation of 50,000
(`gc.set_threshold(50_000, 20, 100)`): no full pass in the run, but each
young one then walks the big containers made since, 207-448 ms each.

`gc.callbacks` tells when each collection starts and stops; this keeps,
per generation, how many there were, their total and longest time, and a
histogram (`shoal_gc_pause_seconds`, api/metrics.py). A callback costs a
clock read per collection, nothing between them.

Two environment variables, for benches and tests only (read at start):
SHOAL_GC_THRESHOLD=a,b,c sets `gc.set_threshold`, and
SHOAL_GC_FREEZE_SURVIVORS=0 keeps survivors unfrozen (Python's own way).
"""

from __future__ import annotations

import gc
import os
import time
from typing import Any

import msgspec

# Upper bounds of the histogram's buckets, in seconds (+Inf is implied).
BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
COUNT_EVERY = 8  # full collections between two counts of the frozen objects
THAW_FACTOR = 2  # a full collection thaws everything once this many times as much is frozen


class GcStatus(msgspec.Struct, frozen=True):
    """The collections so far, one entry per generation (0, 1, 2)."""

    counts: list[int]
    seconds: list[float]  # their total time
    longest: list[float]
    buckets: list[list[int]]  # per generation: collections <= BUCKETS[i], not cumulative
    frozen: int  # objects in the permanent generation, as last counted
    thawed: int  # full collections that walked the frozen objects too


class GcPauses:
    """Times every collection through `gc.callbacks` once installed and,
    with `freeze_survivors`, freezes what each full collection kept."""

    def __init__(self, freeze_survivors: bool = True) -> None:
        self.freeze_survivors = freeze_survivors
        self.counts = [0, 0, 0]
        self.seconds = [0.0, 0.0, 0.0]
        self.longest = [0.0, 0.0, 0.0]
        self.buckets = [[0] * (len(BUCKETS) + 1) for _ in range(3)]
        self.thawed = 0
        self._began = 0.0
        self.frozen = 0  # objects frozen, as last counted
        self._full = 0  # full collections that froze their survivors
        self._frozen_after_thaw = 0  # the same, after the last thorough collection

    def install(self) -> None:
        # gc.get_freeze_count() walks the permanent generation's list (11 ms
        # at 4 * 10^5 objects, a quarter of a full collection over them):
        # counted after every COUNT_EVERY-th full collection only, and after
        # a thorough one, never per scrape or health check.
        self.frozen = self._frozen_after_thaw = gc.get_freeze_count()
        gc.callbacks.append(self._on_gc)

    def remove(self) -> None:
        if self._on_gc in gc.callbacks:
            gc.callbacks.remove(self._on_gc)

    def _on_gc(self, phase: str, info: dict[str, Any]) -> None:
        generation: int = info["generation"]
        if phase == "start":
            self._began = time.perf_counter()
            if generation == 2 and self.freeze_survivors and \
                    self.frozen >= THAW_FACTOR * max(self._frozen_after_thaw, 1):  # fmt: skip
                gc.unfreeze()  # this one walks everything: frozen cycles that died go
                self.thawed += 1
                self._frozen_after_thaw = -1  # set once this collection has frozen again
            return
        if generation == 2 and self.freeze_survivors:
            gc.freeze()
            self._full += 1
            if self._frozen_after_thaw < 0 or self._full % COUNT_EVERY == 0:
                self.frozen = gc.get_freeze_count()
            if self._frozen_after_thaw < 0:
                self._frozen_after_thaw = self.frozen
        took = time.perf_counter() - self._began  # the freezing and counting included
        self.counts[generation] += 1
        self.seconds[generation] += took
        self.longest[generation] = max(self.longest[generation], took)
        self.buckets[generation][_bucket(took)] += 1

    def status(self) -> GcStatus:
        return GcStatus(list(self.counts), list(self.seconds), list(self.longest),
                        [list(b) for b in self.buckets], self.frozen, self.thawed)  # fmt: skip


def _bucket(took: float) -> int:
    for i, bound in enumerate(BUCKETS):
        if took <= bound:
            return i
    return len(BUCKETS)


def settle_collector() -> GcPauses:
    """Once the agent runs: what start-up built is frozen out of the
    collector (it lives as long as the agent), each collection is timed and
    its survivors frozen (module docstring), and the collector turned on
    (`shoal agent` starts with it off)."""
    gc.freeze()
    pauses = GcPauses(freeze_survivors=os.environ.get("SHOAL_GC_FREEZE_SURVIVORS") != "0")
    pauses.install()
    wanted = os.environ.get("SHOAL_GC_THRESHOLD", "")
    if wanted:
        try:
            gc.set_threshold(*(int(n) for n in wanted.split(",")))
        except (ValueError, TypeError):  # a knob for benches: a typo is not worth a crash
            import structlog

            structlog.get_logger("shoal").warning("SHOAL_GC_THRESHOLD ignored", value=wanted)
    gc.enable()
    return pauses
