"""The initiator's side of anti-entropy: the one session this node runs.

The initiator walks the two Merkle trees (storage/merkle.py) top-down
against the responder (storage/responder.py), one round per level below
the nodes that differ, then trades digests and records (the exchange is
drawn in storage/antientropy.py's docstring). It runs one session at a
time, and other sessions due meanwhile (a returned member, the rest of a
large catch-up) wait in a short queue. A session ends on completion, on a
stream failure, at `session_timeout_s`, or when its first answer has not
come within `_FIRST_ANSWER_TIMEOUT_S`: a member cut off by a partition
(still alive in the view until it is suspected) cannot hold the one session
slot for the stream timeout. A peer that did not answer is skipped by
sessions and pushes for `_UNANSWERED_SKIP_S`, or until it returns.

This also keeps what the periodic schedule (the façade's) reads: whether a
session ever completed, and `quiet`, the interval's factor, which doubles
while sessions find the replicas equal and returns to 1 at any sign that
they differ.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable, Iterable
from typing import Any

from shoal.kernel.contract import Address, Channel, Send
from shoal.kernel.deadlines import Deadlines
from shoal.kernel.outbox import Outbox
from shoal.storage.config import SESSION_BUDGET_BYTES, SyncConfig
from shoal.storage.messages import SyncDigests, SyncRecords, SyncTree, SyncTreeDiff
from shoal.storage.records import Record, frame_size
from shoal.storage.store import Replica
from shoal.storage.syncstate import SyncCompleted, SyncCounters, SyncSession

PeerSampler = Callable[[random.Random, int], list[Address]]
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
# Sessions waiting for the slot. A heal returns the whole other side at
# once; a few sessions with it reach every record it holds (its members
# are in step with each other), and periodic sessions do the rest.
_QUEUE_MAX = 8
# While sessions find the replicas equal and nothing is written, the
# interval doubles, up to this factor; any write, push or difference brings
# it back (see AntiEntropy._due_sync).
_QUIET_BACKOFF_MAX = 4


class Initiator:
    """This node's anti-entropy sessions: one running, a few queued."""

    def __init__(
        self,
        replica: Replica,
        config: SyncConfig,
        rng: random.Random,
        peers: PeerSampler,
        counters: SyncCounters,
        deadlines: Deadlines,
        out: Outbox,
    ) -> None:
        """Shares the core's replica, counters, deadline heap and outbox."""
        self.replica = replica
        self.config = config
        self.rng = rng
        self.counters = counters
        self.synced_once = False
        self.quiet = 1  # the periodic interval's factor: doubles while all is equal
        # The members the last write was pushed to (see sync_with_any).
        self.pushed: list[Address] = []
        self._peers = peers
        self._deadlines = deadlines
        self._send = out.sends
        self._events = out.events
        self._session: SyncSession | None = None
        self._session_ids = itertools.count(rng.getrandbits(32))
        # Peers to sync with as soon as the slot is free, in order.
        self._queue: list[Address] = []
        # Peers that did not answer -> when they may be picked again.
        self._unanswered: dict[Address, float] = {}

    def differs(self) -> None:
        """Something says the replicas differ: the interval starts over."""
        self.quiet = 1

    @property
    def idle(self) -> bool:
        """No session runs and none is queued."""
        return self._session is None and not self._queue

    def peer_returned(self, peer: Address, now: float) -> None:
        """See AntiEntropy.peer_returned."""
        self._unanswered.pop(peer, None)
        self.quiet = 1  # what it missed may be anywhere
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
        session = SyncSession(next(self._session_ids), peer, now, first_answer_by)
        self._session = session
        self.counters.sessions_started += 1
        self._deadlines.push(session.deadline_at, self._due_session_timeout)
        tree = self.replica.tree
        root_sum, count = tree.node(0, 0)
        sums = ((0, root_sum),) if count else ()
        self._request(session, SyncTree(session.id, tree.depth, 0, (), sums))
        return True

    def sync_with_any(self, now: float) -> None:
        """A session with a random alive member; after a write, preferably
        one its push did not go to (it may be the one that missed it)."""
        pushed, self.pushed = self.pushed, []
        peers = self.pick(1 + len(pushed), now)
        fresh = [p for p in peers if p not in pushed]
        if fresh or peers:
            self.sync_with((fresh or peers)[0], now)

    def pick(self, k: int, now: float, skipping: bool = True) -> list[Address]:
        """Up to `k` random alive members, without peers that did not answer
        unless not `skipping` (a batch's pushes: `AntiEntropy.write_many`)."""
        skip = self._unanswered
        if skip:
            for addr in [a for a, until in skip.items() if until <= now]:
                del skip[addr]
        if not skip or not skipping:
            return self._peers(self.rng, k)
        return [a for a in self._peers(self.rng, k + len(skip)) if a not in skip][:k]

    def stream_failed(self, peer: Address, now: float) -> None:
        """A stream to `peer` failed: end the session with it, if any."""
        s = self._session
        if s is not None and s.peer == peer:
            if s.answered:
                self._end_session(ok=False, now=now)
            else:
                self._end_unanswered(now)

    # -- timers --------------------------------------------------------------------

    def _due_queue(self, _: None, now: float) -> None:
        if self._session is None and self._queue:
            self.sync_with(self._queue.pop(0), now)

    def _due_retry(self, _: None, now: float) -> None:
        """After a session nobody answered: another peer, at once."""
        if self._session is None and not self._queue:
            self.sync_with_any(now)

    def _due_session_timeout(self, _: None, now: float) -> None:
        s = self._session
        if s is not None and s.deadline_at <= now:
            if s.answered:
                self._end_session(ok=False, now=now)
            else:
                self._end_unanswered(now)

    # -- answers -------------------------------------------------------------------

    def on_sync_tree_diff(self, msg: SyncTreeDiff, sender: Address, now: float) -> None:
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

    def _start_digests(self, session: SyncSession, now: float) -> None:
        """Push whole subtrees the peer has nothing under; ask about the rest."""
        session.digesting = True
        empty = [(lv, i) for lv, i, count in session.pending if count == 0]
        asked = tuple((lv, i) for lv, i, count in session.pending if count > 0)
        if empty:
            session.sent += self._push_records(session, self.replica.records_in(empty))
        if not asked:
            self._end_session(ok=True, now=now)
            return
        records = self.replica.records_in(asked)
        versions = tuple((r.key, r.hlc, r.writer, r.epoch) for r in records)
        self._request(session, SyncDigests(session.id, asked, versions))

    def on_sync_records(
        self, msg: SyncRecords, sender: Address, applied: list[Record], now: float
    ) -> None:
        """Records from a peer, merged already (`applied`: those that were
        news): the answer to our digests ends the session with what it
        wants; an initiator's push of records we lacked is nothing more."""
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

    def _push_records(self, session: SyncSession, records: Iterable[Record]) -> int:
        """Send `records` to the session's peer, in frames of a quarter of
        the byte budget, up to the budget; returns how many went out."""
        chunk: list[Record] = []
        chunk_bytes = total_bytes = sent = 0
        for rec in records:
            size = frame_size(rec)
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

    def _current(self, session_id: int, sender: Address) -> SyncSession | None:
        s = self._session
        if s is None or s.id != session_id or s.peer != sender:
            self.counters.unexpected += 1
            return None
        self._answered(s)
        return s

    def _answered(self, s: SyncSession) -> None:
        """The peer answered: it is reachable, so the session gets its full time."""
        if not s.answered:
            s.answered = True
            s.deadline_at = s.started_at + self.config.session_timeout_s
            self._deadlines.push(s.deadline_at, self._due_session_timeout)

    def _request(self, session: SyncSession, msg: Any) -> None:
        self._send.append(Send(session.peer, (msg,), Channel.STREAM))

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
            self.synced_once = True
            if s.received or s.sent:
                self.counters.sessions_repaired += 1
                self.quiet = 1
            elif not s.more:
                self.quiet = min(self.quiet * 2, _QUIET_BACKOFF_MAX)
            if s.more and s.peer not in self._queue:
                # Catching up on a large difference: go on at once, first.
                self._queue.insert(0, s.peer)
        else:
            self.counters.sessions_failed += 1
        if self._queue:
            self._deadlines.push(now, self._due_queue)
        self._events.append(SyncCompleted(s.peer, ok, s.sent, s.received, s.rounds))
