"""A lost majority, and `shoal recover`, in the simulator (issue 39).

`recover_hosts` is what an operator does: stop the survivors, run
`shoal recover`'s decision (node/recovery.py, the same pure functions) on
their disks, write it, start them again.

`lost_majority_run` is the scenario built around it. Five voters run the
metadata log's clients (sim/meta.py); one of the two that will survive is
cut off meanwhile, so the survivors' logs differ: one holds every entry
committed, the other lacks the last seconds' (the choice of the base
matters: etcd issue #17638). The clients stop; the three others lose their
disks (or, with `old_data`, only stop: their disks kept) and stay down; the
cut heals; the two survivors are recovered and a second round of clients
runs; later the three come back, one by one: wiped, they are new members
that join as non-voters and are promoted (one change at a time, as ever);
with their old data, their configuration is superseded by the recovered
one (election/voters.py, "Recovery"): they are fenced, and rejoin as
non-voters. The meta swarm's checks (sim/meta.py) and the election's
(`LeaseSafety`) must find nothing.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field

from shoal.election.config import LeaseConfig
from shoal.membership.profiles import PROFILES
from shoal.metalog.core import MetaConfig
from shoal.metalog.log import PersistLog
from shoal.node.recovery import (
    Decision,
    Survivor,
    audit_entry,
    election_state,
    plan,
    summarize,
)
from shoal.sim.cluster import SimCluster
from shoal.sim.elections import LeaseSafety
from shoal.sim.meta import MetaRun, _Applied, _Clients
from shoal.sim.metacall import settle
from shoal.sim.network import LinkProfile
from shoal.sim.wipe import wipe_host

# The scenario's schedule, in simulated seconds.
_CUT_AT, _CLIENTS_UNTIL, _LOSS_AT, _RECOVER_AT, _BACK_AT = 8.0, 11.0, 13.0, 16.0, 28.0


def recover_hosts(cluster: SimCluster, survivors: list[int]) -> tuple[Decision, list[Survivor]]:
    """Stop `survivors`, write `shoal recover`'s decision on their disks,
    start them again (each joining the others); the decision, and the
    summaries it was made from."""
    for i in survivors:
        if cluster.nodes[i] is not None:
            cluster._halt(i)  # noqa: SLF001 - the agent stopped for the recovery
    summaries = []
    for i in survivors:
        disk, ident = cluster.disks[i], cluster.idents[i]
        summaries.append(summarize(ident.name, ident.node_id, disk.election, disk.log,
                                   disk.snapshot))  # fmt: skip
    decision = plan([cluster.idents[i].name for i in survivors], summaries)
    for i in survivors:
        disk = cluster.disks[i]
        if cluster.idents[i].name == decision.base:
            entry = audit_entry(decision)
            disk.write_log_synced(PersistLog(entry.index, (entry,)))
        disk.write_election(election_state(decision))
        disk.start_sync()
        disk.sync_done()
    for i in survivors:
        cluster._boot(i, [j for j in survivors if j != i])  # noqa: SLF001
    return decision, summaries


@dataclass
class Recovered:
    """What the scenario did and found, beyond the meta swarm's `MetaRun`."""

    run: MetaRun
    survivors: list[int]
    lost: list[int]
    lagger: int  # the survivor cut off before the loss
    decision: Decision | None = None
    summaries: list[Survivor] = field(default_factory=list)  # the survivors', as read
    epochs_before: int = 0  # the highest controller epoch before the loss
    safety: list[str] = field(default_factory=list)  # LeaseSafety's violations
    # Each (host, epoch, its configuration's recovery count) controller after the recovery.
    leaders_after: set[tuple[int, int, int]] = field(default_factory=set)
    first_controller_s: float | None = None  # after the recovery, in simulated seconds


def lost_majority_run(seed: int, old_data: bool = False, duration_s: float = 50.0) -> Recovered:
    """One seeded run of the scenario (module docstring)."""
    rng = random.Random(seed)
    n = 5
    snap = random.Random(seed * 6_007 + 5)
    config = MetaConfig(snapshot_every=snap.choice([5, 10, 25]),
                        keep_entries=snap.choice([0, 2, 8]), chunk_bytes=512,
                        chunk_window=2)  # fmt: skip
    loss = rng.choice([0.0, 0.02])
    cluster = SimCluster(n, seed, PROFILES["lan"], LinkProfile(loss=loss),
                         lease_config=LeaseConfig(), bootstrap_expect=n, meta=config)  # fmt: skip
    run = MetaRun(seed, n, loss, 0.0, cluster=cluster)
    applied = _Applied(cluster, run)
    safety = LeaseSafety(cluster)
    hosts = list(range(n))
    rng.shuffle(hosts)
    survivors, lost = sorted(hosts[:2]), sorted(hosts[2:])
    out = Recovered(run, survivors, lost, rng.choice(survivors))
    for i in range(n):
        cluster.start(i, rng.uniform(0.0, 1.0), [0] if i else [])
    cluster.run_until(6.0, safety.check)
    _Clients(cluster, rng, 6, 3, run, _CLIENTS_UNTIL)
    cluster.at(_CUT_AT, lambda: cluster.net.isolate(out.lagger, list(range(n))))
    cluster.at(_LOSS_AT, lambda: _lose(cluster, out, old_data, safety))
    cluster.at(_LOSS_AT + 1.0, cluster.net.heal)
    cluster.at(_RECOVER_AT, lambda: _recover(cluster, out, rng, duration_s))
    for k, i in enumerate(lost):  # one by one
        cluster.at(_BACK_AT + 2.0 * k + rng.uniform(0.0, 1.0), _back(cluster, i, survivors))
    cluster.run_until(duration_s, lambda: _watch(cluster, out, safety))
    settle(run.calls, cluster.now)
    applied.check(cluster)
    out.safety = safety.violations
    run.faults.append(f"survivors {survivors} (lagger {out.lagger}), lost {lost}"
                      + (" (old data kept)" if old_data else " (disks wiped)"))  # fmt: skip
    return out


def _back(cluster: SimCluster, i: int, survivors: list[int]) -> Callable[[], None]:
    """Host `i` starts again (with its disk as the loss left it), joining the survivors."""
    return lambda: cluster._boot(i, survivors)  # noqa: SLF001


def _lose(cluster: SimCluster, out: Recovered, old_data: bool, safety: LeaseSafety) -> None:
    out.epochs_before = max((t.epoch for t in safety.tenures), default=0)
    for i in out.lost:
        if old_data:
            cluster._halt(i)  # noqa: SLF001
        else:
            wipe_host(cluster, i)


def _recover(cluster: SimCluster, out: Recovered, rng: random.Random, duration_s: float) -> None:
    out.decision, out.summaries = recover_hosts(cluster, out.survivors)
    # A second round of clients (those homed on the lost hosts wait for them).
    _Clients(cluster, rng, 6, 3, out.run, duration_s - 4.0)


def _watch(cluster: SimCluster, out: Recovered, safety: LeaseSafety) -> bool:
    """Each step: the election's checks, and who leads after the recovery."""
    safety.check()
    if out.decision is not None:
        for i, node in enumerate(cluster.nodes):
            el = node.election if node is not None else None
            if el is not None and el.lease_epoch is not None and el.voters is not None:
                out.leaders_after.add((i, el.lease_epoch, el.voters.recovery))
                if out.first_controller_s is None:
                    out.first_controller_s = cluster.now - _RECOVER_AT
    return False
