"""A rolling upgrade and its reverse in the simulator (sim/upgrade.py): the
feature level rises only when the last member is upgraded, the new message
never reaches an agent that cannot read it, and the downgrade is safe only
with the operator's cap first — which the checks catch when it is missing."""

import pytest

from shoal.kernel.versions import THIS_BUILD
from shoal.sim.upgrade import run_upgrade
from tests.sim.conftest import seeds


@pytest.mark.parametrize("seed", seeds())
def test_a_rolling_upgrade_turns_the_new_feature_on_only_when_everyone_has_it(seed):
    """While builds are mixed every node knows this build's level; within
    seconds of the last upgrade every node knows the next one's and the new
    message flows; after the cap every node knows this build's again, and
    the roll back stops no one and loses no message to a build that cannot
    read it."""
    r = run_upgrade(seed)
    assert r.level_mixed_max == THIS_BUILD.features, r
    assert r.level_upgraded_s is not None and r.level_upgraded_s <= 5.0, r
    assert r.probes_delivered > 0, r
    assert r.level_capped_s is not None and r.level_capped_s <= 5.0, r
    assert r.probes_to_old == 0 and r.misread == 0, r
    assert r.unsupported == [], r
    epochs = [epoch for _, _, epoch in r.elections]
    assert epochs == sorted(set(epochs)), r  # one controller per epoch, epochs only grow


def test_the_checks_catch_a_downgrade_without_the_cap():
    """The deliberate mistake: rolling back while the cluster runs level 2.
    The old build is told of a level above its own (the agent would stop)."""
    r = run_upgrade(1, cap_before_downgrade=False)
    assert r.unsupported, r
