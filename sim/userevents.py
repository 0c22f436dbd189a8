"""A burst of user events under loss and restarts: does every member get
every event, once?

User events are records of the replicated store (daemon/userevents.py,
storage/store.py `EVENT_PREFIX`); the simulator runs the same store, push
and anti-entropy code. The scenario: a formed cluster of `n` nodes on a
link that drops `loss` of the datagrams; `events` events fired from random
nodes over `burst_s`; meanwhile `restart_fraction` of the nodes crash at a
random moment of the burst and come back 3-8 s later with their disk.
Then it runs until every node holds every event, or `settle_s` passes.

A node delivers an event when the record is new to its store (that is what
makes the agent run its handlers), or at its restart for a record its store
took in just before the crash (the agent's rescan): `deliveries /
expected` must be 1.0, and no node may take the same event in twice
(`duplicates`).
"""

from __future__ import annotations

import functools
import random
from dataclasses import dataclass

from shoal.membership.profiles import PROFILES
from shoal.sim.cluster import SimCluster
from shoal.sim.network import LinkProfile
from shoal.sim.scenarios import form_cluster, run_until_converged
from shoal.storage.store import EVENT_PREFIX


@dataclass(slots=True)
class BurstRun:
    """What one burst did."""

    seed: int
    n: int
    events: int
    expected: int = 0  # nodes x events
    deliveries: int = 0  # (node, event) taken in for the first time
    duplicates: int = 0  # (node, event) taken in again
    restarted: int = 0
    skipped: int = 0  # events whose origin was down at their time (not sent)
    settled_s: float | None = None  # end of the burst -> every node holds every event

    @property
    def ratio(self) -> float:
        """deliveries / expected: 1.0 when every node got every event."""
        return self.deliveries / self.expected if self.expected else 0.0


def burst_run(seed: int, n: int = 100, events: int = 1000, loss: float = 0.10,
              restart_fraction: float = 0.05, burst_s: float = 10.0,
              settle_s: float = 120.0) -> BurstRun:  # fmt: skip
    """Run the scenario of the module docstring once."""
    run = BurstRun(seed, n, events)
    rng = random.Random(seed * 31 + 7)
    cluster = SimCluster(n, seed, PROFILES["lan"], LinkProfile(loss=loss))
    form_cluster(cluster)
    assert run_until_converged(cluster, 60.0) is not None, "the cluster did not form"
    seen: list[dict[bytes, int]] = [{} for _ in range(n)]
    keys: list[bytes] = []
    wanted: set[bytes] = set()

    def watch(i: int) -> None:
        node = cluster.nodes[i]
        assert node is not None
        node.sync.replica.changes = []
        # At its start an agent delivers what its store holds and it has not
        # delivered (daemon/userevents.py `rescan`): records that arrived just
        # before a crash, whose handlers never ran.
        for rec in node.sync.replica.store.scan(EVENT_PREFIX, b"", 10**9):
            if rec.key in wanted and rec.key not in seen[i]:
                seen[i][rec.key] = 1

    cluster.boot_hooks.append(watch)
    for i in range(n):
        watch(i)
    start = cluster.now + 1.0
    seqs = [0] * n
    def fire(origin: int, value: bytes) -> None:
        node = cluster.nodes[origin]
        if node is None:
            run.skipped += 1  # its origin is down: never sent, so never expected
            return
        seqs[origin] += 1
        origin_id = cluster.idents[origin].node_id.hex().encode()
        key = EVENT_PREFIX + origin_id + b"/%020d" % seqs[origin]
        keys.append(key)
        wanted.add(key)
        node.write(key, value, cluster.clocks[origin].local(cluster.now))
        cluster._flush(origin)

    for e in range(events):
        cluster.at(start + burst_s * e / events,
                   functools.partial(fire, rng.randrange(n), b"\x00\x05burst%d" % e))  # fmt: skip
    for i in rng.sample(range(n), int(n * restart_fraction)):
        down = start + rng.uniform(0, burst_s)
        cluster.crash(i, down)
        cluster.restart(i, down + rng.uniform(3.0, 8.0), [j for j in range(n) if j != i][:3])
        run.restarted += 1

    def collect() -> None:
        for i, node in enumerate(cluster.nodes):
            if node is None or not node.sync.replica.changes:
                continue
            for rec, _, _ in node.sync.replica.changes:
                if rec.key in wanted:
                    seen[i][rec.key] = seen[i].get(rec.key, 0) + 1
            node.sync.replica.changes.clear()

    def everywhere() -> bool:
        return cluster.now > start + burst_s and cluster.pending_boots == 0 and all(
            len(s) == len(keys) for s in seen)  # fmt: skip

    while cluster.now < start + burst_s + settle_s and not everywhere():
        cluster.run_until(cluster.now + 0.25)  # in slices: collecting scans every node
        collect()
    if everywhere():
        run.settled_s = cluster.now - (start + burst_s)
    run.expected = n * len(keys)
    run.deliveries = sum(len(s) for s in seen)
    run.duplicates = sum(c - 1 for s in seen for c in s.values() if c > 1)
    return run
