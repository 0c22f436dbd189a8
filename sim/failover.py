"""kill -9 of the controller while an attacker replays its renewals and notices.

The issue-27 attack on the election, in the simulator: the dead controller's
captured `LeaseRequest`s (renewals) sent to the surviving voters, and its
`ControllerNotice`s to every survivor, at any rate, while the survivors
fail over. What must hold (tests/sim/test_attacker.py): failover within its
normal time plus 1 s, and no survivor ever reporting as controller a member
it has declared dead (`elections.NoDeadController`); the lease safety
checker runs throughout.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from shoal.election.config import LeaseConfig
from shoal.election.messages import ControllerNotice, LeaseRequest
from shoal.membership.profiles import PROFILES
from shoal.sim.attacker import Replayer
from shoal.sim.clock import NodeClock
from shoal.sim.cluster import SimCluster
from shoal.sim.elections import LeaseSafety, NoDeadController, controllers
from shoal.sim.network import LinkProfile
from shoal.sim.scenarios import form_cluster

_ATTACKED = (LeaseRequest, ControllerNotice)  # what the replayer captures


@dataclass(slots=True)
class FailoverRun:
    """What one kill -9 of the controller did, with its renewals and notices replayed."""

    seed: int
    replay_rate: float
    crashed_at: float = 0.0
    elected_s: float | None = None  # crash -> a successor holds the lease
    known_s: float | None = None  # crash -> every survivor knows the successor
    violations: list[str] = field(default_factory=list)  # LeaseSafety's
    named_dead: list[str] = field(default_factory=list)  # NoDeadController's
    replays: int = 0
    renewal_copies: int = 0  # copies of the dead controller's lease requests delivered
    renewal_copies_elsewhere: int = 0  # of which to a voter it was not sent to
    trace: list[str] = field(default_factory=list)  # the first replays, one line each


def failover_run(seed: int, replay_rate: float = 0.0, n: int = 5, loss: float = 0.0,
                 lost_voters: int = 0, back_after_s: float | None = None,
                 watch_s: float = 30.0) -> FailoverRun:  # fmt: skip
    """kill -9 of the controller of a formed `n`-node cluster, at a random
    point of its renewal cycle (and of `lost_voters` other voters with it:
    then no successor can be elected until they restart, `back_after_s`
    later if given, with what their disks kept). An attacker that captured every lease
    request and controller notice replays the dead controller's ones to the
    survivors, `replay_rate` copies per second from the crash on, all inside
    the stamp window (the issue: one renewal every 0.8 s held failover off
    for 20 s). Watched for `watch_s` after the crash."""
    lease = LeaseConfig()
    clocks = [NodeClock(i * 3.7, 0.019 * (1 if i % 2 else -1)) for i in range(n)]
    cluster = SimCluster(n, seed, PROFILES["lan"], LinkProfile(loss=loss), clocks=clocks,
                         lease_config=lease)  # fmt: skip
    safety, dead = LeaseSafety(cluster), NoDeadController(cluster)
    replayer = Replayer(cluster, replay_rate, short_share=1.0, per_second=64, start_at=None,
                        keep=lambda src, msgs: isinstance(msgs[0], _ATTACKED))  # fmt: skip
    run = FailoverRun(seed, replay_rate)
    form_cluster(cluster)
    if not cluster.run_until(20.0, lambda: safety.check() or len(controllers(cluster)) == 1):
        run.violations.append("no controller after forming")
        return run
    at = random.Random(seed).uniform(0, 2 * lease.renew_interval_s)  # anywhere in the cycle
    cluster.run_until(cluster.now + 10.0 + at, safety.check)
    (old,) = controllers(cluster)
    old_node = cluster.nodes[old]
    assert old_node is not None and old_node.election.lease_epoch is not None
    epoch = old_node.election.lease_epoch
    voters = [i for i in range(n) if i != old][:lost_voters]
    run.crashed_at = crash_at = cluster.now
    for i in [old, *voters]:
        cluster._halt(i)  # noqa: SLF001 - the simulator's own crash
    if back_after_s is not None:
        survivors = cluster.live_hosts()
        for i in voters:
            cluster.restart(i, crash_at + back_after_s, join=survivors)
    replayer.retain(lambda c: c.src == old)  # its ammunition: the dead controller's
    replayer.keep = lambda src, msgs: False
    replayer.begin(crash_at)

    def step() -> bool:
        safety.check()
        dead.check()
        since = cluster.now - crash_at
        if run.elected_s is None and controllers(cluster):
            run.elected_s = since
        if run.known_s is None:
            known = {node.election.known for node in cluster.nodes if node is not None}
            (only, *more) = known
            if not more and only is not None and only[1] > epoch:
                run.known_s = since
        return False

    cluster.run_until(crash_at + watch_s, step)
    run.violations += safety.violations
    run.named_dead = dead.violations
    run.replays = replayer.replayed
    copies = [r for r in replayer.trace if isinstance(r.capture.messages[0], LeaseRequest)]
    run.renewal_copies = len(copies)
    run.renewal_copies_elsewhere = sum(cluster.idents[r.dst].addr != r.capture.to for r in copies)
    run.trace = [r.describe(cluster) for r in list(replayer.trace)[:50]]
    return run
