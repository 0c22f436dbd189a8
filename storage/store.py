"""Where replicated records live, and the rules for changing them.

`RecordStore` is the storage contract: `RocksStore` (storage/engine.py)
keeps records in RocksDB for the agent, `MemoryStore` keeps them in dicts
for the simulator and unit tests. Both pass the same contract tests
(tests/unit/storage/test_store_contract.py).

`Replica` is the one place where records change (as `MemberTable` is for
membership): a local write stamps a fresh HLC version, a remote record is
merged only if its version is newer, a tombstone older than the grace period
is collected; each change goes to the store and the Merkle tree together, so
the tree always sums exactly what the store holds. It is pure: the wall
clock comes in as `wall_ms`.

Fences and ephemeral keys (issue 21). A write may carry the controller
epoch it was made under; it is refused if the key holds a version under a
higher epoch (or any epoch, for an unfenced write), and versions order by
epoch first (storage/records.py). An ephemeral record names its owner
member: once this replica hears that the owner failed or left
(`owner_gone`), the owner's records written before that moment are hidden
from reads (`visible`), and stay hidden after it returns; a tombstone
written by the controller (or by the owner itself at its next start or
leave) then deletes them for good on every replica.

The agent reads what changed through `changes` (None in the simulator:
nothing is collected there), to number it for its watch streams.
"""

from __future__ import annotations

import heapq
from collections import OrderedDict
from collections.abc import Iterable, Iterator
from typing import Protocol

from shoal.kernel.counters import Counters
from shoal.kernel.errors import WriteRefused
from shoal.storage import fences
from shoal.storage import hlc as hlc_mod
from shoal.storage.hlc import HybridClock
from shoal.storage.merkle import MerkleTree, leaf_of
from shoal.storage.records import Record, digest, digest_of, encode_value

# Keys remembered with a version refused as too far ahead (`Replica._ahead`);
# beyond this the least recently refused is forgotten.
MAX_AHEAD_KEYS = 10_000
# User events (issue 29) are records under this prefix, one key per event
# (origin id / sequence), never rewritten: the store's push and anti-entropy
# carry them to every member, including one that was away. They are dropped
# everywhere `event_retention_ms` after they were stamped (no tombstone:
# every replica drops them at the same age, and refuses them older than
# that, so none brings one back). The key-value API refuses keys starting
# with a zero byte.
EVENT_PREFIX = b"\x00e/"
RecordChange = tuple[Record, bool, str]
"""A record, whether the key's previous version was visible, and why it
changed (the watch streams' `reason`: one of the names below)."""

# Why a record changed, in `Replica.changes` (the watch streams' `reason`).
WRITE, SYNC, OWNER_FAILED, OWNER_LEFT = "write", "sync", "owner-failed", "owner-left"
OWNER_SESSION_ENDED = "session-ended"  # the owner is a session of the metadata log


class RecordStore(Protocol):
    """Records by key, with an index by Merkle leaf."""

    depth: int

    def get(self, key: bytes) -> Record | None:
        """The record of `key`, or None."""

    def apply(self, puts: list[Record], deletes: list[bytes]) -> None:
        """Write and delete atomically; visible at once, durable after `sync`."""

    def stage(self, rec: Record, leaf: int, stored: bytes) -> None:
        """Write a local record: visible at once, durable after `sync`,
        which writes it (RocksStore: batched with the others of its group).
        `leaf` and `stored` are its Merkle leaf and `encode_value(rec)`,
        which the replica computed for its tree (each once per write)."""

    def scan(self, prefix: bytes, after: bytes, limit: int) -> list[Record]:
        """Up to `limit` records whose key starts with `prefix` and sorts
        after `after`, in key order (tombstones included)."""

    def in_leaves(self, first: int, end: int) -> Iterator[Record]:
        """All records whose leaf is in [first, end), by leaf then key."""

    def all(self) -> Iterator[Record]:
        """Every record (for rebuilding the tree at start)."""

    def sync(self) -> None:
        """Make every write so far durable (fsync of the log)."""


class MemoryStore:
    """`RecordStore` in dicts: the simulator's disk and the unit tests'."""

    def __init__(self, depth: int) -> None:
        """An empty store indexed for a tree of `depth`."""
        self.depth = depth
        self._records: dict[bytes, Record] = {}
        self._by_leaf: dict[int, dict[bytes, None]] = {}

    def __len__(self) -> int:
        return len(self._records)

    def get(self, key: bytes) -> Record | None:
        """The record of `key`, or None."""
        return self._records.get(key)

    def apply(self, puts: list[Record], deletes: list[bytes]) -> None:
        """Write and delete (a dict is always 'durable' in the simulator)."""
        for rec in puts:
            self._records[rec.key] = rec
            self._by_leaf.setdefault(leaf_of(rec.key, self.depth), {})[rec.key] = None
        for key in deletes:
            if self._records.pop(key, None) is not None:
                leaf = leaf_of(key, self.depth)
                keys = self._by_leaf[leaf]
                del keys[key]
                if not keys:
                    del self._by_leaf[leaf]

    def stage(self, rec: Record, leaf: int, stored: bytes) -> None:
        """Write `rec` (as `apply`)."""
        self._records[rec.key] = rec
        self._by_leaf.setdefault(leaf, {})[rec.key] = None

    def scan(self, prefix: bytes, after: bytes, limit: int) -> list[Record]:
        """Records with `prefix` after `after`, in key order."""
        keys = sorted(k for k in self._records if k.startswith(prefix) and k > after)
        return [self._records[k] for k in keys[:limit]]

    def in_leaves(self, first: int, end: int) -> Iterator[Record]:
        """Records in leaves [first, end), by leaf then key."""
        if end - first <= len(self._by_leaf):
            leaves: Iterable[int] = [x for x in range(first, end) if x in self._by_leaf]
        else:
            leaves = sorted(x for x in self._by_leaf if first <= x < end)
        for leaf in leaves:
            for key in sorted(self._by_leaf.get(leaf, ())):
                yield self._records[key]

    def all(self) -> Iterator[Record]:
        """Every record, in insertion order."""
        return iter(list(self._records.values()))

    def sync(self) -> None:
        """Nothing to do."""


class ReplicaCounters(Counters):
    """What happened to records, for metrics."""

    local_writes: int = 0
    merged: int = 0
    stale: int = 0
    skew_refused: int = 0
    writes_refused_ahead: int = 0
    writes_refused_offset: int = 0
    expired_tombstones_refused: int = 0
    tombstones_collected: int = 0
    fence_refused: int = 0
    ephemeral_hidden: int = 0
    events_collected: int = 0
    expired_events_refused: int = 0
    owners_forgotten: int = 0  # owners gone longer than the tombstone grace (collect_gone)


class Replica:
    """One node's copy of the replicated records (module docstring)."""

    def __init__(
        self,
        store: RecordStore,
        node_id: bytes,
        max_skew_ms: int,
        tombstone_grace_ms: int,
        event_retention_ms: int = 3_600_000,
    ) -> None:
        """Load the tree and the clock from what `store` holds.

        Args:
            store: the records, from a previous run or empty.
            node_id: this node's id, the writer of its local records.
            max_skew_ms: the HLC's bound on remote clocks running ahead.
            tombstone_grace_ms: how long a delete is kept (and so can still
                win against an older write arriving late) before it is
                collected.
            event_retention_ms: how long a user event is kept (EVENT_PREFIX).
        """
        self.store = store
        self.event_retention_ms = event_retention_ms
        self._events: list[tuple[int, bytes]] = []  # heap of (hlc, key) of user events
        self.node_id = node_id
        self.tree = MerkleTree(store.depth)
        self.clock = HybridClock(max_skew_ms)
        self.tombstone_grace_ms = tombstone_grace_ms
        self.counters = ReplicaCounters()
        self._tombstones: list[tuple[int, bytes]] = []  # heap of (hlc, key)
        # Keys of which a version was refused as too far ahead of our clock:
        # key -> the highest such stamp. A local write to one of them could
        # not win over that version when it is accepted later (see `write`).
        self._ahead: OrderedDict[bytes, int] = OrderedDict()
        # Ephemeral records: owner id -> the keys it owns (live values only);
        # owner id -> wall ms when it was last heard failed or left; and the
        # owners failed or left now.
        self._owned: dict[bytes, set[bytes]] = {}
        self._gone_at: dict[bytes, int] = {}
        self._gone_heap: list[tuple[int, bytes]] = []  # (gone at, owner): collect_gone's
        self.gone_now: set[bytes] = set()
        # (record, whether the key's previous version was visible, why):
        # collected only when the driver sets a list here.
        self.changes: list[RecordChange] | None = None
        tree, newest = self.tree, 0
        for rec in store.all():
            tree.add(tree.leaf_of(rec.key), digest(rec))
            newest = max(newest, rec.hlc)
            if rec.value is None:
                self._tombstones.append((rec.hlc, rec.key))
            elif rec.owner:
                self._owned.setdefault(rec.owner, set()).add(rec.key)
            if rec.key.startswith(EVENT_PREFIX):
                self._events.append((rec.hlc, rec.key))
        heapq.heapify(self._tombstones)
        heapq.heapify(self._events)
        self.clock.last = newest

    def get(self, key: bytes) -> Record | None:
        """The current record of `key` (a tombstone if deleted)."""
        return self.store.get(key)

    def records_in(self, ranges: Iterable[tuple[int, int]]) -> Iterator[Record]:
        """The records under the given (level, index) nodes of the Merkle tree."""
        tree, store = self.tree, self.store
        for level, index in ranges:
            first, end = tree.leaf_range(level, index)
            yield from store.in_leaves(first, end)

    def visible(self, rec: Record) -> bool:
        """Whether readers see `rec`: False for an ephemeral record whose
        owner is failed or left now, or was after `rec` was written."""
        owner = rec.owner
        if not owner or owner not in self._gone_at:
            return True
        return owner not in self.gone_now and hlc_mod.physical_ms(rec.hlc) > self._gone_at[owner]

    def owned_by(self, owner: bytes) -> list[Record]:
        """The ephemeral records (values, not tombstones) of `owner`."""
        get = self.store.get
        return [rec for key in sorted(self._owned.get(owner, ())) if (rec := get(key))]

    def owner_gone(self, owner: bytes, wall_ms: int, reason: str) -> list[Record]:
        """Member `owner` was declared failed (or left) at `wall_ms`: hide
        its ephemeral records. Returns those that were visible until now."""
        hidden = [rec for rec in self.owned_by(owner) if self.visible(rec)]
        at = max(wall_ms, self._gone_at.get(owner, 0))
        if self._gone_at.get(owner) != at:
            self._gone_at[owner] = at
            heapq.heappush(self._gone_heap, (at, owner))
        self.gone_now.add(owner)
        self.counters.ephemeral_hidden += len(hidden)
        if self.changes is not None:
            self.changes.extend((rec, True, reason) for rec in hidden)
        return hidden

    def owner_back(self, owner: bytes) -> None:
        """Member `owner` is alive again: what it writes from now on is
        seen; what it wrote before it was declared gone stays hidden."""
        self.gone_now.discard(owner)

    def write(self, key: bytes, value: bytes | None, wall_ms: int,
              epoch: int = 0, owner: bytes = b"") -> Record:  # fmt: skip
        """A local put (or delete, with None): a fresh version that wins
        over everything this node has seen, refused versions included.
        `epoch` fences it (the controller epoch it is made under); `owner`
        makes it ephemeral (a member's node id).

        Raises:
            WriteRefused: a version of `key` was refused as stamped too far
                ahead of our clock, and our clock has not passed that stamp
                yet: a write now would be stamped below it and lose to it
                when it is accepted, after we acknowledged (issue 28).
            FenceRefused: `key` holds a version fenced under an epoch above
                `epoch` (any epoch, for an unfenced write): this write would
                lose to it everywhere.
        """
        old = self.store.get(key)
        if old is not None and old.epoch > epoch:
            fences.check(self.counters, epoch, None, old.epoch)  # raises
        ahead = self._ahead.get(key)
        if ahead is not None:
            if hlc_mod.physical_ms(ahead) < wall_ms:
                del self._ahead[key]  # our clock passed it: a write now wins
            else:
                self.counters.writes_refused_ahead += 1
                wait_s = (hlc_mod.physical_ms(ahead) - wall_ms) / 1000
                raise WriteRefused(
                    f"a version of this key stamped {wait_s:.1f} s ahead of this agent's clock "
                    "was refused here (its writer's clock is fast, or ours slow); a write "
                    f"now would lose to it later: retry in {wait_s:.0f} s or fix the clocks"
                )
        rec = Record(key, value, self.clock.now(wall_ms), self.node_id, epoch, owner)
        if self.changes is not None:
            self.changes.append((rec, old is not None and self.visible(old), WRITE))
        # The leaf (a hash of the key) and the stored bytes, once for the
        # tree and the store: 5 % of an API write's instructions (issue 25).
        leaf = self.tree.leaf_of(key)
        stored = encode_value(rec)
        self._replace(old, rec, leaf, digest_of(key, stored))
        self.store.stage(rec, leaf, stored)
        self.counters.local_writes += 1
        return rec

    def merge(self, records: Iterable[Record], wall_ms: int,
              clock_offset_ms: int = 0) -> list[Record]:  # fmt: skip
        """Take in records from a peer; returns the ones that were newer.

        A record more than `max_skew_ms` ahead of the *cluster's* clock is
        refused: our wall clock less our measured offset from our peers
        (`clock_offset_ms`), so a node whose own clock is slow still takes
        its peers' fresh writes instead of refusing them all."""
        applied: dict[bytes, Record] = {}
        cutoff = hlc_mod.pack(max(0, wall_ms - self.tombstone_grace_ms))
        ahead = self._ahead
        for rec in records:
            if not self.clock.observe(rec.hlc, wall_ms - clock_offset_ms):
                self.counters.skew_refused += 1
                if rec.hlc > ahead.get(rec.key, 0):
                    ahead[rec.key] = rec.hlc
                    if len(ahead) > MAX_AHEAD_KEYS:
                        ahead.popitem(last=False)
                continue
            if ahead and rec.key in ahead and rec.hlc >= ahead[rec.key]:
                del ahead[rec.key]  # accepted now: a later write is stamped above it
            if rec.value is None and rec.hlc < cutoff:
                self.counters.expired_tombstones_refused += 1
                continue
            if rec.key.startswith(EVENT_PREFIX) and hlc_mod.physical_ms(rec.hlc) < \
                    wall_ms - self.event_retention_ms:  # fmt: skip
                self.counters.expired_events_refused += 1
                continue
            old = applied.get(rec.key) or self.store.get(rec.key)
            if not rec.newer_than(old):
                self.counters.stale += 1
                continue
            if self.changes is not None:
                self.changes.append((rec, old is not None and self.visible(old), SYNC))
            self._replace(old, rec, self.tree.leaf_of(rec.key), digest(rec))
            applied[rec.key] = rec
        if applied:
            self.store.apply(list(applied.values()), [])
            self.counters.merged += len(applied)
        return list(applied.values())

    def collect_tombstones(self, wall_ms: int) -> int:
        """Drop tombstones older than the grace period; returns how many."""
        cutoff = hlc_mod.pack(max(0, wall_ms - self.tombstone_grace_ms))
        heap, dropped = self._tombstones, []
        while heap and heap[0][0] < cutoff:
            stamp, key = heapq.heappop(heap)
            rec = self.store.get(key)
            if rec is not None and rec.value is None and rec.hlc == stamp:
                self.tree.remove(self.tree.leaf_of(key), digest(rec))
                dropped.append(key)
        if dropped:
            self.store.apply([], dropped)
            self.counters.tombstones_collected += len(dropped)
        return len(dropped)

    def collect_gone(self, wall_ms: int) -> int:
        """Forget the owners gone longer ago than the tombstone grace that
        are not gone now and own no record here; returns how many.

        An owner's gone-at time hides what it wrote before, wherever that
        comes from: its records still here, and a copy arriving late from a
        peer that has not yet taken their deletion. The grace bounds that
        lateness for the whole store: a delete is kept that long so that it
        wins over an older write arriving late, and not longer (a write
        older than that would come back over any delete). So once the grace
        has passed since its end, with nothing of it held here, a session
        (or a member back alive) has no record left to hide that a delete
        would not: the entry is forgotten. Each was ~100 bytes kept until the
        agent restarted, one per session ever ended (node/composition.py
        stops sweeping an ended session after a minute, `owner_back`)."""
        cutoff = wall_ms - self.tombstone_grace_ms
        heap, gone_at, kept, forgotten = self._gone_heap, self._gone_at, [], 0
        while heap and heap[0][0] < cutoff:
            at, owner = heapq.heappop(heap)
            if gone_at.get(owner) != at:
                continue  # forgotten, or gone again since: its newer entry decides
            if owner in self.gone_now or owner in self._owned:
                kept.append((at, owner))  # hidden still: looked at again next time
                continue
            del gone_at[owner]
            forgotten += 1
        for item in kept:
            heapq.heappush(heap, item)
        self.counters.owners_forgotten += forgotten
        return forgotten

    @property
    def gone_owners(self) -> int:
        """How many owners' gone-at times are kept (`collect_gone`)."""
        return len(self._gone_at)

    def collect_events(self, wall_ms: int) -> int:
        """Drop user events older than the retention; returns how many."""
        cutoff = hlc_mod.pack(max(0, wall_ms - self.event_retention_ms))
        heap, dropped = self._events, []
        while heap and heap[0][0] < cutoff:
            stamp, key = heapq.heappop(heap)
            rec = self.store.get(key)
            if rec is not None and rec.hlc == stamp:
                self.tree.remove(self.tree.leaf_of(key), digest(rec))
                dropped.append(key)
        if dropped:
            self.store.apply([], dropped)
            self.counters.events_collected += len(dropped)
        return len(dropped)

    def _replace(self, old: Record | None, new: Record, leaf: int, new_digest: int) -> None:
        tree = self.tree
        if old is None:
            tree.add(leaf, new_digest)
        else:
            tree.replace(leaf, digest(old), new_digest)
            if old.owner and old.value is not None:
                keys = self._owned.get(old.owner)
                if keys is not None:
                    keys.discard(old.key)
                    if not keys:
                        del self._owned[old.owner]
        if new.owner and new.value is not None:
            self._owned.setdefault(new.owner, set()).add(new.key)
        if new.key.startswith(EVENT_PREFIX):
            heapq.heappush(self._events, (new.hlc, new.key))
        if new.value is None:
            heapq.heappush(self._tombstones, (new.hlc, new.key))
