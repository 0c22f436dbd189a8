"""A deposed controller's late write, with its clock ahead, after a heal.

The issue-21 scenario for fenced writes, in the simulator: a formed 5-node
cluster; its controller is cut off alone and its wall clock set 0.9 s
ahead (within `store.max_offset_ms`, so its writes are not refused for the
clock); the other four elect a successor at a higher epoch, which writes
`assignment` fenced under its epoch; then the deposed controller, which
has heard of no successor, writes `assignment` under its old epoch, later
and with a clock ahead, so its version's HLC is the higher one. After the
heal, every replica must hold the successor's value: versions order by
epoch first (storage/records.py).

With `fenced=False` both writes are unfenced: last writer wins by HLC, and
the deposed controller's value wins everywhere. That is what the fence is
for, and the test shows both.
"""

from __future__ import annotations

from dataclasses import dataclass

from shoal.membership.profiles import PROFILES
from shoal.sim.cluster import SIM_WALL_BASE_MS, SimCluster
from shoal.sim.elections import controllers
from shoal.sim.scenarios import form_cluster, run_until_converged

NODES = 5
KEY = b"assignment"
CLOCK_AHEAD_MS = 900


@dataclass(slots=True)
class FencingRun:
    """What one run did: who wrote what under which epoch, what won."""

    seed: int
    fenced: bool
    deposed: int = -1
    old_epoch: int = 0
    successor: int = -1
    new_epoch: int = 0
    successor_hlc: int = 0
    deposed_hlc: int = 0  # the late write's stamp (above the successor's)
    values: list[bytes | None] | None = None  # every replica's value after the heal
    settled_s: float | None = None  # heal -> every replica holds the same version


def fencing_run(seed: int, fenced: bool = True) -> FencingRun:
    """Run the scenario of the module docstring once."""
    run = FencingRun(seed, fenced)
    cluster = SimCluster(NODES, seed, PROFILES["lan"])
    form_cluster(cluster)
    assert run_until_converged(cluster, 30.0) is not None, "the cluster did not form"

    def one_controller() -> bool:
        return len(controllers(cluster)) == 1

    cluster.run_until(cluster.now + 30.0, one_controller)
    (deposed,) = controllers(cluster)
    node = cluster.nodes[deposed]
    assert node is not None
    run.deposed, run.old_epoch = deposed, node.known_epoch()
    others = [i for i in range(NODES) if i != deposed]
    cluster.net.partition([[deposed], others])
    node.set_wall_offset(SIM_WALL_BASE_MS + CLOCK_AHEAD_MS)

    def successor_elected() -> bool:
        return any(i != deposed for i in controllers(cluster))

    cluster.run_until(cluster.now + 30.0, successor_elected)
    (successor,) = [i for i in controllers(cluster) if i != deposed]
    run.successor = successor
    new = cluster.nodes[successor]
    assert new is not None
    run.new_epoch = new.known_epoch()

    def write(i: int, value: bytes, epoch: int) -> int:
        n = cluster.nodes[i]
        assert n is not None
        rec = n.write(KEY, value, cluster.clocks[i].local(cluster.now),
                      epoch if fenced else None)  # fmt: skip
        cluster._flush(i)
        return rec.hlc

    run.successor_hlc = write(successor, b"successor", run.new_epoch)
    cluster.run_until(cluster.now + 1.0)
    run.deposed_hlc = write(deposed, b"deposed", run.old_epoch)
    cluster.run_until(cluster.now + 1.0)
    cluster.net.heal()
    healed_at = cluster.now

    def settled() -> bool:
        versions = {rec.version if n and (rec := n.read(KEY)) else None for n in cluster.nodes}
        return len(versions) == 1

    cluster.run_until(cluster.now + 60.0, settled)
    if settled():
        run.settled_s = cluster.now - healed_at
    run.values = [rec.value if n and (rec := n.read(KEY)) else None for n in cluster.nodes]
    return run
