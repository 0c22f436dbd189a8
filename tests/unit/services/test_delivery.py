"""The user-event ledger (services/delivery.py), driven with explicit `now`:
each event's handlers run once per member, a full queue delays an event and
never loses it, and the ledger outlives a restart."""

import random

from shoal.kernel.contract import EMPTY, Output
from shoal.services.core import Services
from shoal.services.delivery import (
    FIRST_RESCAN_S,
    QUEUE_MAX,
    RESCAN_S,
    ForgetDelivered,
    PersistDelivered,
    UserEventReceived,
    encode_event,
    event_key,
)
from shoal.storage.records import Record
from shoal.storage.store import MemoryStore, Replica

WALL = 1_800_000_000_000
ORIGIN = b"\x0a" * 16
HOUR_MS = 3_600_000


def platform(replica: Replica, delivered: dict[bytes, int] | None = None) -> Services:
    services = Services(replica.store, HOUR_MS, random.Random(1), WALL)
    services.deliver_events(delivered or {}, 0.0)
    return services


def fire(replica: Replica, seq: int, services: Services) -> Record:
    rec = replica.write(event_key(ORIGIN, seq), encode_event("deploy", b"v%d" % seq), WALL)
    services.records_changed([(rec, False, "write")])
    return rec


def handed_out(out: Output) -> list[bytes]:
    return [e.record.key for e in out.events if type(e) is UserEventReceived]


def test_an_event_is_handed_to_the_handlers_once_however_often_it_arrives():
    """A record pushed, then repaired by anti-entropy, then found by a rescan runs once."""
    replica = Replica(MemoryStore(2), b"\x01" * 16, 500, HOUR_MS)
    services = platform(replica)
    rec = fire(replica, 1, services)
    services.records_changed([(rec, False, "sync")])
    assert handed_out(services.drain()) == [rec.key]
    services.tick(FIRST_RESCAN_S)
    assert services.drain() is EMPTY  # pending: not offered twice
    assert services.events is not None
    services.events.delivered(rec.key, WALL)
    out = services.drain()
    assert [p.write for p in out.persist] == [PersistDelivered(rec.key, WALL)]
    services.tick(FIRST_RESCAN_S + RESCAN_S)
    assert services.drain() is EMPTY


def test_a_full_queue_delays_an_event_until_a_rescan_and_never_drops_it():
    """Past QUEUE_MAX waiting events, the sender's next event waits for the rescan."""
    replica = Replica(MemoryStore(2), b"\x01" * 16, 500, HOUR_MS)
    services = platform(replica)
    for seq in range(1, QUEUE_MAX + 2):
        fire(replica, seq, services)
    first = handed_out(services.drain())
    assert len(first) == QUEUE_MAX and services.events is not None and services.events.full()
    for key in first:
        services.events.delivered(key, WALL)
    services.drain()
    services.tick(FIRST_RESCAN_S)
    assert handed_out(services.drain()) == [event_key(ORIGIN, QUEUE_MAX + 1)]


def test_after_a_restart_delivered_events_stay_delivered_and_interrupted_ones_run_again():
    """A crash while a handler ran: that event runs again at the next start, no other."""
    replica = Replica(MemoryStore(2), b"\x01" * 16, 500, HOUR_MS)
    services = platform(replica)
    done, cut = fire(replica, 1, services), fire(replica, 2, services)
    services.drain()
    assert services.events is not None
    services.events.delivered(done.key, WALL)
    disk = {p.write.key: p.write.wall_ms for p in services.drain().persist}
    again = platform(replica, disk)  # the restart: the same store, the ledger from disk
    again.tick(FIRST_RESCAN_S)
    assert handed_out(again.drain()) == [cut.key]


def test_delivered_ids_are_forgotten_once_every_replica_dropped_their_records():
    """The ledger does not grow without bound: ids older than the retention go."""
    replica = Replica(MemoryStore(2), b"\x01" * 16, 500, HOUR_MS)
    key = event_key(ORIGIN, 1)
    services = platform(replica, {key: WALL - 2 * HOUR_MS})
    services.tick(FIRST_RESCAN_S)
    out = services.drain()
    assert [p.write for p in out.persist] == [ForgetDelivered((key,))]
    assert services.events is not None and services.events.done == {}
