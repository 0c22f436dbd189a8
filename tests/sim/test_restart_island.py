"""Two of three nodes restarted back to back in the simulator, the first
being node 0, which joins nobody (the others joined it): within seconds all
three name one controller and all three vote again (the agents' test is
tests/integration/test_restart_back_to_back.py).

Restarted, node 0 knew no one; the second node restarted joined it, and the
third held both as left, a member nobody contacts again. They stayed apart,
and the third, controller, removed both from the voters. What brings them
together: the controller's vote request for that removal reaches them, and
an election message from a member not held live starts a sync
(node/composition.py, `_heeding_strangers`)."""

from __future__ import annotations

import pytest

from shoal.membership.profiles import PROFILES
from shoal.sim.cluster import SimCluster
from shoal.sim.elections import LeaseSafety, controllers
from shoal.sim.scenarios import form_cluster
from tests.sim.conftest import seeds

LEAVE_S = 0.3  # a graceful stop: the leave, then the process exits
DOWN_S = 1.0  # then it is started again
SETTLE_S = 8.0


def agreed(cluster: SimCluster) -> bool:
    """Every node runs, names one controller and the same voters: all."""
    seen = set()
    for node in cluster.nodes:
        if node is None or node.election.known is None or node.election.voters is None:
            return False
        seen.add((node.election.known[0], node.election.voters.voters))
    names = tuple(sorted(ident.name for ident in cluster.idents))
    return len(seen) == 1 and next(iter(seen))[1] == names


def restart_two(seed: int) -> float | None:
    """Restart node 0 and the controller (node 1 when 0 is), one after the
    other; how long after the second is back until `agreed`, or None."""
    cluster = SimCluster(3, seed, PROFILES["lan"])
    safety = LeaseSafety(cluster)
    form_cluster(cluster)
    assert cluster.run_until(30.0, lambda: safety.check() or agreed(cluster))
    (ctl,) = controllers(cluster)
    t = cluster.now
    for i in (0, ctl if ctl != 0 else 1):
        cluster.leave(i, t)
        cluster.crash(i, t + LEAVE_S)
        cluster.restart(i, t + LEAVE_S + DOWN_S, [] if i == 0 else [0])
        t += LEAVE_S + DOWN_S
    cluster.run_until(t, safety.check)
    stopped = cluster.run_until(t + SETTLE_S, lambda: safety.check() or agreed(cluster))
    assert not safety.violations, safety.violations[:2]
    return cluster.now - t if stopped else None


@pytest.mark.parametrize("seed", seeds())
def test_two_restarted_back_to_back_agree_again_within_seconds(seed):
    took = restart_two(seed)
    assert took is not None, f"not agreed {SETTLE_S} s after the second restart"
