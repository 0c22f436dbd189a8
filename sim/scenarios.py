"""Named scenarios, shared by tests/sim, `shoal simulate` and the benchmarks."""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from shoal.membership.events import MemberDied, MemberLeft
from shoal.membership.profiles import PROFILES, SwimConfig
from shoal.sim.attacker import Replayer
from shoal.sim.checks import FalsePositives, IncarnationMonotonic, converged
from shoal.sim.cluster import SimCluster, fewer_collections
from shoal.sim.network import LinkProfile

SLICE_S = 0.25


@dataclass(slots=True)
class CrashRecord:
    """One crashed node and how long the survivors took to notice."""

    node: str
    crashed_at_s: float
    first_detect_s: float | None = None
    all_detect_s: float | None = None
    seen_at: dict[int, float] = field(default_factory=dict)  # observer -> delay

    def settle(self, survivors: list[int]) -> None:
        """Fix `all_detect_s` once the run is over: the delay until the last
        node still running at the end had marked the crashed node dead."""
        delays = [self.seen_at.get(i) for i in survivors]
        if survivors and all(d is not None for d in delays):
            self.all_detect_s = max(d for d in delays if d is not None)


class CrashWatch:
    """Times from a crash to the first and the last survivor marking it dead."""

    def __init__(self, cluster: SimCluster) -> None:
        self.cluster = cluster
        self.records: dict[str, CrashRecord] = {}

    def crashed(self, index: int, now: float) -> None:
        """Start timing a crash of host `index` at `now`."""
        name = self.cluster.idents[index].name
        self.records[name] = CrashRecord(name, now)

    def on_event(self, now: float, node: int, event: Any) -> None:
        if not isinstance(event, (MemberDied, MemberLeft)):
            return
        rec = self.records.get(event.member.name)
        if rec is None or node in rec.seen_at:
            return
        rec.seen_at[node] = now - rec.crashed_at_s
        if rec.first_detect_s is None:
            rec.first_detect_s = now - rec.crashed_at_s


@dataclass(slots=True)
class SimResult:
    """What `shoal simulate` reports."""

    config: dict[str, Any]
    converged_s: float | None
    crashes: list[CrashRecord]
    false_positive_events: int
    false_positive_nodes: int
    incarnation_violations: list[str]
    datagrams_per_node_s: float
    bytes_per_node_s: float
    wall_s: float
    replays: int = 0  # copies a replayer delivered (`replay_rate`)

    def to_json(self) -> dict[str, Any]:
        """The result as one JSON object."""
        return {
            "config": self.config,
            "converged_s": _r(self.converged_s),
            "crashes": [
                {
                    "node": c.node,
                    "crashed_at_s": _r(c.crashed_at_s),
                    "first_detect_s": _r(c.first_detect_s),
                    "all_detect_s": _r(c.all_detect_s),
                }
                for c in self.crashes
            ],  # fmt: skip
            "false_positive_events": self.false_positive_events,
            "false_positive_nodes": self.false_positive_nodes,
            "incarnation_violations": len(self.incarnation_violations),
            "datagrams_per_node_s": _r(self.datagrams_per_node_s),
            "bytes_per_node_s": _r(self.bytes_per_node_s),
            "wall_s": _r(self.wall_s),
        }


def _r(x: float | None) -> float | None:
    return None if x is None else round(x, 3)


def form_cluster(cluster: SimCluster, stagger_s: float = 1.0) -> None:
    """Start every node within `stagger_s`, each joining through node 0."""
    rng = random.Random(cluster.seed)
    cluster.start(0, 0.0, [])
    for i in range(1, cluster.n):
        cluster.start(i, rng.uniform(0.0, stagger_s), [0])


def run_until_converged(cluster: SimCluster, deadline_s: float) -> float | None:
    """Advance in slices until `converged`; the time, or None at the deadline."""
    while cluster.now < deadline_s:
        cluster.run_until(cluster.now + SLICE_S)
        if converged(cluster):
            return cluster.now
    return None


CRASH_MODES = ("host", "process")


PROGRESS_SLICE_S = 5.0


def run_simulation(
    nodes: int,
    duration_s: float,
    loss: float = 0.0,
    crash: int = 0,
    seed: int = 1,
    profile: str = "lan",
    config: SwimConfig | None = None,
    wire: bool = False,
    formed: bool = False,
    crash_mode: str = "host",
    replay_rate: float = 0.0,
    progress: Callable[[float], None] | None = None,
) -> SimResult:
    """Form a cluster, crash `crash` nodes once it has converged, and report.

    Crashes are spread over the run, leaving time at the end for detection.
    With `formed`, every node starts knowing every other (no formation).
    `crash_mode` is "host" (the host goes silent: the worst case, and what
    memberlist's figures assume) or "process" (the agent dies, its host
    answers "port unreachable"). With `replay_rate`, a replayer
    (sim/attacker.py) copies any captured traffic to any member, that many
    times per second, from the start. `progress` is called with the
    simulated time every `PROGRESS_SLICE_S` simulated seconds.
    """
    if crash_mode not in CRASH_MODES:
        raise ValueError(f"crash_mode: expected one of {', '.join(CRASH_MODES)}")
    with fewer_collections():  # across the slices, not only within each
        started = time.perf_counter()
        swim = config or PROFILES[profile]
        cluster = SimCluster(nodes, seed, swim, LinkProfile(loss=loss), wire=wire, count_bytes=True)
        fps, incs, watch = FalsePositives(cluster), IncarnationMonotonic(), CrashWatch(cluster)
        cluster.observers += [fps, incs, watch]
        replayer = Replayer(cluster, replay_rate) if replay_rate > 0 else None
        if formed:
            cluster.start_formed(0.0)
            cluster.run_until(0.0)
            converged_at = cluster.now if converged(cluster) else None
        else:
            form_cluster(cluster)
            converged_at = run_until_converged(cluster, duration_s)
        rng = random.Random(seed ^ 0x5EED)
        victims = rng.sample(range(1, nodes), min(crash, nodes - 1))
        first = (converged_at or cluster.now) + 1.0
        gap = max(1.0, (duration_s - first - 30.0) / max(1, len(victims)))
        for k, victim in enumerate(victims):
            at = first + k * gap

            def crash_now(v: int = victim, when: float = at) -> None:
                cluster._halt(v, host_down=crash_mode == "host")
                watch.crashed(v, when)

            cluster.at(at, crash_now)
        while progress is not None and cluster.now + PROGRESS_SLICE_S < duration_s:
            cluster.run_until(cluster.now + PROGRESS_SLICE_S)  # slicing changes no event's order
            progress(cluster.now)
        cluster.run_until(duration_s)
        survivors = cluster.live_hosts()
        for rec in watch.records.values():
            rec.settle(survivors)
        n_live = max(1, nodes)
        return SimResult(
            config={
                "nodes": nodes,
                "duration_s": duration_s,
                "loss": loss,
                "crash": crash,
                "crash_mode": crash_mode,
                "seed": seed,
                "profile": profile,
                "formed": formed,
                "replay_rate": replay_rate,
            },  # fmt: skip
            converged_s=converged_at,
            crashes=list(watch.records.values()),
            false_positive_events=len(fps.events),
            false_positive_nodes=len(fps.subjects),
            incarnation_violations=incs.violations,
            datagrams_per_node_s=cluster.stats.datagrams / n_live / duration_s,
            bytes_per_node_s=cluster.stats.bytes / n_live / duration_s,
            wall_s=time.perf_counter() - started,
            replays=replayer.replayed if replayer is not None else 0,
        )
