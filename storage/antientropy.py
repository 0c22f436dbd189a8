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

The responder keeps no session state: each request names everything needed
to answer it, so a crashed or slow initiator costs the responder nothing.
The initiator runs one session at a time, and other sessions due meanwhile
(a returned member, the rest of a large catch-up) wait in a short queue. A
session ends on completion, on a stream failure, at `session_timeout_s`, or
when its first answer has not come within `_FIRST_ANSWER_TIMEOUT_S`: a
member cut off by a partition (still alive in the view until it is
suspected) cannot hold the one session slot for the stream timeout. A peer
that did not answer is skipped by sessions and pushes for
`_UNANSWERED_SKIP_S`, or until it returns; membership already keeps
suspect, dead and left members out of the peer sampler.

Versions are compared by `Replica` (last writer wins, HLC bounded skew,
tombstones collected after `tombstone_grace_s` by a periodic sweep).
Wall time is `now` (monotonic, from the driver) plus `wall_offset_ms`,
which the driver refreshes, so the core never reads a clock.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from shoal.kernel.contract import Address, Channel, Output, Send
from shoal.kernel.deadlines import Deadlines
from shoal.kernel.outbox import Outbox
from shoal.storage.config import SESSION_BUDGET_BYTES, SyncConfig
from shoal.storage.merkle import FANOUT
from shoal.storage.messages import RecordPush, SyncDigests, SyncRecords, SyncTree, SyncTreeDiff
from shoal.storage.records import Record
from shoal.storage.store import Replica
from shoal.storage.syncstate import Session, SyncCompleted, SyncCounters

PeerSampler = Callable[[random.Random, int], list[Address]]
_FIRST_SYNC_RETRY_S = 1.0
# The first answer of a session is the root comparison: a few dozen bytes
# the responder computes without reading its store. On a LAN it takes
# well under 10 ms, or just over 1 s when the first SYN was lost (RFC 6298's
# initial RTO). Until membership suspects a member cut off by a partition
# (at 6 members, round-robin probing reaches each one every ~5 s), sessions
# may pick several of them in a row, and each costs this long. Giving up on
# a peer that lost a SYN is cheap (another one is tried at once).
# Later rounds may scan a large store, so they get all of session_timeout_s.
_FIRST_ANSWER_TIMEOUT_S = 1.0
# A peer that did not answer is left out of sessions and pushes this long
# (or until membership sees it come back): two sync intervals, long enough
# for membership to suspect it if it is really gone.
_UNANSWERED_SKIP_S = 10.0
# A local write brings the next session this close (if it is further). A
# push is one unacknowledged datagram to a few members, and in the seconds
# after a partition begins, before membership suspects anyone, it goes to
# members on the other side as often as not; the session after the write
# carries it to whoever was missed and is reachable. The price: a node that
# writes all the time starts about one session a second, not one per
# sync_interval_s (a session is one round trip of ~40 bytes when the push
# got everywhere; memberlist pushes and pulls its whole member list).
_AFTER_WRITE_SYNC_S = 1.0
# Sessions waiting for the slot. A heal returns the whole other side at
# once; a few sessions with it reach every record it holds (its members
# are in step with each other), and periodic sessions do the rest.
_QUEUE_MAX = 8
# While sessions find the replicas equal and nothing is written, the
# interval doubles, up to this factor; any write, push or difference brings
# it back (see _due_sync).
_QUIET_BACKOFF_MAX = 4


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
        self._peers = peers
        self._session: Session | None = None
        self._session_ids = itertools.count(rng.getrandbits(32))
        self._synced_once = False
        self._quiet = 1  # the interval's factor: doubles while all is equal
        # The one periodic session pending: when, and its token (an earlier
        # one may be scheduled after a write; the later entry goes stale).
        self._next_sync_at = float("inf")
        self._sync_token = 0
        # Peers to sync with as soon as the slot is free, in order.
        self._queue: list[Address] = []
        # The members the last write was pushed to (see _sync_with_any).
        self._pushed: list[Address] = []
        # Peers that did not answer -> when they may be picked again.
        self._unanswered: dict[Address, float] = {}
        # Public for the composition, which reads it (and `out`) directly:
        # this core is interpreted (see setup.py), and its three one-line
        # contract methods cost 5 % of a 1,000-node simulation.
        self._deadlines = Deadlines()
        self.out = Outbox()
        self._send = self.out.sends
        self._events = self.out.events
        self.handlers: dict[type, Callable[[Any, Address, float], None]] = {
            SyncTree: self._on_sync_tree,
            SyncTreeDiff: self._on_sync_tree_diff,
            SyncDigests: self._on_sync_digests,
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
        s = self._session
        if s is not None and s.peer == peer:
            if s.answered:
                self._end_session(ok=False, now=now)
            else:
                self._end_unanswered(now)

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
        self._quiet = 1
        if self._next_sync_at > now + _AFTER_WRITE_SYNC_S * 1.2:
            self._schedule_sync(now + _AFTER_WRITE_SYNC_S * self.rng.uniform(0.8, 1.2))
        self._pushed = self._push((rec,), now, None)  # the next session prefers others
        return rec

    def _push(self, records: tuple[Record, ...], now: float, exclude: Address | None,
              ) -> list[Address]:  # fmt: skip
        """Send `records` to every alive member when there are at most
        `push_all_max`, else to `push_fanout` random ones; a forward (from
        `exclude`, the member they came from) only in a larger cluster.
        Returns the members sent to."""
        k, everyone = self.config.push_fanout, self.config.push_all_max
        peers = self._pick(max(k, everyone) + 1, now)
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
        self._unanswered.pop(peer, None)
        self._quiet = 1  # what it missed may be anywhere
        running = self._session
        if (running is not None and running.peer == peer) or peer in self._queue:
            return
        if len(self._queue) >= _QUEUE_MAX:
            return
        self._queue.append(peer)
        self.counters.sessions_on_return += 1
        if running is None:
            self._due_queue(None, now)

    def sync_with(self, peer: Address, now: float) -> bool:
        """Start a session with `peer` now; False if one is running."""
        if self._session is not None:
            return False
        first_answer_by = now + min(_FIRST_ANSWER_TIMEOUT_S, self.config.session_timeout_s)
        session = Session(next(self._session_ids), peer, now, first_answer_by)
        self._session = session
        self.counters.sessions_started += 1
        self._deadlines.push(session.deadline_at, self._due_session_timeout)
        tree = self.replica.tree
        root_sum, count = tree.node(0, 0)
        sums = ((0, root_sum),) if count else ()
        self._request(session, SyncTree(session.id, tree.depth, 0, (), sums))
        return True

    # -- timers --------------------------------------------------------------------

    def _schedule_sync(self, at: float) -> None:
        self._sync_token += 1
        self._next_sync_at = at
        self._deadlines.push(at, self._due_sync, self._sync_token)

    def _due_sync(self, token: int, now: float) -> None:
        if token != self._sync_token:
            return  # superseded by an earlier one (after a write)
        if self._session is None and not self._queue:
            self._sync_with_any(now)
        # A session between equal replicas is one round trip, but in a quiet
        # cluster of 20 it was 0.22 of each agent's 0.25 streams/s. Writes
        # are pushed at once, and anything that tells us replicas differ (a
        # write, a push, a session that moved records or found a difference
        # when asked) brings the interval back to sync_interval_s; so the
        # repair of a lost push waits at most 4x longer, and only in a store
        # nobody writes to.
        delay = self.config.sync_interval_s * self._quiet if self._synced_once \
            else _FIRST_SYNC_RETRY_S
        self._schedule_sync(now + delay * self.rng.uniform(0.8, 1.2))

    def _due_queue(self, _: None, now: float) -> None:
        if self._session is None and self._queue:
            self.sync_with(self._queue.pop(0), now)

    def _due_retry(self, _: None, now: float) -> None:
        """After a session nobody answered: another peer, at once."""
        if self._session is None and not self._queue:
            self._sync_with_any(now)

    def _due_session_timeout(self, _: None, now: float) -> None:
        s = self._session
        if s is not None and s.deadline_at <= now:
            if s.answered:
                self._end_session(ok=False, now=now)
            else:
                self._end_unanswered(now)

    def _due_gc(self, _: None, now: float) -> None:
        self.replica.collect_tombstones(self.wall_ms(now))
        self.replica.collect_events(self.wall_ms(now))
        self._deadlines.push(now + self.config.gc_interval_s, self._due_gc)

    # -- responder ---------------------------------------------------------------

    def _on_sync_tree(self, msg: SyncTree, sender: Address, now: float) -> None:
        tree = self.replica.tree
        if msg.depth != tree.depth:
            self.counters.depth_mismatch += 1
            return
        if (
            msg.level > tree.depth
            or (msg.level == 0) != (not msg.parents)
            or any(p >= FANOUT ** (msg.level - 1) for p in msg.parents)
        ):
            self.counters.unexpected += 1
            return
        if msg.level == 0:
            mine = {0: tree.node(0, 0)} if tree.count else {}
        else:
            mine = {i: (s, c) for p in msg.parents for i, s, c in tree.children(msg.level - 1, p)}
        theirs = dict(msg.sums)
        differing = []
        for index in sorted(mine.keys() | theirs.keys()):
            my_sum, my_count = mine.get(index, (0, 0))
            if index not in mine or index not in theirs or my_sum != theirs[index]:
                differing.append((index, my_count))
        if msg.level == 0:
            self.counters.sessions_served += 1
            if differing:
                self._quiet = 1
        self._reply(sender, SyncTreeDiff(msg.session, msg.level, tuple(differing)))

    def _on_sync_digests(self, msg: SyncDigests, sender: Address, now: float) -> None:
        tree = self.replica.tree
        if any(level > tree.depth or index >= FANOUT**level for level, index in msg.ranges):
            self.counters.unexpected += 1
            return
        theirs = {key: (epoch, stamp, writer) for key, stamp, writer, epoch in msg.versions}
        newer: list[Record] = []
        budget, more = SESSION_BUDGET_BYTES, False
        for rec in self._records_in(msg.ranges):
            other = theirs.pop(rec.key, None)
            if other is None or rec.version > other:
                budget -= _size(rec)
                if budget < 0:
                    more = True  # the rest goes in the next session
                    continue
                newer.append(rec)
            elif rec.version < other:
                theirs[rec.key] = other  # keep: we want theirs
        self.counters.records_sent += len(newer)
        self._reply(sender, SyncRecords(msg.session, tuple(newer), tuple(theirs), more))

    def _on_record_push(self, msg: RecordPush, sender: Address, now: float) -> None:
        self.counters.pushes_received += 1
        self._quiet = 1
        applied = self.replica.merge(msg.records, self.wall_ms(now), self.clock_offset_ms)
        if applied and self.config.forward_pushes:
            # News to us: pass it on once (a record we held already is not
            # forwarded, so each write costs at most N x push_fanout datagrams).
            self._push(tuple(applied), now, sender)
            self.counters.pushes_forwarded += 1

    # -- initiator ------------------------------------------------------------------

    def _on_sync_tree_diff(self, msg: SyncTreeDiff, sender: Address, now: float) -> None:
        session = self._current(msg.session, sender)
        if session is None or session.digesting:
            return
        tree = self.replica.tree
        session.rounds += 1
        if not msg.differing:
            self.counters.sessions_in_sync += 1
            self._end_session(ok=True, now=now)
            return
        descend = []
        switch = self.config.record_switch_count
        for index, their_count in msg.differing:
            mine = tree.node(msg.level, index)[1]
            if msg.level >= tree.depth or mine == 0 or mine + their_count <= switch:
                session.pending.append((msg.level, index, their_count))
            else:
                descend.append(index)
        if descend:
            level = msg.level + 1
            sums = tuple((i, s) for p in descend for i, s, _ in tree.children(msg.level, p))
            self._request(session, SyncTree(session.id, tree.depth, level, tuple(descend), sums))
            return
        self._start_digests(session, now)

    def _start_digests(self, session: Session, now: float) -> None:
        """Push whole subtrees the peer has nothing under; ask about the rest."""
        session.digesting = True
        empty = [(lv, i) for lv, i, count in session.pending if count == 0]
        asked = tuple((lv, i) for lv, i, count in session.pending if count > 0)
        if empty:
            session.sent += self._push_records(session, self._records_in(empty))
        if not asked:
            self._end_session(ok=True, now=now)
            return
        versions = tuple((r.key, r.hlc, r.writer, r.epoch) for r in self._records_in(asked))
        self._request(session, SyncDigests(session.id, asked, versions))

    def _on_sync_records(self, msg: SyncRecords, sender: Address, now: float) -> None:
        applied = self.replica.merge(msg.records, self.wall_ms(now), self.clock_offset_ms)
        self.counters.records_received += len(msg.records)
        session = self._session
        if session is None or session.id != msg.session or session.peer != sender:
            return  # an initiator's push: records only
        if not session.digesting:
            self.counters.unexpected += 1
            return
        self._answered(session)
        session.received += len(applied)
        session.more = session.more or msg.more
        wanted = [rec for key in msg.wants if (rec := self.replica.get(key)) is not None]
        session.sent += self._push_records(session, wanted)
        self._end_session(ok=True, now=now)

    def _push_records(self, session: Session, records: Iterable[Record]) -> int:
        """Send `records` to the session's peer, in frames of a quarter of
        the byte budget, up to the budget; returns how many went out."""
        chunk: list[Record] = []
        chunk_bytes = total_bytes = sent = 0
        for rec in records:
            size = _size(rec)
            if total_bytes + size > SESSION_BUDGET_BYTES and sent:
                session.more = True  # the rest goes in the next session
                break
            if chunk and chunk_bytes + size > SESSION_BUDGET_BYTES // 4:
                self._request(session, SyncRecords(session.id, tuple(chunk), ()))
                chunk, chunk_bytes = [], 0
            chunk.append(rec)
            chunk_bytes += size
            total_bytes += size
            sent += 1
        if chunk:
            self._request(session, SyncRecords(session.id, tuple(chunk), ()))
        self.counters.records_sent += sent
        return sent

    # -- helpers ---------------------------------------------------------------------

    def _records_in(self, ranges: Sequence[tuple[int, int]]) -> Iterator[Record]:
        tree, store = self.replica.tree, self.replica.store
        for level, index in ranges:
            first, end = tree.leaf_range(level, index)
            yield from store.in_leaves(first, end)

    def _current(self, session_id: int, sender: Address) -> Session | None:
        s = self._session
        if s is None or s.id != session_id or s.peer != sender:
            self.counters.unexpected += 1
            return None
        self._answered(s)
        return s

    def _answered(self, s: Session) -> None:
        """The peer answered: it is reachable, so the session gets its full time."""
        if not s.answered:
            s.answered = True
            s.deadline_at = s.started_at + self.config.session_timeout_s
            self._deadlines.push(s.deadline_at, self._due_session_timeout)

    def _pick(self, k: int, now: float) -> list[Address]:
        """Up to `k` random alive members, without peers that did not answer."""
        skip = self._unanswered
        if skip:
            for addr in [a for a, until in skip.items() if until <= now]:
                del skip[addr]
        if not skip:
            return self._peers(self.rng, k)
        return [a for a in self._peers(self.rng, k + len(skip)) if a not in skip][:k]

    def _sync_with_any(self, now: float) -> None:
        """A session with a random alive member; after a write, preferably
        one its push did not go to (it may be the one that missed it)."""
        pushed, self._pushed = self._pushed, []
        peers = self._pick(1 + len(pushed), now)
        fresh = [p for p in peers if p not in pushed]
        if fresh or peers:
            self.sync_with((fresh or peers)[0], now)

    def _request(self, session: Session, msg: Any) -> None:
        self._send.append(Send(session.peer, (msg,), Channel.STREAM))

    def _reply(self, to: Address, msg: Any) -> None:
        self._send.append(Send(to, (msg,), Channel.STREAM))

    def _end_unanswered(self, now: float) -> None:
        """The session's peer never answered: skip it for a while and try
        another peer at once (membership will suspect it if it is gone)."""
        s = self._session
        assert s is not None and not s.answered
        self.counters.sessions_unanswered += 1
        self._unanswered[s.peer] = now + _UNANSWERED_SKIP_S
        self._end_session(ok=False, now=now)
        self._deadlines.push(now, self._due_retry)

    def _end_session(self, ok: bool, now: float) -> None:
        s = self._session
        assert s is not None
        self._session = None
        if ok:
            self._synced_once = True
            if s.received or s.sent:
                self.counters.sessions_repaired += 1
                self._quiet = 1
            elif not s.more:
                self._quiet = min(self._quiet * 2, _QUIET_BACKOFF_MAX)
            if s.more and s.peer not in self._queue:
                # Catching up on a large difference: go on at once, first.
                self._queue.insert(0, s.peer)
        else:
            self.counters.sessions_failed += 1
        if self._queue:
            self._deadlines.push(now, self._due_queue)
        self._events.append(SyncCompleted(s.peer, ok, s.sent, s.received, s.rounds))


def _size(rec: Record) -> int:
    """Roughly the bytes a record takes in a frame."""
    return len(rec.key) + len(rec.value or b"") + 32
