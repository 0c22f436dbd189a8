"""Services: the pure core of the platform features, composed by ShoalNode.

Theory of operation. Membership, election and anti-entropy keep the cluster;
the platform features built on them (user events today; see
docs/architecture.md for what is still in the daemon) keep protocol state
of their own, and that state follows the same contract as the three cores
(kernel/contract.py): the driver calls `receive`, `tick(now)`, commands,
and `drain()`; the core never reads a clock, never draws from global
randomness and never does IO. What is IO stays in the driver: running a
handler process, probing a port, writing the data directory.

User-event delivery (services/delivery.py) is off until `deliver_events`
is called, and the health checks' machines (services/checks.py) hold no
deadline until a TTL check is configured: the simulator runs clusters
without either, and a core with no deadline changes nothing in those runs.
"""

from __future__ import annotations

import random
from typing import Any

from shoal.kernel.contract import Address, Output
from shoal.kernel.deadlines import Deadlines
from shoal.kernel.outbox import Outbox
from shoal.services.checks import CheckMachines
from shoal.services.delivery import EventLedger
from shoal.storage.store import EVENT_PREFIX, RecordChange, RecordStore


class Services:
    """The platform features' protocol state (module docstring).

    Args:
        store: the replicated records (user events are records).
        retention_ms: how long a replica keeps a user-event record.
        rng: this core's only randomness.
        wall_offset_ms: wall clock minus monotonic `now`, in ms.
        out: the outbox to write to (ShoalNode shares its own).
    """

    __slots__ = ("_store", "_retention_ms", "rng", "out", "_deadlines", "events", "checks",
                 "_wall_offset_ms")  # fmt: skip

    def __init__(self, store: RecordStore, retention_ms: int, rng: random.Random,
                 wall_offset_ms: int = 0, out: Outbox | None = None) -> None:  # fmt: skip
        self._store = store
        self._retention_ms = retention_ms
        self.rng = rng
        self.out = Outbox() if out is None else out
        self._deadlines = Deadlines()
        self.events: EventLedger | None = None  # user-event delivery, once turned on
        # The health checks' machines: no deadline until a TTL check is configured.
        self.checks = CheckMachines(self.out, self._deadlines)
        self._wall_offset_ms = wall_offset_ms

    # -- the core contract -----------------------------------------------------

    def receive(self, message: Any, sender: Address, now: float) -> None:
        """No wire message is routed here yet (queries and the handshake
        still travel on the daemon's streams)."""
        raise AssertionError(f"no route for {type(message).__name__}")

    def tick(self, now: float) -> None:
        """Run whatever is due."""
        self._deadlines.run_due(now)

    def next_deadline(self) -> float | None:
        """When `tick` is next due (None: nothing pending)."""
        return self._deadlines.next_at()

    def drain(self) -> Output:
        """Writes (the delivery ledger's), then events (events to deliver)."""
        return self.out.drain()

    def set_wall_offset(self, wall_offset_ms: int) -> None:
        """Wall clock minus monotonic `now`, in ms."""
        self._wall_offset_ms = wall_offset_ms
        if self.events is not None:
            self.events.wall_offset_ms = wall_offset_ms

    # -- user events -------------------------------------------------------------

    def deliver_events(self, delivered: dict[bytes, int], now: float) -> EventLedger:
        """Deliver user events here from now on, with the ledger a previous
        run persisted (key -> wall ms)."""
        assert self.events is None, "user-event delivery is already on"
        ledger = EventLedger(self._store, delivered, self._retention_ms, self.out,
                             self._deadlines)  # fmt: skip
        ledger.wall_offset_ms = self._wall_offset_ms
        ledger.start(now)
        self.events = ledger
        return ledger

    def records_changed(self, changes: list[RecordChange]) -> None:
        """Records arrived or were written: offer the user events among them."""
        ledger = self.events
        if ledger is None:
            return
        for rec, _, _ in changes:
            if rec.key.startswith(EVENT_PREFIX):
                ledger.offer(rec)
