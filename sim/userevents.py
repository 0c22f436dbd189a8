"""A burst of user events under loss and restarts: does every member run
every event's handlers, once?

The simulator runs the agent's delivery ledger itself (services/delivery.py,
through `ShoalNode.deliver_events`): the same store, push and anti-entropy
code carries the events, and the same ledger decides when a member hands an
event to its handlers. Only the handlers are modelled: each runs for
`handler_s` (a uniform draw) and then reports back, as the agent's handler
processes do; a crash kills the handlers running on that host. The ledger's
writes go to the host's disk (a dict that outlives crashes), and a
restarted node starts from it, as the agent starts from its data directory.

The scenario: a formed cluster of `n` nodes on a link that drops `loss` of
the datagrams; `events` events fired from random nodes over `burst_s`;
meanwhile `restart_fraction` of the nodes crash at a random moment of the
burst and come back 3-8 s later with their disk. Then it runs until every
node has delivered every event, or `settle_s` passes.

`deliveries / expected` must be 1.0, and no member may finish the handlers
of one event twice (`duplicates`). A handler killed by a crash did not
finish: its event runs again after the restart (`interrupted`), which is
the one case where a handler starts twice for an id.
"""

from __future__ import annotations

import functools
import random
from dataclasses import dataclass
from typing import Any

from shoal.membership.profiles import PROFILES
from shoal.node.composition import ShoalNode
from shoal.services.delivery import PersistDelivered, UserEventReceived, event_key
from shoal.sim.cluster import SimCluster
from shoal.sim.network import LinkProfile
from shoal.sim.scenarios import form_cluster, run_until_converged
from shoal.storage.records import Record


@dataclass(slots=True)
class BurstRun:
    """What one burst did."""

    seed: int
    n: int
    events: int
    expected: int = 0  # nodes x events
    deliveries: int = 0  # (node, event) whose handlers finished
    duplicates: int = 0  # (node, event) whose handlers finished again
    interrupted: int = 0  # handlers killed by a crash (their event runs again)
    restarted: int = 0
    skipped: int = 0  # events whose origin was down at their time (not sent)
    settled_s: float | None = None  # end of the burst -> every node delivered every event

    @property
    def ratio(self) -> float:
        """deliveries / expected: 1.0 when every node got every event."""
        return self.deliveries / self.expected if self.expected else 0.0


class _Handlers:
    """The modelled handlers of every host, and the hosts' ledger disks."""

    def __init__(self, cluster: SimCluster, run: BurstRun, rng: random.Random,
                 handler_s: tuple[float, float]) -> None:  # fmt: skip
        self.cluster = cluster
        self.run = run
        self.rng = rng
        self.handler_s = handler_s
        self.disks: list[dict[bytes, int]] = [{} for _ in range(cluster.n)]
        self.finished: list[dict[bytes, int]] = [{} for _ in range(cluster.n)]

    def boot(self, i: int) -> None:
        """A host started: its node delivers from the ledger on its disk."""
        node = self.cluster.nodes[i]
        assert node is not None
        node.deliver_events(dict(self.disks[i]), self.cluster.clocks[i].local(self.cluster.now))

    def persisted(self, i: int, write: Any) -> None:
        if isinstance(write, PersistDelivered):
            self.disks[i][write.key] = write.wall_ms

    def on_event(self, now: float, i: int, event: Any) -> None:
        if type(event) is UserEventReceived:
            node = self.cluster.nodes[i]
            assert node is not None
            done = functools.partial(self._finish, i, node, event.record)
            self.cluster.at(now + self.rng.uniform(*self.handler_s), done)

    def _finish(self, i: int, node: ShoalNode, rec: Record) -> None:
        if self.cluster.nodes[i] is not node:
            self.run.interrupted += 1  # the host crashed while the handler ran
            return
        ledger = node.services.events
        assert ledger is not None
        self.finished[i][rec.key] = self.finished[i].get(rec.key, 0) + 1
        self.cluster._command(i, lambda n, now: ledger.delivered(rec.key, n.sync.wall_ms(now)))


def burst_run(seed: int, n: int = 100, events: int = 1000, loss: float = 0.10,
              restart_fraction: float = 0.05, burst_s: float = 10.0, settle_s: float = 120.0,
              handler_s: tuple[float, float] = (0.01, 0.5),
              new_address: bool = False) -> BurstRun:  # fmt: skip
    """Run the scenario of the module docstring once (`new_address`: the
    restarted hosts come back at another address, as after a DHCP renewal)."""
    run = BurstRun(seed, n, events)
    rng = random.Random(seed * 31 + 7)
    cluster = SimCluster(n, seed, PROFILES["lan"], LinkProfile(loss=loss))
    handlers = _Handlers(cluster, run, random.Random(seed * 31 + 8), handler_s)
    cluster.boot_hooks.append(handlers.boot)
    cluster.persist_hooks.append(handlers.persisted)
    cluster.observers.append(handlers)
    form_cluster(cluster)
    assert run_until_converged(cluster, 60.0) is not None, "the cluster did not form"
    start = cluster.now + 1.0
    seqs = [0] * n
    keys: list[bytes] = []

    def fire(origin: int, value: bytes) -> None:
        node = cluster.nodes[origin]
        if node is None:
            run.skipped += 1  # its origin is down: never sent, so never expected
            return
        seqs[origin] += 1
        key = event_key(cluster.idents[origin].node_id, seqs[origin])
        keys.append(key)
        cluster._command(origin, lambda nd, now: nd.write(key, value, now))

    for e in range(events):
        cluster.at(start + burst_s * e / events,
                   functools.partial(fire, rng.randrange(n), b"\x00\x05burst%d" % e))  # fmt: skip
    for i in rng.sample(range(n), int(n * restart_fraction)):
        down = start + rng.uniform(0, burst_s)
        cluster.crash(i, down)
        cluster.restart(i, down + rng.uniform(3.0, 8.0), [j for j in range(n) if j != i][:3],
                        new_address)  # fmt: skip
        run.restarted += 1

    def everywhere() -> bool:
        return cluster.now > start + burst_s and cluster.pending_boots == 0 and all(
            len(f) == len(keys) for f in handlers.finished)  # fmt: skip

    while cluster.now < start + burst_s + settle_s and not everywhere():
        cluster.run_until(cluster.now + 0.25)
    if everywhere():
        run.settled_s = cluster.now - (start + burst_s)
    run.expected = n * len(keys)
    run.deliveries = sum(len(f) for f in handlers.finished)
    run.duplicates = sum(c - 1 for f in handlers.finished for c in f.values() if c > 1)
    return run
