"""MetaLog: the metadata log's core, led by the elected controller.

Theory of operation (Raft's log replication, §5.3-5.4, on top of shoal's
lease election; compare etcd raft's `stepLeader`/`stepFollower`, its
`read_only.go`, and hashicorp/raft).

**Roles.** The controller of epoch E (the election's lease, election/) leads
the log while it holds that lease; every other voter follows. The epoch is
Raft's term: the election grants each epoch to one node at most, after the
voters' up-to-date check (election/voter.py, step 6), so the leader of E
holds every entry committed before E.

**Appending.** The leader appends each change as `Entry(E, index, op)`;
on becoming leader it first appends a `NoOp` of E. Entries go to the
driver as one `PersistLog` per drain (many entries per fsync) and to each
voter in `Append` messages (many per message), pipelined: a follower's next
index moves on when entries are sent, back when it refuses.

**Following.** A follower refuses an `Append` of an epoch below the highest
it knows or has granted (a deposed controller commits nothing), and one
whose (`prev_index`, `prev_epoch`) it does not hold; otherwise it cuts a
conflicting tail, appends, and answers `ok` with its match index only once
those entries are durable: the answer rides on the write (kernel/contract.py,
`Persist.releases`), and an answer to a heartbeat on a barrier after
earlier writes.

**Committing.** An index is committed once a majority of the voters hold it
durably (the leader counts itself when its own write is durable: it answers
itself the way a follower does) and its entry is of the current epoch
(Raft §5.4.2: an earlier epoch's entry is committed only by one of the
current epoch after it). Every node applies committed entries in order to
its `MetaState`; the leader then answers the proposal: committed (with its
revision), or a conflict of its `cas`.

**Outcomes** of a write asked anywhere: metalog/origin.py.

**Reads** (ReadIndex, Ongaro's thesis §6.4): the leader, once an entry of
its epoch is committed, notes its commit index, sends a heartbeat round
numbered `read_seq`, and answers once a majority of the voters have
acknowledged that round (or a later one) under its epoch: no clock is
trusted. A read asked before then waits.

**Voter changes** are decided here (election/controller.py, "Voter
changes"): the leader appends the next configuration as a `VoterSet` entry
(`propose_voters`), only once an entry of its own epoch is committed and no
other change is being decided, and from then on every commit (the
`VoterSet`'s own included) needs a majority of the new voters as well as of
the old, until the election has adopted the new configuration. Committed,
the entry goes to the election (`on_voters`), which renews its lease under
it. So a majority of the new voters holds every entry committed before the
change (Raft's log matching), whatever follows, and no change starts
before the last one is in force. A `VoterSet` committed under an earlier
leader is not acted on: its commit may have needed only the old majority.
A follower that applies a `VoterSet` has its election adopt it if newer
(`on_logged_voters`): one cut off before the renewal carrying it reached
it would otherwise campaign under the configuration before, which may
name a voter back with a wiped disk by name alone (election/steps.py,
`logged_voters`).

**Snapshots** (metalog/snapshot.py): every `snapshot_every` applied
entries a node snapshots its state and compacts its log behind it; a
follower that needs entries the leader no longer holds gets the snapshot.

Pure: no IO, no clock; time is passed in, the driver makes writes durable.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Iterable
from typing import Any

from shoal.kernel.contract import EMPTY, Address, Output, Send
from shoal.kernel.outbox import Outbox
from shoal.metalog import snapshot as snap
from shoal.metalog.batching import merged
from shoal.metalog.events import MetaConfig, MetaCounters, ProposalDone, ReadDone
from shoal.metalog.following import Following
from shoal.metalog.log import resume
from shoal.metalog.messages import (
    MAX_ENTRIES_PER_APPEND,
    OUTCOME_COMMITTED,
    OUTCOME_CONFLICT,
    OUTCOME_NO_SESSION,
    OUTCOME_NOT_APPLIED,
    OUTCOME_UNKNOWN,
    Append,
    AppendAck,
    Entry,
    Keepalive,
    KeepaliveResult,
    Propose,
    ProposeResult,
    ReadRequest,
    ReadResult,
)
from shoal.metalog.origin import Origin
from shoal.metalog.reads import ReadIndex, Reading
from shoal.metalog.sessionclock import Renewing, SessionClock
from shoal.metalog.snapshot import PersistSnapshot, Snapshot, SnapshotAck, SnapshotChunk
from shoal.metalog.state import (
    Applied,
    Duplicate,
    MetaOp,
    NoOp,
    NoSession,
    SessionEnd,
    SessionOpen,
    TxnApplied,
    VoterSet,
)
from shoal.metalog.voting import VoterSets

__all__ = ["MetaConfig", "MetaCounters", "MetaLog", "ProposalDone", "ReadDone"]


# A learner (a non-voter: an observer, or a voter back with a new data
# directory) counts in no majority and confirms no read, so an idle heartbeat
# goes to it every fifth round only (0.5 s at the default 0.1 s); entries and
# a moved commit index go at once. Per observer, 2 datagrams a second from an
# idle controller, and its answers.
_LEARNER_BEAT_EVERY = 5


class MetaLog(Following, Reading, Renewing):
    """One node's metadata log (see the module docstring; the follower's
    handlers are in following.py, the leader's reads in reads.py, its
    sessions' deadlines in sessionclock.py)."""

    # A deliberate bug, set only by the test that shows the swarm's checker
    # catches it (tests/sim/test_meta.py): "commit_alone" (acknowledge once
    # the leader's own disk holds an entry, not a majority's) or
    # "read_without_quorum" (serve reads from local state without
    # confirming leadership: a deposed controller answers stale), or
    # "snapshot_short" (a snapshot holds the state one entry before the
    # index it claims).
    mutation: str | None = None

    def __init__(self, name: str, me: Address, config: MetaConfig, rng: random.Random,
                 entries: tuple[Entry, ...], *, leading_epoch: Callable[[], int | None],
                 highest_epoch: Callable[[], int], saw_epoch: Callable[[int], None],
                 voters: Callable[[], tuple[tuple[str, ...], ...]],
                 controller: Callable[[], tuple[str, int] | None],
                 addr_of: Callable[[str], Address | None],
                 snapshot: Snapshot | None = None) -> None:  # fmt: skip
        """Args:
        name: this node's name; me: its address (its own durable appends
            answer it there, as a follower's answer the leader).
        config: timing. rng: unused yet (kept for the contract).
        entries: the log a previous run left durable.
        leading_epoch: the epoch of the lease this node holds, or None.
        highest_epoch: the highest epoch this node knows or has granted.
        saw_epoch: tell the election an epoch exists (an accepted append's).
        voters: the voter sets whose majorities a commit (and a read's
            confirmation) needs: the configuration, and while a voter change
            is in flight the one before it too (joint majorities, so that no
            change, however it ends, can elect a controller without an
            entry committed here); controller: the controller known, if any.
        addr_of: a member's address.
        snapshot: the latest snapshot a previous run left durable (`entries`
            then go on from somewhere at or before it).
        """
        self.name, self.me, self.config, self.rng = name, me, config, rng
        self.snapshot = snapshot
        self.log, self.state = resume(snapshot, entries)
        self.commit = self.state.revision
        self._sender = snap.Sender(config.chunk_bytes, config.chunk_window)
        self._receiver = snap.Receiver(config.max_snapshot_bytes)
        self._taking: int | None = None  # the index of a snapshot the driver encodes
        # Called with each entry as it is applied (the simulator's checks).
        self.on_apply: Callable[[Entry], None] | None = None
        self.out = Outbox()
        self.counters = MetaCounters()
        self._leading_epoch, self._highest_epoch = leading_epoch, highest_epoch
        self._saw_epoch, self._voters, self._controller = saw_epoch, voters, controller
        self._addr_of = addr_of
        # Non-voters the leader replicates to as well, never counted in a
        # majority: a voter back with a new data directory catches up before
        # it is added again (election/controller.py). Set by the composing node.
        self.learners: Callable[[], Iterable[str]] = tuple
        # When the lease this node leads under ends, on its clock (set by the
        # composing node): no renewal is served from then on, though the
        # election has not yet told the log (a controller woken from a pause
        # past its lease answers its queued messages before its timers run).
        self.lease_end: Callable[[], float] = lambda: math.inf
        # Whose majorities a commit needs, the change being decided included
        # (leader only); `on_voters` is called when that change is committed.
        self._votes = VoterSets(voters)
        self.on_voters: Callable[[VoterSet, float], None] = lambda change, now: None
        # A follower applied a committed `VoterSet`: the election adopts it
        # if newer (election/steps.py, `logged_voters`). Set by the composing node.
        self.on_logged_voters: Callable[[VoterSet, float], None] = lambda change, now: None
        # Leader state (epoch None: not leading).
        self.epoch: int | None = None
        self._next: dict[str, int] = {}
        self._match: dict[str, int] = {}
        self._noop_index = 0
        self._pending: dict[int, tuple[str, int]] = {}  # index -> (origin, pid)
        self._reads = ReadIndex()
        self._clock = SessionClock()
        self.on_session_end: Callable[[bytes, float], None] = lambda sid, now: None
        self._heartbeat_at = float("inf")
        self._send_due = False  # entries appended since the last replication
        self._beats = 0  # heartbeat rounds while leading
        self._told: dict[str, int] = {}  # learner -> the commit index last sent it
        self._now = 0.0  # the latest time an input came with (drain has none)
        # What this node asked the controller, and until when it waits.
        self._origin = Origin(name, config, rng, self.out, self.counters, controller, addr_of)
        self.handlers: dict[type, Callable[[Any, Address, float], None]] = {
            Append: self._on_append, AppendAck: self._on_ack, Propose: self._on_propose,
            ProposeResult: self._origin.on_result, ReadRequest: self._on_read,
            ReadResult: self._origin.on_read_result, SnapshotChunk: self._on_chunk,
            SnapshotAck: self._on_chunk_ack, Keepalive: self._on_keepalive,
            KeepaliveResult: self._origin.on_keepalive_result,
        }  # fmt: skip

    # -- the core contract -----------------------------------------------------

    def receive(self, message: Any, sender: Address, now: float) -> None:
        """Handle one decoded metadata-log message."""
        self._now = now
        self.handlers[type(message)](message, sender, now)

    def tick(self, now: float) -> None:
        """Follow the election's leadership; heartbeat; time out answers."""
        self._now = now
        self.leadership(now)
        if self.epoch is not None and now >= self._heartbeat_at:
            self._replicate(now, heartbeat=True)
        self._expire_sessions(now)
        self._origin.expire(now)

    def next_deadline(self) -> float | None:
        """The next heartbeat or answer timeout."""
        times = self._origin.deadlines()
        if self.epoch is not None:
            times.append(self._heartbeat_at)
            expiry = self._clock.next_deadline()
            if expiry is not None:
                times.append(expiry)
        return min(times) if times else None

    def drain(self) -> Output:
        """Hand the log's changes to the driver (the leader's own write
        answers itself once durable), then the sends and events."""
        if self._send_due and self.epoch is not None:
            self._replicate(self._now, heartbeat=False)  # one batch per drain
        write = self.log.take_persist()
        if write is not None:
            self.out.persist(write)
            if self.epoch is not None:
                ack = AppendAck(self.epoch, self.name, True, self.log.last_index)
                self.out.send_durable(Send(self.me, (ack,)))
        return merged(self.out.drain()) if self.out else EMPTY

    # -- commands -----------------------------------------------------------------

    def propose(self, op: MetaOp, now: float) -> int:
        """Write `op` through the controller; its `ProposalDone` follows."""
        pid = self._origin.next_id()
        if self.epoch is not None:
            self._append(op, (self.name, pid), now)
        else:
            self._origin.propose(pid, op, now)
        return pid

    def read(self, key: bytes, now: float) -> int:
        """Read `key` linearizably through the controller; `ReadDone` follows."""
        rid = self._origin.next_id()
        if self.epoch is not None:
            self._start_read(self.name, rid, key, now)
        else:
            self._origin.read(rid, key, now)
        return rid

    def ready(self) -> bool:
        """Whether the voters may change: this node, leading, has committed
        an entry of its own epoch (or does not lead the log: nothing of the
        log is at stake). Ongaro's fix to the single-server change bug."""
        return self.epoch is None or self.commit >= self._noop_index

    def propose_voters(self, change: VoterSet, now: float) -> bool:
        """Decide a voter change through the log (module docstring); False
        when not now: not leading, no entry of our epoch committed yet, or
        another change being decided."""
        if self.epoch is None or not self.ready() or self._votes.changing(self.commit):
            return False
        self._append(change, None, now)
        self._votes.deciding = (self.log.last_index, change)
        return True

    def drop_change(self) -> None:
        """The election will not adopt the change decided (a lineage merged
        meanwhile): stop counting its voters."""
        self._votes.deciding = None

    def leadership(self, now: float) -> None:
        """Lead the log while holding the lease, of that epoch; stop when not."""
        epoch = self._leading_epoch()
        if epoch == self.epoch:
            return
        if self.epoch is not None:
            self._step_down()
        if epoch is not None:
            self._become_leader(epoch, now)

    # -- leader -------------------------------------------------------------------

    def _become_leader(self, epoch: int, now: float) -> None:
        self.epoch = epoch
        self._next = {}
        self._match = {}
        self._reads.reset()
        self._sender.reset()
        self._clock.lead(self.state.sessions.values(), now)
        self._append(NoOp(), None, now)
        self._noop_index = self.log.last_index

    def _step_down(self) -> None:
        """Leadership lost: what was appended may or may not commit."""
        for origin, pid in self._pending.values():
            self._answer(origin, pid, OUTCOME_UNKNOWN, 0)
        for origin, rid in self._reads.drop():
            self._answer_read(origin, rid, None)
        self._pending = {}
        self._votes.deciding = None
        self._clock.stop()
        self.epoch = None
        self._heartbeat_at = float("inf")

    def _append(self, op: MetaOp, asked: tuple[str, int] | None, now: float) -> None:
        assert self.epoch is not None
        index = self.log.last_index + 1
        origin, pid = asked if asked is not None else ("", 0)
        self.log.append(Entry(self.epoch, index, op, origin, pid))
        self.counters.appended += 1
        if asked is not None:
            self._pending[index] = asked
        self._send_due = True
        self._now = now

    def _replicate(self, now: float, heartbeat: bool) -> None:
        """Send each voter what it lacks (or, on a heartbeat, at least an
        empty append carrying the commit index and the read round)."""
        assert self.epoch is not None
        self._heartbeat_at = now + self.config.heartbeat_s
        self._send_due = False
        self._follow_voters()
        log = self.log
        voting = {v for voters in self._votes.sets(self.commit) for v in voters}
        self._beats += heartbeat
        quiet = self._beats % _LEARNER_BEAT_EVERY != 0
        for voter, nxt in self._next.items():
            prev_epoch = log.epoch_at(nxt - 1)
            entries = () if prev_epoch is None else log.since(nxt, MAX_ENTRIES_PER_APPEND)
            if not entries and not heartbeat and prev_epoch is not None:
                continue
            if voter not in voting and prev_epoch is not None:  # a learner, idle:
                if not entries and quiet and self._told.get(voter, -1) >= self.commit:
                    continue  # it hears every fifth beat
                self._told[voter] = self.commit
            addr = self._addr_of(voter)
            if addr is None:
                continue
            if prev_epoch is None:  # compacted away: the snapshot instead
                self._send_snapshot(voter, addr, heartbeat)
                continue
            self._sender.done(voter)
            msg = Append(self.epoch, self.name, nxt - 1, prev_epoch, entries, self.commit,
                         self._reads.seq)  # fmt: skip
            self.out.send(Send(addr, (msg,)))
            if entries:
                self._next[voter] = entries[-1].index + 1  # pipelined

    def caught_up(self, name: str) -> bool:
        """Whether `name` holds the entries committed here (while leading),
        but for at most one append's worth: a voter added then has its
        entries in one message. (Safety does not rest on this: the change
        that adds it commits on a majority of the new voters.)"""
        return (
            self.epoch is not None
            and self._match.get(name, 0) >= self.commit - MAX_ENTRIES_PER_APPEND
        )

    def forget(self, name: str) -> None:
        """`name` lost what it held (its data directory was replaced): what it
        acknowledged before counts no more, and it is sent the log anew."""
        self._match.pop(name, None)
        if name in self._next:
            self._next[name] = self.log.last_index + 1  # it backs up from there

    def _send_snapshot(self, voter: str, addr: Address, again: bool) -> None:
        assert self.epoch is not None and self.snapshot is not None
        for chunk in self._sender.chunks(voter, self.snapshot, self.log.offset, self.epoch,
                                         self.name, again):  # fmt: skip
            self.counters.snapshot_chunks_sent += 1
            self.out.send(Send(addr, (chunk,)))

    def _on_chunk_ack(self, msg: SnapshotAck, sender: Address, now: float) -> None:
        if self.epoch is None or msg.epoch != self.epoch or msg.follower not in self._next:
            return
        addr = self._addr_of(msg.follower)
        if addr is not None and self._sender.acked(msg.follower, msg.index, msg.received):
            self._send_snapshot(msg.follower, addr, False)

    def _follow_voters(self) -> None:
        """Replicate to every voter of every set, and to the learners: a new
        one from the end (it backs up from there), a removed one no more."""
        wanted = {v for voters in self._votes.sets(self.commit) for v in voters if v != self.name}
        wanted.update(v for v in self.learners() if v != self.name)
        if wanted != self._next.keys():
            last = self.log.last_index
            self._next = {v: self._next.get(v, last + 1) for v in sorted(wanted)}

    def _quorum(self, has: Callable[[str], bool]) -> bool:
        """Whether the voters for whom `has` holds are a majority of every set."""
        return self._votes.quorum(self.commit, has)

    def _on_ack(self, msg: AppendAck, sender: Address, now: float) -> None:
        if self.epoch is None or msg.epoch != self.epoch:
            return  # an answer to a leadership we no longer hold, or a refusal by epoch
        who = msg.follower
        self._reads.answered(who, msg.read_seq)
        if msg.ok:
            if msg.match_index > self._match.get(who, 0):
                self._match[who] = msg.match_index
            if who in self._next:
                self._next[who] = max(self._next[who], msg.match_index + 1)
            self._advance_commit(now)
        elif who in self._next:
            # Back up to just after what it holds, and send again at once.
            self._next[who] = max(1, min(msg.match_index + 1, self._next[who] - 1))
            self._replicate(now, heartbeat=False)
        self._serve_reads()

    def _advance_commit(self, now: float) -> None:
        assert self.epoch is not None
        n = self._votes.held_by_majorities(self.commit, self._match, self.log.last_index,
                                           alone=MetaLog.mutation == "commit_alone")  # fmt: skip
        if n > self.commit and self.log.epoch_at(n) == self.epoch:
            self.commit = n
            self._apply(now)
            if self._reads.early:
                early, self._reads.early = self._reads.early, []
                for origin, rid, key in early:
                    self._start_read(origin, rid, key, now)

    def _apply(self, now: float) -> None:
        state, log = self.state, self.log
        while state.revision < self.commit:
            index = state.revision + 1
            entry = log.entry(index)
            if MetaLog.mutation == "snapshot_short" and self._snapshot_due(index):
                self._take_snapshot(index)  # the bug: the state before the entry
            result = state.apply(index, entry.op, entry.origin, entry.pid)
            if type(entry.op) is SessionOpen or type(entry.op) is SessionEnd:
                self._session_applied(entry.op, result, now)
            elif type(entry.op) is VoterSet and self.epoch is None:
                self.on_logged_voters(entry.op, now)  # following: the election adopts it
            if self.on_apply is not None:
                self.on_apply(entry)
            deciding = self._votes.deciding
            if deciding is not None and index == deciding[0]:
                self.on_voters(deciding[1], now)  # decided: the election adopts it
            self.counters.committed += 1
            asked = self._pending.pop(index, None)
            if asked is not None and not isinstance(result, Duplicate):
                if isinstance(result, Applied | TxnApplied):
                    txn = result if isinstance(result, TxnApplied) else None
                    self._answer(*asked, OUTCOME_COMMITTED, result.revision, txn)
                elif isinstance(result, NoSession):
                    self._answer(*asked, OUTCOME_NO_SESSION, 0)
                else:
                    self._answer(*asked, OUTCOME_CONFLICT, result.current)
        if self._snapshot_due(state.revision):
            self._take_snapshot(state.revision)

    def _snapshot_due(self, index: int) -> bool:
        every = self.config.snapshot_every
        last = 0 if self.snapshot is None else self.snapshot.index
        return every > 0 and self._taking is None and index - last >= every

    def _take_snapshot(self, index: int) -> None:
        """Have the driver encode and store the state as `index`'s, off
        the loop (`snapshot_taken` follows)."""
        epoch = self.log.epoch_at(index)
        assert epoch is not None
        self._taking = index
        self.out.persist(snap.view_of(self.state, index, epoch))

    def snapshot_taken(self, snapshot: Snapshot | None, now: float) -> None:
        """The driver encoded and stored the snapshot asked for (None: it
        failed; the next entry applied asks again): it is the latest, and
        the log is compacted behind it but for a tail. One a snapshot
        installed meanwhile overtook is dropped."""
        self._now = now
        self._taking = None
        if snapshot is None or (self.snapshot is not None
                                and snapshot.index <= self.snapshot.index):  # fmt: skip
            return
        assert snapshot.index <= self.commit and self.log.epoch_at(snapshot.index) is not None
        self.snapshot = snapshot
        through = max(self.log.offset, snapshot.index - self.config.keep_entries)
        self.log.compact(through)
        self.out.persist(PersistSnapshot(snapshot, through))
        self.counters.snapshots_taken += 1

    def _answer(self, origin: str, pid: int, outcome: int, revision: int,
                txn: TxnApplied | None = None) -> None:  # fmt: skip
        self._origin.answer(origin, ProposeResult(pid, outcome, revision, txn))

    def _on_propose(self, msg: Propose, sender: Address, now: float) -> None:
        # Only the leader of the epoch the proposal was sent to appends it: a
        # copy of it (a duplicated or replayed datagram) reaching this node
        # once it leads a later epoch is refused too, so "not applied" is
        # final (the origin may have been told so already).
        if self.epoch is None or msg.epoch != self.epoch:
            self.counters.proposals_not_applied += 1
            self.out.send(Send(sender, (ProposeResult(msg.pid, OUTCOME_NOT_APPLIED, 0),)))
            return
        self._append(msg.op, (msg.origin, msg.pid), now)
