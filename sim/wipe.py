"""Lost disks: a voter comes back with an empty data directory (issue 37).

`wipe_host` is the fault itself: the host stops, its disk is lost (the
election's state, the metadata log, the records, the incarnation), and it
comes back under its name with a new data directory, so a new `node_id`.

`schedule_wipe` is the swarm's fault built around it (sim/meta.py): the
case in which a wiped voter that voted as its old self would elect a
controller without committed entries. A minority of the voters is cut off
(they fall behind), then as many others, which held the entries committed
meanwhile, lose their disks, and the controller crashes as the cut heals
and the wiped voters come back. The laggards and the wiped voters are a
majority: if the wiped ones granted as their old selves (their logs are
empty, so any candidate is up to date to them), a laggard would become
controller and the writes committed while it was cut off would be lost. A
voter is its name and its data directory's id (election/voters.py,
"Identity"): the wiped ones refuse, and no controller is elected until one
holding the entries is back.
"""

from __future__ import annotations

import random

from shoal.membership.member import NodeIdentity
from shoal.sim.cluster import SimCluster
from shoal.sim.elections import controllers
from shoal.storage.store import MemoryStore


def wipe_host(cluster: SimCluster, i: int) -> None:
    """Stop host `i` (if running) and lose its disk: it boots next with a
    new data directory (a new `node_id`), under the same name and address."""
    if cluster.nodes[i] is not None:
        cluster._halt(i)  # noqa: SLF001 - the simulator's own crash
    disk = cluster.disks[i]
    disk.wipe()
    cluster.stores[i] = MemoryStore(cluster.sync_config.tree_depth)
    old = cluster.idents[i]
    rng = random.Random(cluster.seed * 1_000_003 + i * 7 + disk.wiped)
    cluster.idents[i] = NodeIdentity(old.name, rng.randbytes(16), old.addr, old.tags,
                                     old.versions)  # fmt: skip


def schedule_wipe(cluster: SimCluster, rng: random.Random, at: float, down: set[int],
                  faults: list[str]) -> None:  # fmt: skip
    """Schedule the wiped-voters fault (module docstring) from `at`, over
    about 4 s, told in `faults` as it happens; the controller crashed is put
    in `down` (it comes back at the heal), the wiped voters come back by
    themselves."""
    n = cluster.n
    k = (n - 1) // 2  # laggards, and as many wiped voters

    def cut() -> None:
        live = [i for i in cluster.live_hosts() if i not in down]
        ctl = [i for i in controllers(cluster) if i in live]
        if not ctl or len(live) < 2 * k + 1:
            faults.append(f"{cluster.now:.1f} wipe skipped")
            return
        others = [i for i in live if i != ctl[0]]
        rng.shuffle(others)
        lag, wiped = others[:k], others[k : 2 * k]
        for host in lag:
            cluster.net.isolate(host, list(range(n)))
        faults.append(f"{cluster.now:.1f} wipe: cut {lag}, wipe {wiped}, crash {ctl[0]}")
        cluster.at(cluster.now + rng.uniform(1.0, 2.5), lambda: _wipe(wiped, ctl[0]))

    def _wipe(wiped: list[int], ctl: int) -> None:
        for host in wiped:
            wipe_host(cluster, host)
        cluster.at(cluster.now + rng.uniform(0.5, 2.0), lambda: _back(wiped, ctl))

    def _back(wiped: list[int], ctl: int) -> None:
        if cluster.nodes[ctl] is not None:
            down.add(ctl)
            cluster._halt(ctl)  # noqa: SLF001
        cluster.net.heal()
        for host in wiped:
            if cluster.nodes[host] is None and host not in down:
                cluster._boot(host, [j for j in range(n) if j != host])  # noqa: SLF001

    cluster.at(at, cut)
