"""A deposed controller's late write with its clock ahead, after a heal
(sim/fencing.py, issue 21): under fences the successor's value wins on
every replica; without them the deposed controller's does."""

import pytest

from shoal.sim.fencing import fencing_run
from tests.sim.conftest import seeds

FENCE_SEEDS = sorted(set(seeds()) | set(range(1, 6)))


@pytest.mark.parametrize("seed", FENCE_SEEDS)
def test_the_successors_fenced_write_wins_everywhere_over_a_later_one_with_a_fast_clock(seed):
    r = fencing_run(seed)
    assert r.new_epoch > r.old_epoch > 0, r
    assert r.deposed_hlc > r.successor_hlc, r  # the clocks favour the deposed write
    assert r.settled_s is not None, r
    assert r.values == [b"successor"] * len(r.values), r


def test_without_fences_the_deposed_controllers_late_write_wins():
    """The control: what the fence prevents."""
    r = fencing_run(1, fenced=False)
    assert r.settled_s is not None, r
    assert r.values == [b"deposed"] * len(r.values), r
