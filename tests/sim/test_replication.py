"""The replicated store at 100 nodes: writes during loss and a partition,
then every replica identical after healing."""

import random

from shoal.membership.profiles import PROFILES
from shoal.sim.cluster import SimCluster
from shoal.sim.network import LinkProfile
from shoal.sim.scenarios import form_cluster, run_until_converged


def replicas_identical(cluster: SimCluster) -> bool:
    roots = {cluster.nodes[i].sync.replica.tree.node(0, 0) for i in cluster.live_hosts()}
    return len(roots) == 1


def contents(cluster: SimCluster, i: int) -> dict:
    return {r.key: r for r in cluster.stores[i].all()}


def test_100_nodes_converge_after_writes_under_loss_and_a_partition():
    """Random puts and deletes (same keys on both sides of a partition) with
    5% loss; after the heal every replica holds exactly the same records,
    and each key holds its newest write."""
    seed = 11
    cluster = SimCluster(100, seed, PROFILES["lan"], LinkProfile(loss=0.05))
    form_cluster(cluster)
    assert run_until_converged(cluster, 60.0) is not None
    t0 = cluster.now
    rng = random.Random(seed)
    for _ in range(600):
        key = f"cfg/{rng.randrange(150)}".encode()
        value = None if rng.random() < 0.2 else rng.randbytes(rng.randrange(1, 64))
        cluster.write(rng.randrange(100), key, value, t0 + rng.uniform(0, 60))
    side_a = list(range(50))
    cluster.at(t0 + 15, lambda: cluster.net.partition([side_a, list(range(50, 100))]))
    cluster.at(t0 + 45, cluster.net.heal)
    cluster.run_until(t0 + 45)
    assert not replicas_identical(cluster)  # the partition really split the writes
    cluster.run_until(t0 + 60)
    assert cluster.run_until(t0 + 120, lambda: replicas_identical(cluster))
    reference = contents(cluster, 0)
    assert len(reference) > 100
    for i in range(1, 100):
        assert contents(cluster, i) == reference, f"replica {i} differs"
    stats = [cluster.nodes[i].sync.counters for i in range(100)]
    assert sum(s.sessions_repaired for s in stats) > 0
    assert sum(s.pushes_received for s in stats) > 0


def test_a_node_that_was_down_during_writes_catches_up_after_restart():
    cluster = SimCluster(20, 3, PROFILES["lan"])
    form_cluster(cluster)
    assert run_until_converged(cluster, 30.0) is not None
    t0 = cluster.now
    cluster.crash(7, t0)
    for n in range(200):
        cluster.write(n % 20 if n % 20 != 7 else 0, b"k%d" % n, b"v%d" % n, t0 + 1 + n * 0.05)
    cluster.restart(7, t0 + 30, join=[0])
    cluster.run_until(t0 + 30)
    assert len(cluster.stores[7]) == 0
    assert cluster.run_until(t0 + 60, lambda: len(cluster.stores[7]) == 200)
    assert contents(cluster, 7) == contents(cluster, 0)
