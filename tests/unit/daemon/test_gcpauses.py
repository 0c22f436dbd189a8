"""GcPauses times the collections Python runs, and freezes what full ones keep."""

from __future__ import annotations

import gc
import weakref

from shoal.daemon.gcpauses import BUCKETS, COUNT_EVERY, THAW_FACTOR, GcPauses


class Node:
    """An object in a cycle: only the collector frees it."""

    def __init__(self) -> None:
        self.me = self


def test_a_full_collection_is_counted_and_timed():
    pauses = GcPauses(freeze_survivors=False)
    pauses.install()
    try:
        garbage = [Node() for _ in range(10_000)]
        del garbage
        gc.collect(2)
        gc.collect(0)
    finally:
        pauses.remove()
    status = pauses.status()
    assert status.counts[2] >= 1 and status.counts[0] >= 1
    assert status.longest[2] > 0 and status.seconds[2] >= status.longest[2]
    for generation in range(3):
        assert sum(status.buckets[generation]) == status.counts[generation]
        assert len(status.buckets[generation]) == len(BUCKETS) + 1
    assert status.thawed == 0
    gc.collect(2)  # once removed, nothing more is counted
    assert pauses.status().counts == status.counts


def test_survivors_are_frozen_and_a_dead_frozen_cycle_goes_once_they_double():
    gc.collect()
    gc.freeze()  # as the agent's start does
    pauses = GcPauses()
    pauses.install()
    try:
        cycle = Node()
        dead = weakref.ref(cycle)
        gc.collect(2)  # `cycle` survives it: frozen
        assert gc.get_freeze_count() > 0
        assert not gc.is_finalized(cycle) and dead() is cycle
        del cycle
        gc.collect(2)  # frozen, so this one does not see it die
        assert dead() is not None and pauses.status().thawed == 0
        # What the agent holds doubles: the next full collection walks
        # the frozen objects too, and the dead cycle goes.
        # (The frozen objects are counted every COUNT_EVERY full collections.)
        held = [[] for _ in range(THAW_FACTOR * gc.get_freeze_count())]
        for _ in range(COUNT_EVERY + 1):
            gc.collect(2)
        assert dead() is None
        status = pauses.status()
        assert status.thawed == 1 and status.frozen >= len(held)
    finally:
        pauses.remove()
        gc.unfreeze()
