"""The metadata log's swarm (sim/meta.py): seeded runs with partitions,
loss, duplication, crashes (some right after a log write, before its
fsync, some while installing a snapshot), voters leaving and coming back
(changes decided by the log), a controller paused past its lease,
clock rates in and far outside the drift bound, a replayer, and clients
putting, compare-and-setting, deleting, reading and running transactions,
with snapshots and log compaction every few entries: every history is
linearizable, nothing acknowledged is lost, no two nodes apply different
entries at one index, and nodes at equal revisions hold equal states."""

import os

import pytest

from shoal.sim.meta import meta_run

# Each run is about 30 virtual seconds of 3 or 5 nodes (~0.2 s of CPU);
# SHOAL_META_SEEDS widens the range (2,000 behind `slow`).
SEEDS = range(1, int(os.environ.get("SHOAL_META_SEEDS", "160")) + 1)


@pytest.mark.parametrize("seed", SEEDS)
def test_no_acknowledged_write_is_lost_and_every_node_applies_one_history(seed):
    """Every write a client saw committed is, at the end, the entry at its
    revision on every node that applied that far, and the nodes' applied
    entries agree index by index."""
    r = meta_run(seed)
    assert r.violations == [], (r.faults, r.violations)
    assert r.count("ok") > 0, r.faults  # the run did work, not only refusals
    verdict = r.linearizable()
    assert verdict.ok, (r.faults, verdict.explanation)


@pytest.mark.slow
def test_two_thousand_seeds_hold():
    """2,000 seeds (make test-slow), every run checked as above."""
    failed = []
    for seed in range(1, 2001):
        r = meta_run(seed)
        if r.violations or not r.linearizable().ok:
            failed.append(seed)
    assert failed == [], f"replay with SHOAL_META_SEEDS: seeds {failed[:20]}"


def test_followers_behind_catch_up_by_snapshot_and_restarts_load_one():
    """Over the first 20 seeds the swarm does exercise what it checks:
    followers install the controller's snapshot (after a partition or a
    crash), restarted nodes resume from their own, and a node crashes
    right after writing an installed snapshot, before its fsync."""
    runs = [meta_run(seed) for seed in range(1, 21)]
    assert all(r.violations == [] for r in runs)
    assert sum(r.snapshots_taken for r in runs) > 100
    assert sum(1 for r in runs if r.snapshots_installed) >= 10
    assert sum(1 for r in runs if r.restored) >= 10
    assert any("installing a snapshot" in f for r in runs for f in r.faults)
