"""User-event delivery: the ledger of the events delivered here, and the rescans.

Theory of operation. A user event is a record of the replicated store under
`EVENT_PREFIX` (storage/store.py): its key names the origin and a sequence
number, which is the event's id. Each member runs its handlers once per id.
This core decides *when* a record is handed to the handlers; the driver
runs them (processes are IO) and reports back.

An event id is in one of three states here:

- unknown: neither pending nor delivered;
- pending: handed to the driver (`UserEventReceived`), its handlers not yet
  finished; at most `QUEUE_MAX` ids are pending, and an offer past that is
  dropped and counted (the next rescan finds it again: a full queue delays
  an event, never loses it);
- delivered: its handlers finished; the id and the wall time are in the
  ledger, made durable by a `PersistDelivered` write before anything else
  is decided about it.

Transitions: a record that arrives or is written here is *offered*
(unknown -> pending); `delivered(key)` moves pending -> delivered;
`released(key)` (the driver gave up: it is stopping) moves pending ->
unknown. Every `RESCAN_S` the store is scanned and every stored event not
pending or delivered is offered again: that covers a record that arrived
just before a crash (its handlers never ran) and an offer dropped by a full
queue. Ids delivered longer ago than the store's event retention (plus ten
minutes) are forgotten (`ForgetDelivered`): every replica has dropped those
records, so no rescan can offer them again.

So an id is delivered at most once per ledger, and the ledger outlives
restarts; an event whose handlers were running at a crash runs again at
the next start (the handlers get the id to deduplicate that case).
"""

from __future__ import annotations

import struct

import msgspec

from shoal.kernel.counters import Counters
from shoal.kernel.deadlines import Deadlines
from shoal.kernel.outbox import Outbox
from shoal.storage.records import Record
from shoal.storage.store import EVENT_PREFIX, RecordStore

MAX_PAYLOAD_BYTES = 64 * 1024
QUEUE_MAX = 1024
FIRST_RESCAN_S = 1.0
RESCAN_S = 10.0
_SCAN_BATCH = 1000
# Delivered ids are kept this much longer than the records themselves.
_FORGET_MARGIN_MS = 600_000
_NAME_LEN = struct.Struct(">H")


def event_key(origin: bytes, seq: int) -> bytes:
    """The store key of event `seq` of the member with id `origin`."""
    return EVENT_PREFIX + origin.hex().encode() + b"/%020d" % seq


def event_id(key: bytes) -> str:
    """`ORIGIN-ID:SEQ` from a store key."""
    origin, _, seq = key[len(EVENT_PREFIX) :].decode().partition("/")
    return f"{origin}:{int(seq)}"


def encode_event(name: str, payload: bytes) -> bytes:
    """The stored value: the name's length, the name, the payload."""
    raw = name.encode()
    return _NAME_LEN.pack(len(raw)) + raw + payload


def decode_event(value: bytes) -> tuple[str, bytes] | None:
    """(name, payload), or None for a value that is not an event."""
    if len(value) < _NAME_LEN.size:
        return None
    (n,) = _NAME_LEN.unpack_from(value)
    try:
        name = value[_NAME_LEN.size : _NAME_LEN.size + n].decode()
    except UnicodeDecodeError:
        return None
    return name, value[_NAME_LEN.size + n :]


class UserEventReceived(msgspec.Struct, frozen=True):
    """Run the handlers of this event, then call `delivered(record.key)`."""

    record: Record


class PersistDelivered(msgspec.Struct, frozen=True):
    """Record in the data directory that event `key` was delivered at `wall_ms`."""

    key: bytes
    wall_ms: int


class ForgetDelivered(msgspec.Struct, frozen=True):
    """Remove these delivered ids from the data directory."""

    keys: tuple[bytes, ...]


class DeliveryCounters(Counters):
    """What the ledger did."""

    offered: int = 0  # handed to the driver's handlers
    delivered: int = 0
    queue_full: int = 0  # offers dropped for a full queue (found again by a rescan)
    rescans: int = 0
    forgotten: int = 0


class EventLedger:
    """Which user events this member delivered, and which wait (module docstring).

    Args:
        store: the replicated records, scanned by the rescans.
        delivered: the ledger a previous run persisted: key -> wall ms.
        retention_ms: how long a replica keeps an event record.
        out: where writes and events go (the façade's outbox).
        deadlines: where the rescans are scheduled (the façade's heap).
    """

    __slots__ = ("_store", "done", "pending", "_retention_ms", "_out", "_deadlines",
                 "wall_offset_ms", "counters")  # fmt: skip

    def __init__(self, store: RecordStore, delivered: dict[bytes, int], retention_ms: int,
                 out: Outbox, deadlines: Deadlines) -> None:  # fmt: skip
        self._store = store
        self.done = dict(delivered)
        self.pending: set[bytes] = set()
        self._retention_ms = retention_ms
        self._out = out
        self._deadlines = deadlines
        self.wall_offset_ms = 0  # wall clock minus `now`, in ms (set by the façade)
        self.counters = DeliveryCounters()

    def start(self, now: float) -> None:
        """Begin: the first rescan (what arrived before a crash) is due soon."""
        self._deadlines.push(now + FIRST_RESCAN_S, self._due_rescan)

    def offer(self, rec: Record) -> None:
        """An event record arrived or was written here: hand it to the
        handlers unless it is delivered, pending, a tombstone, or the queue
        is full (then a rescan offers it again)."""
        key = rec.key
        if key in self.done or key in self.pending or rec.value is None:
            return
        if len(self.pending) >= QUEUE_MAX:
            self.counters.queue_full += 1
            return
        self.pending.add(key)
        self.counters.offered += 1
        self._out.event(UserEventReceived(rec))

    def full(self) -> bool:
        """Whether the handlers' queue is full (the sender should retry)."""
        return len(self.pending) >= QUEUE_MAX

    def delivered(self, key: bytes, wall_ms: int) -> None:
        """The handlers of pending event `key` finished (ran or failed)."""
        assert key in self.pending, "delivered an event that was not handed out"
        self.pending.discard(key)
        self.done[key] = wall_ms
        self.counters.delivered += 1
        self._out.persist(PersistDelivered(key, wall_ms))

    def released(self, key: bytes) -> None:
        """The driver gave event `key` back undelivered (it is stopping)."""
        self.pending.discard(key)

    def _due_rescan(self, _: object, now: float) -> None:
        self._deadlines.push(now + RESCAN_S, self._due_rescan)
        self.forget_older_than(int(now * 1000) + self.wall_offset_ms)
        self.counters.rescans += 1
        after = b""
        while True:
            batch = self._store.scan(EVENT_PREFIX, after, _SCAN_BATCH)
            for rec in batch:
                self.offer(rec)
            if len(batch) < _SCAN_BATCH:
                break
            after = batch[-1].key

    def forget_older_than(self, wall_ms: int) -> None:
        """Forget the ids delivered before `wall_ms` minus the retention."""
        old = wall_ms - self._retention_ms - _FORGET_MARGIN_MS
        stale = tuple(key for key, at in self.done.items() if at < old)
        if stale:
            for key in stale:
                del self.done[key]
            self.counters.forgotten += len(stale)
            self._out.persist(ForgetDelivered(stale))
