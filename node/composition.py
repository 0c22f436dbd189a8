"""ShoalNode: the pure composition of shoal's protocol cores.

Both drivers use this one class: the asyncio `Agent` with real sockets and
the simulator with a virtual network. If they wired the cores differently,
the simulator would test a different program, so all routing between cores
happens here and nowhere else. This module must stay sans-IO (the boundary
test checks it): it never reads a clock, opens a socket or logs.

It holds the membership core and the anti-entropy core (which picks its
sync and push peers among the alive members of the membership view, and is
told when a member becomes alive again, to sync with it at once); the
election core plugs in at the same places.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterator
from typing import Any

from shoal.election.config import LeaseConfig
from shoal.election.lease import LeaseElection
from shoal.election.messages import ControllerNotice, LeaseRequest, PreVote
from shoal.election.view import Liveness, ViewMember
from shoal.election.voters import VoterConfig
from shoal.kernel.contract import EMPTY, Address, Output, Send, Tags
from shoal.kernel.errors import FenceRefused, WriteRefused
from shoal.kernel.outbox import Outbox
from shoal.kernel.versions import META_LOG_FEATURE
from shoal.membership.events import (
    MemberDied,
    MemberJoined,
    MemberLeft,
    MemberRefuted,
    MemberUpdated,
)
from shoal.membership.member import Member, MemberState, MemberView, NodeIdentity
from shoal.membership.messages import Alive
from shoal.membership.profiles import SwimConfig
from shoal.membership.swim import Handler, SwimNode
from shoal.metalog.core import MetaConfig, MetaLog
from shoal.metalog.messages import Entry
from shoal.metalog.snapshot import Snapshot
from shoal.metalog.state import MetaOp, VoterSet
from shoal.node import nextrelease
from shoal.node.features import FEATURE_CAP_KEY, FeatureLevel, parse_cap
from shoal.node.nextrelease import LEVEL_PROBE_FEATURE, LevelProbe
from shoal.services.core import Services
from shoal.services.delivery import EventLedger
from shoal.storage import fences
from shoal.storage.antientropy import AntiEntropy
from shoal.storage.config import SyncConfig
from shoal.storage.records import Record
from shoal.storage.store import (
    OWNER_FAILED,
    OWNER_LEFT,
    OWNER_SESSION_ENDED,
    MemoryStore,
    RecordChange,
    RecordStore,
    Replica,
)

# The election's reading of each SWIM state, indexed by state. A suspect is
# live to the election: it acts on verdicts, not on suspicions.
_LIVENESS_OF_STATE = {
    MemberState.ALIVE: Liveness.LIVE,
    MemberState.SUSPECT: Liveness.LIVE,
    MemberState.DEAD: Liveness.DEAD,
    MemberState.LEFT: Liveness.LEFT,
}
_LIVENESS = tuple(_LIVENESS_OF_STATE[state] for state in sorted(MemberState))
# Membership events after which a member is alive again (see _note_returns).
_RETURNS = (MemberJoined, MemberRefuted, MemberUpdated)
# How often the controller deletes the ephemeral keys of failed and left
# members for good (every replica already hides them; see storage/store.py).
_EPHEMERAL_SWEEP_S = 2.0
_SESSION_SWEEP_S = 60.0  # an ended session's kv keys are swept for this long at least
# How often the feature level is decided (controller) or read from the last
# notice (members): it moves once per upgrade, never in a hurry.
_LEVEL_EVERY_S = 1.0


class ShoalNode:
    """All of one agent's protocol state, driven by receive/tick/drain."""

    def __init__(
        self,
        ident: NodeIdentity,
        swim_config: SwimConfig,
        rng: random.Random,
        incarnation: int = 0,
        store: RecordStore | None = None,
        sync_config: SyncConfig | None = None,
        wall_offset_ms: int = 0,
        lease_config: LeaseConfig | None = None,
        election_state: tuple[int, VoterConfig | None] = (0, None),
        bootstrap_expect: int = 3,
        meta: MetaConfig | None = None,
        meta_log: tuple[Entry, ...] = (),
        meta_snapshot: Snapshot | None = None,
    ) -> None:
        """Compose the cores for one node.

        Args:
            ident: the node's name, persistent id, advertised address, tags.
            swim_config: membership timing.
            rng: the node's only randomness; each core gets its own stream
                derived from it, so adding a core does not shift the others.
            incarnation: last incarnation persisted by a previous run.
            store: the replicated records (RocksDB in the agent, a
                MemoryStore that outlives crashes in the simulator).
            sync_config: anti-entropy settings.
            wall_offset_ms: wall clock minus monotonic `now`, in ms.
            lease_config: election timing.
            election_state: (highest granted epoch, voter configuration)
                persisted by a previous run.
            bootstrap_expect: eligible members to wait for before the
                first voter configuration is formed.
            meta: run the metadata log (metalog/) with this timing; None:
                not (the agent turns it on through the feature level).
            meta_log: the metadata log's entries a previous run left durable.
            meta_snapshot: and its latest snapshot (metalog/snapshot.py).
        """
        self.swim = SwimNode(ident, swim_config, random.Random(rng.getrandbits(64)), incarnation)
        cfg = sync_config or SyncConfig()
        if store is None:
            store = MemoryStore(cfg.tree_depth)
        replica = Replica(store, ident.node_id, cfg.max_skew_ms, int(cfg.tombstone_grace_s * 1000),
                          int(cfg.event_retention_s * 1000))  # fmt: skip
        sync_rng = random.Random(rng.getrandbits(64))
        self.sync = AntiEntropy(replica, cfg, sync_rng, self._sample_peers, wall_offset_ms)
        self.swim.set_wall_offset(wall_offset_ms)
        granted_epoch, voters = election_state
        self.election = LeaseElection(
            ident.name, lease_config or LeaseConfig(), random.Random(rng.getrandbits(64)),
            self._view, self._addr_of, granted_epoch, voters, bootstrap_expect, self._liveness_of,
            ident.node_id,
        )  # fmt: skip
        self._view_version = -1
        self._offset_at = -math.inf  # when the sync core next gets the measured clock offset
        self._swim_events_seen = 0  # membership events already read (_note_returns)
        self._sweep_at = -math.inf  # the controller's next ephemeral-key sweep
        self._ended_sessions: dict[bytes, float] = {}  # session id -> when its end was applied
        self._epoch_seen = 0  # the highest controller epoch known so far (known_epoch)
        # Message type -> the handler of the core it belongs to: one lookup
        # per message on the hottest path, in the agent and the simulator.
        self._routes = dict(self.swim.handlers)
        self._routes.update(self.sync.handlers)
        self._routes.update(self.election.handlers)
        self.election.decide_level = self._decide_level
        for kind in (LeaseRequest, PreVote, ControllerNotice):
            self._routes[kind] = self._heeding_strangers(self._routes[kind])
        self._routes[ControllerNotice] = self._learning_level(self._routes[ControllerNotice])
        self._claims = self.swim.claims
        self._lost = self.swim.table.lost  # see receive_all
        self._cores = (self.swim, self.sync, self.election)
        # The node's own output: feature-level events and the next-release
        # stand-in's message (node/features.py, node/nextrelease.py).
        self.out = Outbox()
        self._rng = random.Random(rng.getrandbits(64))  # drawn last: the cores' streams stay
        # The platform features (services/): after every other stream, and
        # writing to the node's own outbox, so a node without user events
        # drains as before.
        self.services = Services(
            replica.store,
            int(cfg.event_retention_s * 1000),
            random.Random(rng.getrandbits(64)),
            wall_offset_ms,
            self.out,
        )
        self._changes: list[RecordChange] | None = None  # for `take_changes`, once asked
        self.features = FeatureLevel(ident.versions)
        self._level_at = -math.inf  # when the feature level is next looked at
        self._level_heard = 0  # the level of the newest notice, when last looked at
        self.level_probes_received = 0
        self._probes = ident.versions.features >= LEVEL_PROBE_FEATURE and nextrelease.enabled()
        if self._probes:
            self._routes[LevelProbe] = self._on_level_probe
        self.meta: MetaLog | None = None
        if meta is not None:
            self.meta = self._compose_meta(meta, meta_log, random.Random(rng.getrandbits(64)),
                                           meta_snapshot)  # fmt: skip

    @property
    def name(self) -> str:
        """This node's name."""
        return self.swim.ident.name

    @property
    def incarnation(self) -> int:
        """This node's own incarnation."""
        return self.swim.incarnation

    @property
    def leaving(self) -> bool:
        """Whether this node has left (and stays out until told to join)."""
        return self.swim.leaving

    # -- the core contract -----------------------------------------------------

    def start(self, now: float) -> None:
        """Begin: raise the incarnation and start the periodic work. The
        ephemeral keys of this node's previous run end here: they belonged
        to a process that is gone (ZooKeeper ends a session's ephemeral
        nodes the same way)."""
        self.swim.start(now)
        self.sync.start(now)
        self.election.start(now)
        self._delete_ephemeral(self.swim.ident.node_id, now)

    def receive(self, message: Any, sender: Address, now: float) -> None:
        """Route one decoded message to the core it belongs to."""
        self._routes[type(message)](message, sender, now)
        if self._lost:
            self.swim.heard_from(sender, now)
        self._check_view(now)
        if self.meta is not None:
            self.meta.leadership(now)

    def understands(self, messages: Any) -> bool:
        """Whether every one of `messages` is one a core takes (a reply to a
        key command, say, is not: the driver counts and drops it)."""
        routes = self._routes
        return all(type(m) in routes for m in messages)

    def receive_all(self, messages: Any, sender: Address, now: float) -> None:
        """`receive` for each message of one datagram or frame, in order."""
        routes = self._routes
        claims = self._claims
        alive = Alive  # a local: compiled, a global is a dict lookup per use
        for message in messages:
            # Alive, nine claims in ten while a cluster forms, by a direct
            # (compiled: native) call instead of a route and a bound method:
            # with the alive rows shared, 0.85x the CPU of d84a340 for
            # `shoal simulate --nodes 1000 --duration 60 --seed 1 --crash 2`.
            if type(message) is alive:
                claims.on_alive(message, sender, now)
            else:
                routes[type(message)](message, sender, now)
        # Whatever it carried, a datagram from a member membership holds
        # lost is a sign of a heal (SwimNode.heard_from). Empty while no
        # member is suspect or dead; tested per datagram, after the
        # messages, so a refutation is applied first (no longer lost then).
        lost = self._lost
        if lost and sender in lost:
            self.swim.heard_from(sender, now)
        if self.swim.table.version != self._view_version:
            self._check_view(now)
        if self.meta is not None:
            self.meta.leadership(now)

    def tick(self, now: float) -> None:
        """Run whatever is due in any core."""
        self.swim.tick(now)
        if now >= self._offset_at:  # the sync core judges records by the cluster's clock
            self._offset_at = now + 1.0
            self.sync.set_clock_offset(self.swim.clock_offset_ms(now) or 0)
        self.sync.tick(now)
        self._check_view(now)
        self.election.tick(now)
        if self.meta is not None:
            self.meta.tick(now)
        self.known_epoch()  # remember the epoch while the lease or the notice lasts
        self.services.tick(now)
        if now >= self._level_at:
            self._level_at = now + _LEVEL_EVERY_S
            self._due_feature_level(now)
        if now >= self._sweep_at:
            self._sweep_at = now + _EPHEMERAL_SWEEP_S
            if self.election.is_controller and not self.swim.leaving:
                for owner in list(self.sync.replica.gone_now):
                    self._delete_ephemeral(owner, now)
            self._forget_ended_sessions(now)

    def next_deadline(self) -> float | None:
        """The earliest deadline of all cores."""
        # Unrolled over the cores: the simulator asks after every input,
        # and the loop's overhead was 3.6 % of a 1,000-node run.
        best = self.swim.next_deadline()
        d = self.sync.next_deadline()
        if d is not None and (best is None or d < best):
            best = d
        d = self.election.next_deadline()
        if d is not None and (best is None or d < best):
            best = d
        if self.meta is not None:
            d = self.meta.next_deadline()
            if d is not None and (best is None or d < best):
                best = d
        d = self.services.next_deadline()
        if d is not None and (best is None or d < best):
            best = d
        return best

    def drain(self) -> Output:
        """One batch from all cores, persist before send before events
        (`EMPTY` itself when there is nothing)."""
        # Every core returns the shared EMPTY when it has nothing: an
        # identity test per core, on a path the simulator takes per message.
        if self.sync.replica.changes:  # None unless a reader asked (collect_changes)
            self._take_replica_changes()
        a, b, c = self.swim.drain(), self.sync.drain(), self.election.drain()
        self._swim_events_seen = 0  # swim's event list was emptied by its drain
        if self.out or self.meta is not None:
            own = self.out.drain() if self.out else EMPTY
            d = self.meta.drain() if self.meta is not None else EMPTY
            outs = [out for out in (a, b, c, own, d) if out is not EMPTY]
            if not outs:
                return EMPTY
            return Output(
                tuple(p for o in outs for p in o.persist),
                tuple(s for o in outs for s in o.send),
                tuple(e for o in outs for e in o.events),
            )
        if b is EMPTY and c is EMPTY:
            return a
        if a is EMPTY and c is EMPTY:
            return b
        if a is EMPTY and b is EMPTY:
            return c
        outs = [out for out in (a, b, c) if out is not EMPTY]
        return Output(
            tuple(p for o in outs for p in o.persist),
            tuple(s for o in outs for s in o.send),
            tuple(e for o in outs for e in o.events),
        )

    def stream_failed(self, peer: Address, now: float) -> None:
        """A stream to `peer` failed; tell the cores that may have opened it."""
        self.swim.stream_failed(peer, now)
        self.sync.stream_failed(peer, now)

    def unreachable(self, addr: Address, now: float) -> None:
        """Nothing listens at `addr` (ICMP port unreachable); see SwimNode."""
        self.swim.unreachable(addr, now)

    # -- the metadata log (metalog/) ---------------------------------------------

    def _compose_meta(self, config: MetaConfig, entries: tuple[Entry, ...],
                      rng: random.Random, snapshot: Snapshot | None) -> MetaLog:  # fmt: skip
        election = self.election
        features = self.features

        # The gate: until the cluster's feature level includes the log, this
        # node neither leads it (no no-op, nothing appended, so its lease
        # requests keep their 0.2.0 shape) nor asks a controller anything
        # (a proposal or a read is not applied): an agent of a release
        # before the log never receives one of its messages.
        def leading_epoch() -> int | None:
            return election.lease_epoch if features.known >= META_LOG_FEATURE else None

        def highest_epoch() -> int:
            return max(election.epoch_known, election.granted_epoch)

        def voters() -> tuple[tuple[str, ...], ...]:
            now, before = election.voters, election.controller.quorum_config
            sets: tuple[tuple[str, ...], ...] = () if now is None else (now.voters,)
            if before is not None and now is not None and before.voters != now.voters:
                sets += (before.voters,)  # a change in flight: both majorities
            return sets

        def controller() -> tuple[str, int] | None:
            return election.known if features.known >= META_LOG_FEATURE else None

        meta = MetaLog(self.name, self.swim.ident.addr, config, rng, entries,
                       leading_epoch=leading_epoch, highest_epoch=highest_epoch,
                       saw_epoch=election.saw_epoch, voters=voters, controller=controller,
                       addr_of=self._addr_of, snapshot=snapshot)  # fmt: skip
        election.log_position = meta.log.last
        # No voter change before an entry of the controller's own epoch is
        # committed (the fix to the single-server change bug, Ongaro 2015).
        election.log_ready = meta.ready
        # Gossip proposes a voter change, the log decides it (issue 37;
        # election/controller.py, "Voter changes").

        def propose_voters(change: VoterConfig | None, now: float) -> bool:
            if change is None:
                meta.drop_change()
                return False
            return meta.propose_voters(VoterSet(change.lineage, change.version, change.voters,
                                                change.ids, change.recovery), now)  # fmt: skip

        def decided(change: VoterSet, now: float) -> None:
            election.controller.decide(VoterConfig(change.lineage, change.version,
                                                   change.voters, change.ids,
                                                   change.recovery), now)  # fmt: skip
            election.wake(now)

        election.propose_voters = propose_voters
        meta.on_voters = decided
        # A follower adopts a committed configuration it applies (a voter cut
        # off before the renewal carrying it must not campaign under the one
        # before: election/steps.py, `logged_voters`).
        meta.on_logged_voters = lambda change, now: election.logged_voters(
            VoterConfig(change.lineage, change.version, change.voters, change.ids,
                        change.recovery), now)  # fmt: skip
        # A voter back with a new data directory catches up as a non-voter
        # before it is added again, and its old self's acknowledgements no
        # longer count (election/controller.py, issue 37).
        election.caught_up = meta.caught_up
        election.lost_disk = meta.forget
        table = self.swim.table

        def learners() -> tuple[str, ...]:
            # ... and every other live member that speaks the log observes
            # it: the controller replicates to it without counting it in any
            # majority, so every agent applies the committed entries and
            # serves watches, listings and reads (issue 37: "every other
            # agent as a non-voting observer").
            config = election.voters
            voting = frozenset(() if config is None else config.voters)
            live = table.live
            observers = [name for name, m in table.members.items()
                         if name in live and name not in voting
                         and m.ident.versions.features >= META_LOG_FEATURE]  # fmt: skip
            return (*election.controller.learners(), *observers)

        meta.learners = learners
        meta.lease_end = lambda: election.lease_end_at  # no renewal served past it
        # A session's end, applied: its kv keys are hidden here at once, and
        # the controller's sweep deletes them (as a failed member's).
        replica = self.sync.replica

        def session_ended(sid: bytes, now: float) -> None:
            replica.owner_gone(sid, self.sync.wall_ms(now), OWNER_SESSION_ENDED)
            self._ended_sessions[sid] = now

        meta.on_session_end = session_ended
        self._routes.update(meta.handlers)
        return meta

    def meta_propose(self, op: MetaOp, now: float) -> int:
        """Write `op` to the metadata log through the controller; a
        `ProposalDone` event with its id follows."""
        assert self.meta is not None
        return self.meta.propose(op, now)

    def meta_keepalive(self, ids: tuple[bytes, ...], now: float) -> int:
        """Renew sessions `ids` at the controller; a `KeepaliveDone` event
        with its id follows."""
        assert self.meta is not None
        return self.meta.keepalive(ids, now)

    def meta_read(self, key: bytes, now: float) -> int:
        """Read `key` linearizably through the controller; a `ReadDone`
        event with its id follows."""
        assert self.meta is not None
        return self.meta.read(key, now)

    # -- the feature level (node/features.py) ---------------------------------

    @property
    def feature_level(self) -> int:
        """The cluster's feature level as this node knows it (0: not yet
        announced by any controller)."""
        return self.features.known

    def held_back_by(self) -> list[str]:
        """The live members (this node included) that support a lower
        feature level than the highest any live member supports: the ones an
        upgrade is waiting for."""
        live = [m for m in self.swim.table.members.values()
                if m.state is MemberState.ALIVE or m.state is MemberState.SUSPECT]  # fmt: skip
        top = max(m.ident.versions.features for m in live)
        return sorted(m.ident.name for m in live if m.ident.versions.features < top)

    def _decide_level(self) -> None:
        """As controller, decide the cluster's feature level (what this
        node's notices announce): also called by the election as it wins,
        before its first notice, so that a first controller does not announce
        the election's initial level 1 for a second."""
        record = self.sync.replica.get(FEATURE_CAP_KEY)
        cap = parse_cap(None if record is None else record.value)
        live = [m.ident.versions for m in self.swim.table.members.values()
                if m.state is MemberState.ALIVE or m.state is MemberState.SUSPECT]  # fmt: skip
        self.election.feature_level = self.features.decide(live, cap)

    def _due_feature_level(self, now: float) -> None:
        election = self.election
        if election.is_controller:
            self._decide_level()
            level = election.feature_level
        else:
            level = election.following.level
            if level:
                # What this node announces if it is elected, until it
                # decides: the level it knows, not the election's initial 1
                # (a successor's first notices would lower everyone's level,
                # and turn the metadata log off, for up to a second).
                election.feature_level = level
        self._level_heard = election.following.level
        self.features.learn(level, self.out.events)
        if self._probes and self.features.known >= LEVEL_PROBE_FEATURE:
            peers = self._sample_peers(self._rng, 1)
            for addr in peers:
                self.out.send(Send(addr, (LevelProbe(self.features.known, self.name),)))

    def _learning_level(self, handler: Handler) -> Handler:
        """`handler` of notices, after which a follower knows at once a
        level a notice brought, not at its next look (up to
        `_LEVEL_EVERY_S` later): the metadata log forwards nothing below
        level 2, and a restarted agent knew the level 0.6-0.8 s after its
        first notice (bench/sessions.py, restart)."""

        def route(message: Any, sender: Address, now: float) -> None:
            handler(message, sender, now)
            election = self.election
            level = election.following.level
            if level != self._level_heard and level and not election.is_controller:
                self._level_heard = level
                election.feature_level = level  # as `_due_feature_level`
                self.features.learn(level, self.out.events)

        return route

    def _on_level_probe(self, msg: LevelProbe, sender: Address, now: float) -> None:
        self.level_probes_received += 1

    def _check_view(self, now: float) -> None:
        version = self.swim.table.version
        if version != self._view_version:
            self._view_version = version
            self._note_returns(now)
            self.election.view_changed(now)

    def _note_returns(self, now: float) -> None:
        """Tell anti-entropy about members that became alive again, and the
        replica about members gone (their ephemeral keys are hidden).

        A member back from dead or left (a join at an incarnation above the
        first: it refuted or restarted), back from suspect, or at a new
        address missed writes, and its own writes missed us. A first join is
        not a return: the newcomer syncs within a second of its own start.
        The events are read where membership queued them, before the drain.
        """
        events = self.swim.out.events
        if len(events) == self._swim_events_seen:
            return
        me = self.swim.table.self_name
        replica = self.sync.replica
        for event in events[self._swim_events_seen :]:
            kind = type(event)
            if kind in _RETURNS:
                m = event.member
                replica.owner_back(m.node_id)
                if m.name != me and (kind is not MemberJoined or m.incarnation > 1):
                    self.sync.peer_returned(m.addr, now)
            elif kind is MemberDied or kind is MemberLeft:
                reason = OWNER_FAILED if kind is MemberDied else OWNER_LEFT
                replica.owner_gone(event.member.node_id, self.sync.wall_ms(now), reason)
        self._swim_events_seen = len(events)

    def _forget_ended_sessions(self, now: float) -> None:
        """Stop sweeping for a session ended a minute ago whose kv keys are
        all deleted here: each sweep costs one lookup per owner gone. (What
        it wrote before its end stays hidden: `Replica.visible`.)"""
        replica = self.sync.replica
        for sid, at in list(self._ended_sessions.items()):
            if now - at > _SESSION_SWEEP_S and not replica.owned_by(sid):
                replica.owner_back(sid)
                del self._ended_sessions[sid]

    def _delete_ephemeral(self, owner: bytes, now: float) -> None:
        """Delete `owner`'s ephemeral keys for good (`expire`)."""
        for rec in self.sync.replica.owned_by(owner):
            self.expire(rec, now)

    def expire(self, rec: Record, now: float) -> Record:
        """Delete the key of `rec`, an ephemeral record whose owner or session
        ended: a tombstone under the record's own epoch, so that it wins over
        it everywhere (an unfenced delete would lose to a fenced record)."""
        return self.sync.write(rec.key, None, now, rec.epoch)

    # -- commands ----------------------------------------------------------------

    def join(self, addrs: list[Address], now: float, retry: bool = False) -> None:
        """Join the cluster through `addrs` (or rejoin after a leave); with
        `retry`, keep trying them while no member is known."""
        if self.swim.leaving:
            self.election.rejoin(now)
        self.swim.join(addrs, now, retry)

    def adopt(self, members: dict[str, Member]) -> None:
        """Know the alive rows `members` (name -> row) from the start (the
        simulator's formed start; every node shares the same rows)."""
        self.swim.adopt(members)

    def leave(self, now: float) -> None:
        """Leave the cluster gracefully (releasing the controller lease
        first, and deleting this node's ephemeral keys while its pushes
        still reach the others)."""
        self._delete_ephemeral(self.swim.ident.node_id, now)
        self.election.leave(now)
        self.swim.leave(now)

    def set_tags(self, tags: Tags, now: float) -> None:
        """Replace this node's tags."""
        self.swim.set_tags(tags, now)

    def write(self, key: bytes, value: bytes | None, now: float,
              fence: int | None = None, ephemeral: bool = False,
              session: bytes = b"") -> Record:  # fmt: skip
        """Put `key` (delete it, with None) and push the write to a few members.

        Args:
            fence: the controller epoch the write is made under; refused
                unless it is the highest epoch this node knows.
            ephemeral: the key belongs to this member (see storage/store.py).
            session: the key belongs to that session of the metadata log
                instead (its end, applied, hides it; the controller deletes it).

        Raises:
            WriteRefused: this node's clock is further than `max_offset_ms`
                from its peers' (its stamps would order writes wrongly), or
                see `Replica.write`.
            FenceRefused: this node knows a higher epoch than `fence`, or
                does not know `fence` at all, or see `Replica.write`.
        """
        if fence is not None:
            fences.check(self.sync.replica.counters, fence, self.known_epoch(), None)
        self._check_offset(now)
        owner = b"" if value is None else session or (self.swim.ident.node_id if ephemeral else b"")
        return self.sync.write(key, value, now, fence or 0, owner)

    def write_many(self, writes: list[tuple[bytes, bytes | None, int | None]],
                   now: float) -> tuple[list[Record], int]:  # fmt: skip
        """Put or delete each (key, value, fence) of `writes` as `write`
        would (none ephemeral), one after the other, pushed together
        (`AntiEntropy.write_many`). Returns the records written and how
        many were refused (by the fence rule, or `Replica.write`).

        Raises:
            WriteRefused: this node's clock is too far from its peers'
                (`write`): none was written.
        """
        self._check_offset(now)
        known, counters = self.known_epoch(), self.sync.replica.counters
        checked: list[tuple[bytes, bytes | None, int]] = []
        refused = 0
        for key, value, fence in writes:
            try:
                if fence is not None:
                    fences.check(counters, fence, known, None)
            except FenceRefused:
                refused += 1
                continue
            checked.append((key, value, fence or 0))
        written, also = self.sync.write_many(checked, now)
        return written, refused + also

    def _check_offset(self, now: float) -> None:
        """Refuse a write while this node's clock is too far from its peers'."""
        offset = self.swim.clock_offset_ms(now)
        limit = self.sync.config.max_offset_ms
        if offset is not None and abs(offset) > limit:
            self.sync.replica.counters.writes_refused_offset += 1
            raise WriteRefused(
                f"this agent's clock is {offset / 1000:+.3f} s from its peers' (more than "
                f"store.max_offset_ms = {limit} ms): its writes would be ordered wrongly; "
                "fix its clock (NTP) or write through another agent"
            )

    def known_epoch(self) -> int:
        """The highest controller epoch this node has known in this run (0:
        none yet). The election forgets a controller whose lease ran out;
        fences must not: a write under the last epoch is still the newest
        one while a successor is being elected."""
        election = self.election
        known = election.known
        lease = election.lease_epoch
        self._epoch_seen = max(self._epoch_seen, known[1] if known else 0, lease or 0)
        return self._epoch_seen

    def set_wall_offset(self, wall_offset_ms: int) -> None:
        """Wall clock minus monotonic `now`, in ms, for the cores that stamp."""
        self.sync.set_wall_offset(wall_offset_ms)
        self.swim.set_wall_offset(wall_offset_ms)
        self.services.set_wall_offset(wall_offset_ms)

    # -- record changes and user events (services/) ------------------------------

    def collect_changes(self) -> None:
        """From now on, keep every record change for `take_changes` (the
        agent's watch streams read them; the simulator does not ask)."""
        if self.sync.replica.changes is None:
            self.sync.replica.changes = []
        if self._changes is None:
            self._changes = []

    def take_changes(self) -> list[RecordChange]:
        """The record changes since the last call, oldest first: (record,
        whether the key's previous version was visible, why)."""
        assert self._changes is not None, "take_changes without collect_changes"
        if self.sync.replica.changes:
            self._take_replica_changes()
        taken, self._changes = self._changes, []
        return taken

    def deliver_events(self, delivered: dict[bytes, int], now: float) -> EventLedger:
        """Deliver user events on this node from now on (`UserEventReceived`
        events in the output; see services/delivery.py), starting from the
        ledger a previous run persisted (key -> wall ms)."""
        if self.sync.replica.changes is None:
            self.sync.replica.changes = []
        return self.services.deliver_events(delivered, now)

    def _take_replica_changes(self) -> None:
        changes = self.sync.replica.changes
        assert changes is not None
        self.services.records_changed(changes)
        if self._changes is not None:
            self._changes.extend(changes)
        changes.clear()

    def clock_offset_ms(self, now: float) -> int | None:
        """This node's clock offset from its peers, once measured."""
        return self.swim.clock_offset_ms(now)

    def read(self, key: bytes) -> Record | None:
        """The local record of `key` (a tombstone if it was deleted)."""
        return self.sync.replica.get(key)

    def members(self) -> list[MemberView]:
        """This node's view of the cluster."""
        return self.swim.members()

    def state_of(self, name: str) -> MemberState | None:
        """What this node's view holds of member `name` (None: unknown).

        The simulator's checks ask this of every node after every step, so it
        costs a lookup, not a snapshot (node/status.py has the full one)."""
        m = self.swim.table.get(name)
        return None if m is None else m.state

    def peers_up(self) -> list[str]:
        """The other members this node counts as up (alive or suspect)."""
        return list(self.swim.table.live.items())

    def identity_of(self, name: str) -> NodeIdentity | None:
        """Member `name`'s identity as this node's view holds it."""
        m = self.swim.table.get(name)
        return None if m is None else m.ident

    def name_of(self, node_id: bytes) -> str | None:
        """The name of the member with `node_id` (a scan: for the API); for
        a kv record owned by a session of the metadata log, the member it
        was opened on (the application's machine: the broker example judges
        a broker by its member's health)."""
        name = self.swim.table.name_of(node_id)
        if name is None and self.meta is not None:
            session = self.meta.state.sessions.get(node_id)
            name = None if session is None else session.node or None
        return name

    def peers_up_count(self) -> int:
        """len(peers_up()), without building the list."""
        return len(self.swim.table.live)

    def counters(self) -> dict[str, int]:
        """Every core's counters, prefixed by core."""
        out = {f"swim_{k}": v for k, v in self.swim.counters.as_dict().items()}
        out.update({f"sync_{k}": v for k, v in self.sync.counters.as_dict().items()})
        out.update({f"store_{k}": v for k, v in self.sync.replica.counters.as_dict().items()})
        out.update({f"election_{k}": v for k, v in self.election.counters.as_dict().items()})
        out["node_level_probes_received"] = self.level_probes_received
        if self.meta is not None:
            out.update({f"meta_{k}": v for k, v in self.meta.counters.as_dict().items()})
        if self.services.events is not None:
            out.update({f"events_{k}": v
                        for k, v in self.services.events.counters.as_dict().items()})  # fmt: skip
        return out

    def _view(self) -> Iterator[ViewMember]:
        # A generator: the election's scans often stop after a few rows.
        liveness = _LIVENESS
        return (ViewMember(m.ident.name, m.ident.tags, liveness[m.state], m.ident.node_id)
                for m in self.swim.table.members.values())  # fmt: skip

    def _heeding_strangers(self, handler: Handler) -> Handler:
        """`handler`, after a sync with the sender when the candidate or
        controller it names is not live in our view (unknown, left, dead):
        each side misses what the other knows. An agent restarted with no
        one to join hears from the controller only so (a vote request to
        the voters, with the change that removes it), and the controller
        holds it as left, a member nobody contacts again; without the sync
        they stay apart. As for a probe from a stranger (at most one sync
        per probe interval: membership/exchange.py)."""

        def route(message: Any, sender: Address, now: float) -> None:
            name = message.holder if type(message) is ControllerNotice else message.candidate
            if name != self.swim.ident.name and self._liveness_of(name) is not Liveness.LIVE:
                self.swim.exchange.sync_with_stranger(name, sender, now)
            handler(message, sender, now)

        return route

    def _addr_of(self, name: str) -> Address | None:
        m = self.swim.table.members.get(name)
        return None if m is None else m.ident.addr

    def _liveness_of(self, name: str) -> Liveness | None:
        m = self.swim.table.members.get(name)
        return None if m is None else _LIVENESS[m.state]

    def _sample_peers(self, rng: random.Random, k: int) -> list[Address]:
        """Up to `k` random alive members (not suspect: a write pushed to,
        or a session opened with, a member cut off by a partition is lost)."""
        table = self.swim.table
        if self.swim.leaving:
            return []
        members = table.members
        names = table.live.sample(rng, k)
        alive = [n for n in names if members[n].state is MemberState.ALIVE]
        if len(alive) < len(names):  # a suspect was drawn: draw among the alive only
            pool = [n for n in table.live.items() if members[n].state is MemberState.ALIVE]
            alive = rng.sample(pool, min(k, len(pool)))
        return [members[name].ident.addr for name in alive]
