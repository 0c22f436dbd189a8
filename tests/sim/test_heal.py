"""A 4 | 2 partition for 30 s with writes on both sides, then healed
(sim/heal.py): the store follows membership across the cut and the heal."""

import pytest

from shoal.sim.heal import run_heal
from tests.sim.conftest import seeds

# Seeds 1-8 for the fixed cases (the heal scenario costs ~50 ms a seed).
HEAL_SEEDS = sorted(set(seeds()) | set(range(1, 9)))


@pytest.mark.parametrize("seed", HEAL_SEEDS)
def test_every_key_is_on_every_node_within_3_s_of_membership_healing(seed):
    """Once every node sees every other alive again, every key written on
    either side during the cut is on every node within 3 s."""
    r = run_heal(seed)
    assert r.membership_healed_s is not None, "membership never healed"
    assert r.keys_everywhere_s is not None, "some key never reached some node"
    assert r.keys_after_membership_s <= 3.0, r


@pytest.mark.parametrize("seed", HEAL_SEEDS)
def test_a_write_on_one_minority_node_reaches_the_other_within_seconds(seed):
    """During the cut, a write on one node of the 2-node side reaches the
    other within 5 s, including writes made before anyone suspected the
    other side (pushes and sessions then still pick cut-off members)."""
    r = run_heal(seed)
    assert len(r.minority_delays_s) >= 30
    assert None not in r.minority_delays_s, r.minority_delays_s
    assert r.worst_minority_delay_s is not None and r.worst_minority_delay_s <= 5.0, r
