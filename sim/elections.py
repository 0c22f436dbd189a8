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
from collections.abc import Callable
from dataclasses import dataclass, field

from shoal.election.config import LeaseConfig
from shoal.election.messages import (
    ControllerNotice,
    LeaseGrant,
    LeaseReject,
    LeaseRelease,
    LeaseRequest,
)
from shoal.kernel.contract import Address, Channel
from shoal.membership.member import MemberState
from shoal.membership.profiles import PROFILES
from shoal.sim.attacker import Replayer
from shoal.sim.clock import NodeClock
from shoal.sim.cluster import SimCluster
from shoal.sim.network import LinkProfile

ELECTION_MESSAGES = (LeaseRequest, LeaseGrant, LeaseReject, LeaseRelease, ControllerNotice)
_GONE = (MemberState.DEAD, MemberState.LEFT)


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


class EpochFence:
    """Never two nodes claiming the lease under one epoch at the same moment.

    Inside the drift bound `LeaseSafety` already rules out two claimants at
    all; outside it two can overlap for a moment, and this is what must
    still hold: the epoch each reports with `is_self` (its own lease's,
    node/status.py) tells them apart, so a store fenced by it refuses the
    older one."""

    def __init__(self, cluster: SimCluster) -> None:
        self.cluster = cluster
        self.violations: list[str] = []

    def check(self) -> bool:
        """Record the state after one step; always False."""
        claims: dict[tuple[bytes, int], int] = {}
        for i, node in enumerate(self.cluster.nodes):
            if node is None:
                continue
            el = node.election
            if el.lease_epoch is None or el.voters is None:
                continue
            key = (el.voters.lineage, el.lease_epoch)
            other = claims.setdefault(key, i)
            if other != i and len(self.violations) < 10:
                self.violations.append(f"nodes {other} and {i} both claim epoch "
                                       f"{el.lease_epoch} at t={self.cluster.now:.3f}")  # fmt: skip
        return False


class DurablePromises:
    """No grant leaves a node before the epoch it grants is durable there.

    Checked on what the node sends, against what its simulated disk holds
    (sim/disk.py): a grant released before its write's fsync completed
    would be lost by a crash, and the voter, rebooted, could grant the same
    epoch again. This is the property the `Persist` releases exist for; the
    overlap check above only catches its rarer consequences.
    """

    def __init__(self, cluster: SimCluster) -> None:
        self.violations: list[str] = []
        self._cluster = cluster
        cluster.send_hooks.append(self._sent)

    def _sent(self, i: int, to: Address, messages: tuple[object, ...], channel: Channel) -> None:
        durable = self._cluster.disks[i].election[0]
        for msg in messages:
            if isinstance(msg, LeaseGrant) and msg.epoch > durable:
                now = self._cluster.now
                self.violations.append(f"node {i} sent a grant of epoch {msg.epoch} at "
                                       f"t={now:.3f}; its disk holds {durable}")  # fmt: skip


class NoDeadController:
    """No running node reports as controller a member its own view holds
    dead or left (what `shoal controller` would show), checked after every
    step: a replayed notice of a dead controller must not name it again."""

    def __init__(self, cluster: SimCluster) -> None:
        self.cluster = cluster
        self.violations: list[str] = []
        self._seen: set[tuple[int, tuple[str, int]]] = set()

    def check(self) -> bool:
        """Look at every running node now; always False (see `LeaseSafety.check`)."""
        for i, node in enumerate(self.cluster.nodes):
            if node is None:
                continue
            known = node.election.known
            if known is None or known[0] == node.name:
                continue
            state = node.state_of(known[0])
            if state in _GONE and (i, known) not in self._seen:
                assert state is not None
                self._seen.add((i, known))
                self.violations.append(f"t={self.cluster.now:.3f} node {i} reports {known[0]} "
                                       f"(epoch {known[1]}) as controller, its view holds it "
                                       f"{state.name.lower()}")  # fmt: skip
        return False


def controllers(cluster: SimCluster) -> list[int]:
    """Running nodes that hold the lease now."""
    return [i for i, node in enumerate(cluster.nodes)
            if node is not None and node.election.is_controller]  # fmt: skip


@dataclass(slots=True)
class SwarmRun:
    """What one randomized election run did and found."""

    seed: int
    n: int
    loss: float
    fsync_s: float = 0.0  # the run's median fsync latency (0: writes durable at once)
    faults: list[str] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)
    recovered_after_s: float | None = None
    tenures: int = 0
    replays: int = 0
    named_dead: list[str] = field(default_factory=list)  # NoDeadController's findings
    shared_epochs: list[str] = field(default_factory=list)  # EpochFence's findings


def swarm_run(seed: int, duration_s: float = 60.0, heal_at_s: float = 40.0,
              liveness_s: float = 20.0, replay_rate: float = 0.0,
              drift_scale: float = 0.95) -> SwarmRun:  # fmt: skip
    """One seeded run: random size, loss, clock rates within `drift_scale`
    of the drift bound (0.95: inside it; 30: rates of 0.4x to 1.6x), disk
    latency, and a random schedule of crashes, restarts, partitions (minority
    controller cut off included), leaves, late joins and a crash between an
    election write and its fsync until `heal_at_s`; then everything heals
    and a controller must exist within `liveness_s`. With `replay_rate`, a
    replayer (sim/attacker.py) copies traffic at that many replays per
    second for the whole run, its fault schedule unchanged."""
    rng = random.Random(seed)
    lease = LeaseConfig()
    n = rng.choice([3, 5, 5, 7])
    loss = rng.choice([0.0, 0.02, 0.1])
    drift = min(0.9, lease.drift_ratio_max * drift_scale)
    clocks = [NodeClock(rng.uniform(0, 100), rng.uniform(-drift, drift)) for _ in range(n)]
    # The disk has its own generator, so a seed's other faults are the same
    # whatever its disk does.
    disk_rng = random.Random(seed * 7_919 + 11)
    fsync_s = disk_rng.choice([0.0, 0.002, 0.02, 0.1])
    cluster = SimCluster(n, seed, PROFILES["lan"], LinkProfile(loss=loss), clocks=clocks,
                         lease_config=lease, bootstrap_expect=min(3, n),
                         fsync=_fsync_latency(fsync_s))  # fmt: skip
    run = SwarmRun(seed, n, loss, fsync_s)
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
        random_fault(cluster, rng, at, down, run)

    if fsync_s > 0:
        # Often the very first grants: a voter that restarts with nothing on
        # disk has no grant to wait out, so a lost first write matters most.
        arm_at = 0.0 if disk_rng.random() < 0.5 else disk_rng.uniform(5.0, heal_at_s - 5.0)
        _crash_before_fsync(cluster, arm_at, heal_at_s - 2.0, disk_rng.uniform(0.05, 1.0),
                            down, run)  # fmt: skip

    def heal_all() -> None:
        cluster.net.heal()
        for i in sorted(down):  # whatever is down or left by then comes back
            cluster._boot(i, [j for j in range(n) if j != i])  # noqa: SLF001
        down.clear()

    cluster.at(heal_at_s, heal_all)
    _judge(cluster, run, heal_at_s, liveness_s, duration_s, replay_rate)
    return run


def _judge(cluster: SimCluster, run: SwarmRun, heal_at_s: float, liveness_s: float,
           duration_s: float, replay_rate: float) -> None:  # fmt: skip
    """Run the swarm's schedule (under attack, with `replay_rate`) and record
    what the checkers found."""
    safety, promises = LeaseSafety(cluster), DurablePromises(cluster)
    dead, fence = NoDeadController(cluster), EpochFence(cluster)
    attackers = attack(cluster, replay_rate)

    def step() -> bool:
        return safety.check() or dead.check() or fence.check()

    cluster.run_until(heal_at_s + 0.2, step)
    done = cluster.run_until(heal_at_s + liveness_s,
                             lambda: step() or len(controllers(cluster)) == 1)  # fmt: skip
    if done:
        run.recovered_after_s = cluster.now - heal_at_s
    cluster.run_until(duration_s, step)
    run.violations = safety.violations + promises.violations
    run.named_dead = dead.violations
    run.shared_epochs = fence.violations
    run.tenures = len(safety.tenures)
    run.replays = sum(a.replayed for a in attackers)


def attack(cluster: SimCluster, replay_rate: float) -> list[Replayer]:
    """`replay_rate` replays per second: half of them copies of any traffic,
    half of election messages only (a small share of all datagrams, and the
    ones a replay could turn against the lease)."""
    if replay_rate <= 0:
        return []
    return [Replayer(cluster, replay_rate / 2),
            Replayer(cluster, replay_rate / 2, keep=_is_election, salt=1)]  # fmt: skip


def _is_election(src: int, messages: tuple[object, ...]) -> bool:
    return isinstance(messages[0], ELECTION_MESSAGES)


def _fsync_latency(median_s: float) -> Callable[[random.Random], float]:
    """Latencies around `median_s`, with a tail (a busy disk)."""

    def draw(rng: random.Random) -> float:
        return median_s * rng.lognormvariate(0.0, 0.6)

    return draw


def _crash_before_fsync(cluster: SimCluster, at: float, until: float, reboot_s: float,
                        down: set[int], run: SwarmRun) -> None:  # fmt: skip
    """Between `at` and `until`, crash the first node that writes election
    state, right after the write and before its fsync completes (its held
    grants and requests are lost, and so is the write), and boot it again
    `reboot_s` later (systemd's Restart=)."""
    n = cluster.n
    armed = [False]

    def on_write(i: int) -> None:
        if not armed[0] or cluster.now > until or i in down or len(down) >= (n - 1) // 2:
            return
        armed[0] = False
        down.add(i)
        run.faults.append(f"{cluster.now:.3f} crash {i} before fsync, back {reboot_s:.2f} s later")
        cluster.at(cluster.now, lambda: cluster._halt(i))  # noqa: SLF001

        def reboot() -> None:
            if i in down:
                down.discard(i)
                cluster._boot(i, [j for j in range(n) if j != i])  # noqa: SLF001

        cluster.at(cluster.now + reboot_s, reboot)

    def arm() -> None:
        armed[0] = True

    cluster.write_hooks.append(on_write)
    cluster.at(at, arm)


FAULTS = ("crash_controller", "crash", "restart", "partition", "cut_controller", "heal", "leave")


def random_fault(cluster: SimCluster, rng: random.Random, at: float, down: set[int],
                 run: SwarmRun, kinds: tuple[str, ...] = FAULTS) -> None:  # fmt: skip
    """Schedule one fault of `kinds` at `at` (named in `run.faults`);
    `down` holds the hosts crashed or left, which come back at the heal."""
    n = cluster.n
    kind = rng.choice(kinds)
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
        groups = [hosts[:cut], hosts[cut:]]
        cluster.at(at, lambda: cluster.net.partition(groups))
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
