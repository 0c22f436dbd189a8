"""A restarted member forwards to the metadata log again within a fraction
of a second (election/notices.py, `ask_voters`; node/composition.py,
`_learning_level`): it asks the voters for the controller's notice as its
join shows them live, and knows the feature level the notice brings at
once. Before, it waited for the controller's next renewal (up to
`renew_interval_s`) and then for its own next look at the level (up to a
second more): 1.5-2.4 s after the signal on real agents, which a session
renewed through it with a TTL of 2-3 s would not have outlived."""

from __future__ import annotations

from typing import Any

import pytest

from shoal.election.events import ControllerChanged
from shoal.kernel.versions import META_LOG_FEATURE
from shoal.membership.profiles import PROFILES
from shoal.metalog.core import MetaConfig
from shoal.node.features import FeatureLevelChanged
from shoal.sim.cluster import SimCluster
from shoal.sim.scenarios import form_cluster
from tests.sim.conftest import seeds

# Restarts spread over the controller's renewal cycle (1 s) and the
# member's own look at the level (1 s): the wait of before depends on both.
PHASES = (0.0, 0.13, 0.29, 0.41, 0.58, 0.66, 0.83, 0.95)
DOWN_S = 0.3  # from the signal to the process started again


class _Steps:
    """When the restarted host named a controller and knew level 2."""

    def __init__(self, host: int) -> None:
        self.host = host
        self.named: list[float] = []
        self.level: list[float] = []

    def on_event(self, now: float, node: int, event: Any) -> None:
        if node != self.host:
            return
        if isinstance(event, ControllerChanged) and event.node:
            self.named.append(now)
        elif isinstance(event, FeatureLevelChanged) and event.level >= META_LOG_FEATURE:
            self.level.append(now)


def restart_delays(how: str, seed: int) -> list[float]:
    """Seconds from each restart of a non-controller member to the moment it
    forwards to the log (a controller named and level 2 known), one per phase."""
    cluster = SimCluster(3, seed, PROFILES["lan"], meta=MetaConfig())
    form_cluster(cluster)
    cluster.run_until(15.0)
    (controller,) = [i for i, n in enumerate(cluster.nodes)
                     if n is not None and n.election.is_controller]  # fmt: skip
    host = (controller + 1) % 3
    others = [i for i in range(3) if i != host]
    steps = _Steps(host)
    cluster.observers.append(steps)
    delays = []
    for k, phase in enumerate(PHASES):
        signal = 20.0 + 6.0 * k + phase
        if how == "leave":  # SIGTERM: the agent leaves, then exits
            cluster.leave(host, signal)
            cluster.crash(host, signal + 0.2)
        else:  # kill -9
            cluster.crash(host, signal)
        back = signal + DOWN_S + (0.2 if how == "leave" else 0.0)
        cluster.restart(host, back, join=others)
        cluster.run_until(signal + 5.0)
        named = [t for t in steps.named if t >= back]
        level = [t for t in steps.level if t >= back]
        node = cluster.nodes[host]
        assert node is not None and named and level, f"restart {k}: never forwarding again"
        assert node.meta is not None and node.feature_level >= META_LOG_FEATURE
        delays.append(max(named[0], level[0]) - back)
    return delays


@pytest.mark.parametrize("seed", seeds())
def test_a_member_killed_and_restarted_forwards_again_within_a_round_trip_of_its_join(seed):
    delays = restart_delays("kill", seed)
    assert max(delays) < 0.25, delays


@pytest.mark.parametrize("seed", seeds())
def test_a_member_that_left_and_restarted_forwards_again_within_a_round_trip_of_its_join(seed):
    delays = restart_delays("leave", seed)
    assert max(delays) < 0.25, delays
