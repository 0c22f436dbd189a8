"""AntiEntropy: keeps this node's replica in step with the others'.

Theory of operation. Two mechanisms, as in Dynamo and Cassandra:

1. **Push on write** (fast path). A local write is sent at once in a
   `RecordPush` (one datagram when it fits the MTU, a stream otherwise) to
   every alive member while there are at most `push_all_max` (64), and in
   a larger cluster to `push_fanout` random ones, each of which passes a
   record that is news to it on once to `push_fanout` others (rumour
   spreading that stops where the news is old: at most N x `push_fanout`
   datagrams per write, over O(log N) hops, missing about e^-fanout of the
   members, whom anti-entropy repairs). Nothing is retried. Measured on 20
   agents (bench/watch.py), a put reached the watches of the 19 others at
   p50 1.7 s and p99 12 s when it went to 3 members only; 9 ms and 2.9 s
   with forwarding (3.4 % missed); see the issue-21 note for pushing to all.

2. **Anti-entropy** (repair). Every `sync_interval_s` (and within about a
   second of start, to catch up after a join or a restart) the node opens a
   session with one random alive member; while sessions find nothing to do
   and nothing is written, the interval doubles, up to 4x. A member that
   becomes alive again (`peer_returned`: back from suspect, dead or left, or
   at a new address) gets a session at once, whatever the interval: it
   missed what was written while it was away, and we missed its writes
   (Dynamo's hinted handoff solves the same problem with more state). The
   initiator walks the two Merkle trees (storage/merkle.py) top-down:

       I -> R  SyncTree(level 0: my root sum)
       R -> I  SyncTreeDiff(the nodes that differ, with R's counts)
       I -> R  SyncTree(level 1: my sums of the children of those nodes)
       ...     (one round per level, only below differing nodes)
       I -> R  SyncDigests(my (key, version) under the differing subtrees)
       R -> I  SyncRecords(R's newer records; the keys R wants)
       I -> R  SyncRecords(the wanted records)

   A differing node stops the descent and goes to the digest phase when it
   is a leaf or when both sides together hold at most
   `record_switch_count` records under it (then listing versions is
   cheaper than another round of 16 sums per node). Records move in both
   directions, so both replicas hold the newer of every version after one
   session. Bytes sent grow with the number of differences (times the tree
   depth), not with the size of the store.

This module is the façade: the core contract, writes and their pushes, the
periodic schedule and the tombstone sweeps. The two sides of a session are
split by role:

- `responder.py`: answers other nodes' sessions, keeping no session state
  (each request names everything needed to answer it, so a crashed or slow
  initiator costs the responder nothing);
- `initiator.py`: the one session this node runs, its queue, its
  timeouts, and the peers skipped for a while because they did not answer
  (membership already keeps suspect, dead and left members out of the
  peer sampler).

Versions are compared by `Replica` (last writer wins, HLC bounded skew,
tombstones collected after `tombstone_grace_s` by a periodic sweep).
Wall time is `now` (monotonic, from the driver) plus `wall_offset_ms`,
which the driver refreshes, so the core never reads a clock.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable
from typing import Any

from shoal.kernel.contract import Address, Channel, Output, Send
from shoal.kernel.deadlines import Deadlines
from shoal.kernel.errors import FenceRefused, WriteRefused
from shoal.kernel.outbox import Outbox
from shoal.storage.config import SyncConfig
from shoal.storage.initiator import Initiator, PeerSampler
from shoal.storage.messages import RecordPush, SyncDigests, SyncRecords, SyncTree, SyncTreeDiff
from shoal.storage.records import Record
from shoal.storage.responder import Responder
from shoal.storage.store import Replica
from shoal.storage.syncstate import SyncCounters

__all__ = ["AntiEntropy", "PeerSampler"]

_FIRST_SYNC_RETRY_S = 1.0
# A local write brings the next session this close (if it is further). A
# push is one unacknowledged datagram to a few members, and in the seconds
# after a partition begins, before membership suspects anyone, it goes to
# members on the other side as often as not; the session after the write
# carries it to whoever was missed and is reachable. The price: a node that
# writes all the time starts about one session a second, not one per
# sync_interval_s (a session is one round trip of ~40 bytes when the push
# got everywhere; memberlist pushes and pulls its whole member list).
_AFTER_WRITE_SYNC_S = 1.0
# A batch of local writes (`write_many`) is pushed in pushes of this many
# bytes (by `_push`'s bound; the record that crosses it included): a frame
# each peer decodes and merges in one pass of its loop (1 MiB is about
# 5,000 records of 100 bytes, some hundreds of ms in pure Python), far
# below the 64 MiB frame cap. A restore's batches are smaller (1,024).
PUSH_BATCH_BYTES = 1 << 20


class AntiEntropy:
    """The anti-entropy core for one node (see the module docstring)."""

    def __init__(
        self,
        replica: Replica,
        config: SyncConfig,
        rng: random.Random,
        peers: PeerSampler,
        wall_offset_ms: int = 0,
    ) -> None:
        """Create the core.

        Args:
            replica: this node's records.
            config: intervals and sizes.
            rng: the core's only randomness.
            peers: returns up to k random alive members' addresses.
            wall_offset_ms: wall-clock ms minus `now` in ms; see
                `set_wall_offset`.
        """
        assert replica.tree.depth == config.tree_depth
        self.replica = replica
        self.config = config
        self.rng = rng
        self.counters = SyncCounters()
        self.wall_offset_ms = wall_offset_ms
        self.clock_offset_ms = 0
        # The one periodic session pending: when, and its token (an earlier
        # one may be scheduled after a write; the later entry goes stale).
        self._next_sync_at = float("inf")
        self._sync_token = 0
        # Public for the composition, which reads it (and `out`) directly:
        # this core is interpreted (see setup.py), and its three one-line
        # contract methods cost 5 % of a 1,000-node simulation.
        self._deadlines = Deadlines()
        self.out = Outbox()
        self._send = self.out.sends
        self.initiator = Initiator(
            replica, config, rng, peers, self.counters, self._deadlines, self.out
        )
        self.responder = Responder(replica, self.counters, self._send, self.initiator.differs)
        self.handlers: dict[type, Callable[[Any, Address, float], None]] = {
            SyncTree: self.responder.on_sync_tree,
            SyncTreeDiff: self.initiator.on_sync_tree_diff,
            SyncDigests: self.responder.on_sync_digests,
            SyncRecords: self._on_sync_records,
            RecordPush: self._on_record_push,
        }

    # -- the core contract -------------------------------------------------------

    def start(self, now: float) -> None:
        """Begin the periodic sessions and tombstone sweeps."""
        self._schedule_sync(now + self.rng.uniform(0.1, _FIRST_SYNC_RETRY_S))
        self._deadlines.push(now + self.config.gc_interval_s, self._due_gc)

    def receive(self, message: Any, sender: Address, now: float) -> None:
        """Handle one decoded anti-entropy message."""
        self.handlers[type(message)](message, sender, now)

    def tick(self, now: float) -> None:
        """Do all work due at or before `now`."""
        self._deadlines.run_due(now)

    def next_deadline(self) -> float | None:
        """When `tick` should next be called."""
        return self._deadlines.next_at()

    def drain(self) -> Output:
        """Messages and events since the last drain."""
        return self.out.drain()

    def stream_failed(self, peer: Address, now: float) -> None:
        """A stream to `peer` failed: end the session with it, if any."""
        self.initiator.stream_failed(peer, now)

    def set_wall_offset(self, wall_offset_ms: int) -> None:
        """The driver's current wall clock minus `now`, in ms."""
        self.wall_offset_ms = wall_offset_ms

    def set_clock_offset(self, clock_offset_ms: int) -> None:
        """Our wall clock minus our peers' (membership's measure), in ms:
        records are judged against the cluster's clock (`Replica.merge`)."""
        self.clock_offset_ms = clock_offset_ms

    def wall_ms(self, now: float) -> int:
        """The wall clock at `now`."""
        return int(now * 1000) + self.wall_offset_ms

    # -- commands --------------------------------------------------------------

    def write(self, key: bytes, value: bytes | None, now: float,
              epoch: int = 0, owner: bytes = b"") -> Record:  # fmt: skip
        """Put (or, with None, delete) `key` here and push it to a few
        members (fenced by `epoch`, owned by `owner`: `Replica.write`).
        Durability is the driver's job (`RecordStore.sync`)."""
        rec = self.replica.write(key, value, self.wall_ms(now), epoch, owner)
        self._wrote((rec,), now)
        return rec

    def write_many(self, writes: Iterable[tuple[bytes, bytes | None, int]],
                   now: float) -> tuple[list[Record], int]:  # fmt: skip
        """Put or delete each (key, value, epoch) of `writes` as `write`
        would, one after the other at `now` (each stamped and checked by
        `Replica.write` as a write of its own, so it wins or loses against
        any other write exactly as one would), then push them together:
        in pushes of about `PUSH_BATCH_BYTES`, each a stream to the
        members one write would go to, those that did not answer a session
        lately included (a peer busy merging a batch for a second times a
        session out; a stream still reaches it). No session is brought
        forward: one now would trade records already on their way; the
        periodic ones repair a push whose stream failed. For a backup's
        restore (daemon/api/snapshot.py). Returns the records written and
        how many were refused."""
        wall_ms = self.wall_ms(now)
        write, written, refused = self.replica.write, [], 0
        for key, value, epoch in writes:
            try:
                written.append(write(key, value, wall_ms, epoch))
            except (WriteRefused, FenceRefused):
                refused += 1  # counted by the replica, as a write's refusal is
        start, size = 0, 0
        for i, rec in enumerate(written):
            size += len(rec.key) + len(rec.value or b"") + 96
            if size >= PUSH_BATCH_BYTES or i == len(written) - 1:
                self.initiator.differs()
                self.initiator.pushed = self._push(tuple(written[start : i + 1]), now, None,
                                                   skipping=False)  # fmt: skip
                start, size = i + 1, 0
        return written, refused

    def _wrote(self, records: tuple[Record, ...], now: float) -> None:
        """After a local write: the next session soon, and the push."""
        self.initiator.differs()
        if self._next_sync_at > now + _AFTER_WRITE_SYNC_S * 1.2:
            self._schedule_sync(now + _AFTER_WRITE_SYNC_S * self.rng.uniform(0.8, 1.2))
        self.initiator.pushed = self._push(records, now, None)  # the next session prefers others

    def _push(self, records: tuple[Record, ...], now: float, exclude: Address | None,
              skipping: bool = True) -> list[Address]:  # fmt: skip
        """Send `records` to every alive member when there are at most
        `push_all_max`, else to `push_fanout` random ones; a forward (from
        `exclude`, the member they came from) only in a larger cluster.
        With `skipping`, not to members that did not answer a session of
        ours lately. Returns the members sent to."""
        k, everyone = self.config.push_fanout, self.config.push_all_max
        peers = self.initiator.pick(max(k, everyone) + 1, now, skipping)
        if exclude is not None:
            if len(peers) <= everyone:
                return []  # the writer pushed to every member: nothing to forward
            peers = [a for a in peers if a != exclude]
        if not peers:
            return []  # alone: no message to build (a write of a one-node cluster)
        push = RecordPush(records)
        # key + value + 16-byte writer + epoch + owner + ~20 bytes of CBOR
        # heads and header: a bound, not an exact size, so a push near the
        # MTU goes by stream.
        size = sum(len(r.key) + len(r.value or b"") + 96 for r in records)
        channel = Channel.PACKET if size <= self.config.mtu_bytes else Channel.STREAM
        pushed = peers if len(peers) <= everyone else peers[:k]
        for addr in pushed:
            self._send.append(Send(addr, (push,), channel))
            self.counters.pushes_sent += 1
        return pushed

    def peer_returned(self, peer: Address, now: float) -> None:
        """Member `peer` became alive again (after suspect, dead or left, or
        at a new address or incarnation): sync with it at once, or as soon
        as the running session ends."""
        self.initiator.peer_returned(peer, now)

    def sync_with(self, peer: Address, now: float) -> bool:
        """Start a session with `peer` now; False if one is running."""
        return self.initiator.sync_with(peer, now)

    # -- timers --------------------------------------------------------------------

    def _schedule_sync(self, at: float) -> None:
        self._sync_token += 1
        self._next_sync_at = at
        self._deadlines.push(at, self._due_sync, self._sync_token)

    def _due_sync(self, token: int, now: float) -> None:
        if token != self._sync_token:
            return  # superseded by an earlier one (after a write)
        if self.initiator.idle:
            self.initiator.sync_with_any(now)
        # A session between equal replicas is one round trip, but in a quiet
        # cluster of 20 it was 0.22 of each agent's 0.25 streams/s. Writes
        # are pushed at once, and anything that tells us replicas differ (a
        # write, a push, a session that moved records or found a difference
        # when asked) brings the interval back to sync_interval_s; so the
        # repair of a lost push waits at most 4x longer, and only in a store
        # nobody writes to.
        initiator = self.initiator
        if initiator.synced_once:
            delay = self.config.sync_interval_s * initiator.quiet
        else:
            delay = _FIRST_SYNC_RETRY_S
        self._schedule_sync(now + delay * self.rng.uniform(0.8, 1.2))

    def _due_gc(self, _: None, now: float) -> None:
        self.replica.collect_tombstones(self.wall_ms(now))
        self.replica.collect_events(self.wall_ms(now))
        self.replica.collect_gone(self.wall_ms(now))
        self._deadlines.push(now + self.config.gc_interval_s, self._due_gc)

    # -- pushes and records from peers --------------------------------------------

    def _on_record_push(self, msg: RecordPush, sender: Address, now: float) -> None:
        self.counters.pushes_received += 1
        self.initiator.differs()
        applied = self.replica.merge(msg.records, self.wall_ms(now), self.clock_offset_ms)
        if applied and self.config.forward_pushes:
            # News to us: pass it on once (a record we held already is not
            # forwarded, so each write costs at most N x push_fanout datagrams).
            self._push(tuple(applied), now, sender)
            self.counters.pushes_forwarded += 1

    def _on_sync_records(self, msg: SyncRecords, sender: Address, now: float) -> None:
        applied = self.replica.merge(msg.records, self.wall_ms(now), self.clock_offset_ms)
        self.counters.records_received += len(msg.records)
        self.initiator.on_sync_records(msg, sender, applied, now)
