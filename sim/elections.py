"""Election safety and liveness in the simulator: the checker and the
randomized ("swarm") scenarios that tests and the benchmark share.

`LeaseSafety` judges on *true* time, which no node can read: after every
simulation step it records each controller's claimed lease as a true-time
interval (its clock's reading of `lease_end_at`, mapped back through the
node's drift and offset) and fails when two nodes of one lineage hold
overlapping intervals, or when a new controller's epoch is not above every
earlier controller's. A crashed controller keeps its claimed interval: the
voters' grants must outlast it whether or not the holder is still there.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from shoal.election.config import LeaseConfig
from shoal.membership.profiles import PROFILES
from shoal.sim.clock import NodeClock
from shoal.sim.cluster import SimCluster
from shoal.sim.network import LinkProfile


@dataclass(slots=True)
class Tenure:
    """One node's time as controller with one epoch, in true time."""

    node: int
    lineage: bytes
    epoch: int
    start: float
    end: float


class LeaseSafety:
    """Never two overlapping leases; epochs strictly increasing."""

    def __init__(self, cluster: SimCluster) -> None:
        self.cluster = cluster
        self.tenures: list[Tenure] = []
        self._current: dict[int, Tenure] = {}
        self.violations: list[str] = []

    def check(self) -> bool:
        """Record the state after one step; always False (usable as a
        `run_until` stop predicate that never stops)."""
        c = self.cluster
        for i, node in enumerate(c.nodes):
            if node is None:
                self._current.pop(i, None)  # a crash: the claimed lease stands
                continue
            el = node.election
            if el.lease_epoch is None or el.voters is None:
                ended = self._current.pop(i, None)
                if ended is not None:  # released or lost while running: over now
                    ended.end = min(ended.end, c.now)
                continue
            end = c.clocks[i].true(el.lease_end_at)
            t = self._current.get(i)
            if t is not None and t.epoch == el.lease_epoch:
                if end > t.end:
                    t.end = end
                    self._check_overlaps(t)
                continue
            if t is not None:  # same node, new epoch: the new lease replaces the old
                t.end = min(t.end, c.now)
            t = Tenure(i, el.voters.lineage, el.lease_epoch, c.now, end)
            self._check_epoch(t)
            self.tenures.append(t)
            self._current[i] = t
            self._check_overlaps(t)
        return False

    def _check_overlaps(self, t: Tenure) -> None:
        for other in self.tenures:
            if other.node == t.node or other.lineage != t.lineage:
                continue
            if other.start < t.end and t.start < other.end:
                self.violations.append(
                    f"node {t.node} (epoch {t.epoch}, {t.start:.3f}-{t.end:.3f}) overlaps "
                    f"node {other.node} (epoch {other.epoch}, {other.start:.3f}-{other.end:.3f})"
                )

    def _check_epoch(self, t: Tenure) -> None:
        earlier = [o.epoch for o in self.tenures if o.lineage == t.lineage and o.node != t.node]
        if earlier and t.epoch <= max(earlier):
            self.violations.append(f"node {t.node} controller with epoch {t.epoch} "
                                   f"after epoch {max(earlier)} at t={t.start:.3f}")  # fmt: skip


def controllers(cluster: SimCluster) -> list[int]:
    """Running nodes that hold the lease now."""
    return [i for i in cluster.live_hosts() if cluster.nodes[i].election.is_controller]


@dataclass(slots=True)
class SwarmRun:
    """What one randomized election run did and found."""

    seed: int
    n: int
    loss: float
    faults: list[str] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)
    recovered_after_s: float | None = None
    tenures: int = 0


def swarm_run(seed: int, duration_s: float = 60.0, heal_at_s: float = 40.0,
              liveness_s: float = 20.0) -> SwarmRun:  # fmt: skip
    """One seeded run: random size, loss, clock drift within the bound, and
    a random schedule of crashes, restarts, partitions (minority controller
    cut off included), leaves and late joins until `heal_at_s`; then
    everything heals and a controller must exist within `liveness_s`."""
    rng = random.Random(seed)
    lease = LeaseConfig()
    n = rng.choice([3, 5, 5, 7])
    loss = rng.choice([0.0, 0.02, 0.1])
    drift = lease.drift_ratio_max * 0.95
    clocks = [NodeClock(rng.uniform(0, 100), rng.uniform(-drift, drift)) for _ in range(n)]
    cluster = SimCluster(n, seed, PROFILES["lan"], LinkProfile(loss=loss), clocks=clocks,
                         lease_config=lease, bootstrap_expect=min(3, n))  # fmt: skip
    run = SwarmRun(seed, n, loss)
    late = rng.randrange(n) if rng.random() < 0.3 else None
    rng2 = random.Random(seed * 31)
    cluster.start(0, 0.0, [])
    for i in range(1, n):
        if i != late:
            cluster.start(i, rng2.uniform(0.0, 1.0), [0])
    if late is not None:
        cluster.start(late, rng.uniform(5, 30), [0])
        run.faults.append(f"late join {late}")
    down: set[int] = set()
    at = 5.0
    while True:
        at += rng.uniform(1.0, 6.0)
        if at >= heal_at_s - 0.5:
            break
        _random_fault(cluster, rng, at, down, run)

    def heal_all() -> None:
        cluster.net.heal()
        for i in sorted(down):  # whatever is down or left by then comes back
            cluster._boot(i, [j for j in range(n) if j != i])  # noqa: SLF001
        down.clear()

    cluster.at(heal_at_s, heal_all)
    safety = LeaseSafety(cluster)
    cluster.run_until(heal_at_s + 0.2, safety.check)
    done = cluster.run_until(heal_at_s + liveness_s,
                             lambda: safety.check() or len(controllers(cluster)) == 1)  # fmt: skip
    if done:
        run.recovered_after_s = cluster.now - heal_at_s
    cluster.run_until(duration_s, safety.check)
    run.violations = safety.violations
    run.tenures = len(safety.tenures)
    return run


def _random_fault(cluster: SimCluster, rng: random.Random, at: float, down: set[int],
                  run: SwarmRun) -> None:  # fmt: skip
    n = cluster.n
    kind = rng.choice(["crash_controller", "crash", "restart", "partition", "cut_controller",
                       "heal", "leave"])  # fmt: skip
    if kind in ("crash", "crash_controller") and len(down) < (n - 1) // 2:

        def crash(k: str = kind) -> None:
            live = [i for i in cluster.live_hosts() if i not in down]
            ctl = [i for i in controllers(cluster) if i in live]
            victims = ctl if (k == "crash_controller" and ctl) else live
            if victims:
                v = rng.choice(victims)
                down.add(v)
                cluster._halt(v)  # noqa: SLF001 - the simulator's own crash

        cluster.at(at, crash)
        run.faults.append(f"{at:.1f} {kind}")
    elif kind == "restart" and down:

        def restart() -> None:
            if down:
                v = min(down)
                down.discard(v)
                cluster._boot(v, [j for j in range(n) if j != v])  # noqa: SLF001

        cluster.at(at, restart)
        run.faults.append(f"{at:.1f} restart")
    elif kind == "partition":
        hosts = list(range(n))
        rng.shuffle(hosts)
        cut = rng.randrange(1, n)
        cluster.at(at, lambda a=hosts[:cut], b=hosts[cut:]: cluster.net.partition([a, b]))
        run.faults.append(f"{at:.1f} partition {sorted(hosts[:cut])}")
    elif kind == "cut_controller":

        def isolate() -> None:
            ctl = controllers(cluster)
            if ctl:
                cluster.net.isolate(ctl[0], list(range(n)))

        cluster.at(at, isolate)
        run.faults.append(f"{at:.1f} isolate controller")
    elif kind == "heal":
        cluster.at(at, cluster.net.heal)
        run.faults.append(f"{at:.1f} heal")
    elif kind == "leave":
        v = rng.randrange(n)

        def leave() -> None:
            if v not in down and len(down) < (n - 1) // 2 and cluster.nodes[v] is not None:
                down.add(v)  # it comes back (restart) at the heal
                cluster._command(v, lambda node, now: node.leave(now))  # noqa: SLF001

        cluster.at(at, leave)
        run.faults.append(f"{at:.1f} leave {v}")
