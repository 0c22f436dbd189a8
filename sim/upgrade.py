"""A rolling upgrade and its reverse, in the simulator (kernel/versions.py).

Five nodes of this build form a cluster; each is stopped (a graceful leave)
and restarted on the stand-in for the next release (node/nextrelease.py:
membership version 2, feature level 2, one new message), the controller
last; then the operator caps the feature level at 1 and each is rolled back.
What a user would notice is watched throughout: the feature level each node
knows, the new message reaching a node that does not understand it (which
would make that node drop the datagram: here, a `misread`), a node told of
a level above its own (it would stop), the controllers and their epochs.

`cap_before_downgrade=False` is the deliberate mistake (a downgrade without
the cap): the checks must catch it, or they are not trusted.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any

from shoal.election.events import ControllerElected
from shoal.kernel.versions import NEXT_RELEASE_STANDIN, THIS_BUILD, Versions
from shoal.membership.member import NodeIdentity
from shoal.membership.profiles import PROFILES
from shoal.node import nextrelease
from shoal.node.features import FEATURE_CAP_KEY, FeatureLevelChanged, FeatureLevelUnsupported
from shoal.node.nextrelease import LevelProbe
from shoal.sim.cluster import SimCluster
from shoal.sim.scenarios import form_cluster, run_until_converged

NODES = 5
STEP_S = 8.0  # between two restarts: the restarted node rejoins and settles


@dataclass
class UpgradeRun:
    """What one rolling upgrade (and its reverse) showed."""

    seed: int
    level_mixed_max: int = 0  # the highest level any node learned while builds were mixed
    level_upgraded_s: float | None = None  # all knew level 2, after the last upgrade
    level_capped_s: float | None = None  # all knew level 1, after the cap
    probes_to_old: int = 0  # new messages that reached a node of the older build
    probes_delivered: int = 0
    misread: int = 0  # deliveries a node's build could not read (dropped whole)
    unsupported: list[tuple[int, int]] = field(default_factory=list)  # (node, level)
    elections: list[tuple[float, int, int]] = field(default_factory=list)  # (at, node, epoch)
    controller_restarts: int = 0


class _Watch:
    def __init__(self, cluster: SimCluster, run: UpgradeRun) -> None:
        self.cluster, self.run = cluster, run
        self.levels = [0] * cluster.n

    def mixed(self) -> bool:
        """Whether the cluster's members run two builds right now (a node
        that has left, or is down, is not a member)."""
        c = self.cluster
        return len({c.idents[i].versions for i, node in enumerate(c.nodes)
                    if node is not None and not node.leaving}) > 1  # fmt: skip

    def on_event(self, now: float, node: int, event: Any) -> None:
        if isinstance(event, FeatureLevelChanged):
            self.levels[node] = event.level
            if self.mixed():
                self.run.level_mixed_max = max(self.run.level_mixed_max, event.level)
        elif isinstance(event, FeatureLevelUnsupported):
            self.run.unsupported.append((node, event.level))
        elif isinstance(event, ControllerElected):
            self.run.elections.append((now, node, event.epoch))

    def on_send(self, src: int, to: Any, messages: tuple[Any, ...], channel: Any) -> None:
        for m in messages:
            if type(m) is LevelProbe:
                self.run.probes_delivered += 1
                dst = self.cluster._host_of.get(to)
                newest = NEXT_RELEASE_STANDIN.features
                if dst is not None and self.cluster.idents[dst].versions.features < newest:
                    self.run.probes_to_old += 1


def _on_build(cluster: SimCluster, i: int, versions: Versions) -> None:
    old = cluster.idents[i]
    cluster.idents[i] = NodeIdentity(old.name, old.node_id, old.addr, old.tags, versions)


def _controller(cluster: SimCluster) -> int | None:
    for i, node in enumerate(cluster.nodes):
        if node is not None and node.election.is_controller:
            return i
    return None


def _roll(cluster: SimCluster, versions: Versions, run: UpgradeRun) -> None:
    """Restart every node on `versions`, one at a time, the controller last."""
    first = _controller(cluster)
    order = [i for i in range(cluster.n) if i != first] + ([first] if first is not None else [])
    for i in order:
        was_controller = _controller(cluster) == i
        at = cluster.now + 0.5
        cluster.leave(i, at)
        cluster.crash(i, at + 0.5)  # the process exits after its leave
        cluster.at(at + 0.6, functools.partial(_on_build, cluster, i, versions))
        others = [j for j in range(cluster.n) if j != i]
        cluster.restart(i, at + 1.0, others)
        cluster.run_until(cluster.now + STEP_S)
        run.controller_restarts += was_controller


def _all_know(watch: _Watch, level: int, cluster: SimCluster, within_s: float) -> float | None:
    start = cluster.now
    while cluster.now < start + within_s:
        if all(lv == level for lv in watch.levels):
            return cluster.now - start
        cluster.run_until(cluster.now + 0.25)
    return None


def run_upgrade(seed: int, cap_before_downgrade: bool = True) -> UpgradeRun:
    """Form, roll forward to the stand-in, cap the level, roll back."""
    nextrelease.enable()
    cluster = SimCluster(NODES, seed, PROFILES["lan"])
    run = UpgradeRun(seed)
    watch = _Watch(cluster, run)
    cluster.observers.append(watch)
    cluster.send_hooks.append(watch.on_send)
    form_cluster(cluster)
    assert run_until_converged(cluster, 30.0) is not None, "the cluster did not form"
    cluster.run_until(cluster.now + 5.0)  # a controller, and its first notices
    _roll(cluster, NEXT_RELEASE_STANDIN, run)
    run.level_upgraded_s = _all_know(watch, NEXT_RELEASE_STANDIN.features, cluster, 10.0)
    if cap_before_downgrade:
        cap = THIS_BUILD.features
        cluster.write(0, FEATURE_CAP_KEY, b"%d" % cap, cluster.now + 0.1)
        run.level_capped_s = _all_know(watch, cap, cluster, 10.0)
    _roll(cluster, THIS_BUILD, run)
    cluster.run_until(cluster.now + 5.0)
    run.misread = cluster.stats.misread
    return run
