"""LeaseElection: one controller at a time, by a lease from a majority of voters.

Theory of operation (compare Kafka's ZooKeeper-based controller: an
ephemeral znode plus `controller_epoch`; and Gray & Cheriton's leases).

**Voters** (`election.voters.VoterConfig`) grant leases. A voter grants at
most one unexpired lease at a time, and never for an epoch at or below the
highest it has granted; it persists that epoch (synced, through `Output.
persist`) before its grant leaves the node. A grant binds the voter for
`lease_s * (1 + drift)` on its own clock from when the request *arrived*.

**A candidate** sends `LeaseRequest(epoch)` to every voter, with an epoch
above any it has seen. It is controller once a majority has granted, until
`lease_s * (1 - drift)` on its own clock from when it *sent* the request.
With clock rates within `drift_ratio_max` of real time, every grant of the
majority outlasts the controller's lease in real time, and any two
majorities share a voter, so two leases never overlap: **safety depends on
the drift bound only, not on failure detection or message timing.** Each
voter's granted epochs only grow and majorities intersect, so every new
controller has a larger epoch than every earlier one: the epoch is a
fencing token.

**Renewal**: the controller re-sends the request (same epoch) every
`renew_interval_s`; voters extend a grant to the same holder and epoch.
A renewal without a majority is tried again at once; one that has its
majority still asks the voters that have not answered again, until the
next, so that no voter's grant runs out under a live controller. If a
majority does not answer before the lease ends, the controller stops
being controller (`ControllerLost("expired")`) even if it is healthy.

**Who stands**: the best-ranked eligible voter (priority tag, then name);
rank k waits `k * rank_backoff_s` after the last lease it knows of ends, so
elections do not duel. A healthy controller keeps its lease. A graceful
leave releases the lease (`LeaseRelease`), so a successor stands at once.

**Voter changes** go through the controller, one voter at a time: the
renewal carries the next configuration, and the change takes effect when a
majority of the old *and* of the new voters have granted it. Voters refuse
candidates with an older configuration and send them the newer one. Voters
adopt a configuration on sight (as Raft servers use the newest one in their
log); single-step changes keep any two in use intersecting.

**Bootstrap**: with no configuration, the best-ranked eligible member
proposes one once it sees `bootstrap_expect` eligible members and its view
has been still for `bootstrap_settle_s`. Two clusters bootstrapped apart
have different lineages; when they meet, the smaller lineage adopts the
larger's configuration, its controller steps down, and its members join
as voters (keeping any grant they hold until it expires, and making the
next controller's epoch exceed everything either side used).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable
from typing import Any

import msgspec
import msgspec.structs

from shoal.election.config import LeaseConfig
from shoal.election.events import (
    ControllerChanged,
    ControllerElected,
    ControllerLost,
    PersistElection,
    VotersChanged,
)
from shoal.election.messages import (
    REJECT_CONFIG,
    REJECT_EPOCH,
    REJECT_HELD,
    REJECT_NOT_VOTER,
    ControllerNotice,
    LeaseGrant,
    LeaseReject,
    LeaseRelease,
    LeaseRequest,
)
from shoal.election.voters import VoterConfig, eligible, rank_key
from shoal.kernel.contract import Address, Output, Send
from shoal.kernel.counters import Counters
from shoal.kernel.outbox import Outbox
from shoal.membership.member import Tags

# (name, tags, state) for every member this node knows, itself included;
# state is "alive", "suspect", "dead" or "left".
# An iterable, read once per call: a generator lets a scan stop early.
ViewFn = Callable[[], Iterable[tuple[str, Tags, str]]]
_LIVE = ("alive", "suspect")
# A controller removes voters that vanished from its view (reaped) only
# after holding the lease this long, so that a fresh controller whose view
# is still filling up does not remove voters it has not heard of yet.
_REAPED_GUARD_S = 60.0
# A campaign re-asks a voter whose grant to someone else ends within this.
_RETRY_HELD_S = 0.5
# A new controller's notice goes out this many more times, `_NOTICE_GAP_S`
# apart, before the slow `notice_interval_s` pace: notices are not
# acknowledged, and one lost would leave a member without a controller (and
# `shoal controller` without an answer) until the next. With 1 % loss and
# notices 5 s apart the simulator showed 2 % of failovers taking 6.5 s
# instead of 2 s. The gap was one renewal interval; at 1 s that made a lost
# first notice cost 1 s (kill -9 at 3 % loss, 300 seeds: all survivors knew
# the successor in p99 2.98 s, max 3.03 s); at 0.25 s, p99 2.25 s, max 2.40 s.
_NOTICE_REPEATS = 2
_NOTICE_GAP_S = 0.25
# A request is sent again, once, to the voters that have not answered by this
# fraction of its timeout: one lost datagram (or answer) then costs a
# fraction of the timeout, not a failed campaign and a back-off.
_RESEND_AFTER = 0.5
# States in which a member is gone: no late resends to such a voter (see
# `_resend_late`), and a controller in one is forgotten (`view_changed`).
_GONE = ("dead", "left")
AddrFn = Callable[[str], Address | None]
# The state of one member by name ("alive", "suspect", "dead", "left"), or
# None for a member this node does not know: one lookup, not a scan.
StateFn = Callable[[str], str | None]


class ElectionCounters(Counters):
    """What the election did, for metrics."""

    campaigns: int = 0
    elected: int = 0
    renewals: int = 0
    renewals_failed: int = 0
    grants: int = 0
    rejects: int = 0
    voter_changes: int = 0
    stale_messages: int = 0
    resends: int = 0  # requests asked again of voters that had not answered


class _Grant(msgspec.Struct):
    holder: str
    epoch: int
    until_at: float


class _Request(msgspec.Struct):
    seq: int
    epoch: int
    config: VoterConfig
    old: VoterConfig | None  # set when the request changes the voters
    sent_at: float
    deadline_at: float
    renewal: bool
    resend_at: float  # ask the voters that have not answered again, once
    extended: bool = False  # the deadline was moved once (`_wait_longer`)
    granted: set[str] = msgspec.field(default_factory=set)
    answered: set[str] = msgspec.field(default_factory=set)
    retry_at: dict[str, float] = msgspec.field(default_factory=dict)  # voter -> ask again


class LeaseElection:
    """The election core of one node (see the module docstring)."""

    def __init__(
        self,
        name: str,
        config: LeaseConfig,
        rng: random.Random,
        view: ViewFn,
        addr_of: AddrFn,
        granted_epoch: int = 0,
        voters: VoterConfig | None = None,
        bootstrap_expect: int = 3,
        state_of: StateFn | None = None,
    ) -> None:
        """Create the core from what a previous run persisted.

        Args:
            name: this node's name.
            config: timing.
            rng: the core's only randomness.
            view: the members this node knows (see `ViewFn`).
            addr_of: the gossip address of a member, by name.
            granted_epoch: the highest epoch this node ever granted.
            voters: the voter configuration it last adopted.
            bootstrap_expect: eligible members to wait for before the first
                configuration is formed.
            state_of: one member's state (see `StateFn`); without it, a
                member keeps a controller its view reports dead until the
                notices stop.
        """
        self.name = name
        self.config = config
        self.rng = rng
        self.counters = ElectionCounters()
        self.granted_epoch = granted_epoch
        self.voters = voters
        self.bootstrap_expect = bootstrap_expect
        self.epoch_known = granted_epoch
        self.lease_epoch: int | None = None  # set while this node is controller
        self.lease_end_at = 0.0
        self.elected_at = 0.0
        self.known: tuple[str, int] | None = None  # the controller we know of
        self.known_until = 0.0
        self._view, self._addr_of, self._state_of = view, addr_of, state_of
        self._grant: _Grant | None = None
        self._request: _Request | None = None
        # A renewal that won its majority, kept until the next one so that a
        # voter whose copy was lost is asked again (see `_resend_late`).
        self._late: _Request | None = None
        self._seq = rng.getrandbits(32)
        self._blocked_until = 0.0
        self._stand_at: float | None = None
        self._renew_at = 0.0
        self._notice_at = 0.0
        self._notices_left = 0  # fast repeats of a new controller's notice
        # Live members the controller has sent a notice to in this lease
        # (see `_notify`), and whether the view changed since it looked.
        self._told: set[str] = set()
        self._view_dirty = False
        self._view_changed_at = 0.0
        self._fresh_epoch = False
        self._leaving = False
        self._now_hint = 0.0
        self._released_by = ""
        # The configuration of our last request that won its quorum.
        self._quorum_config: VoterConfig | None = None
        self._wake_at: float | None = None
        # Every election message rides on the write it depends on, or on a
        # barrier after the last one (Outbox.send_durable): a grant, a
        # candidate's request and a notice all speak for the epoch state.
        self.out = Outbox()
        self._events = self.out.events
        self.handlers: dict[type, Callable[[Any, Address, float], None]] = {
            LeaseRequest: self._on_request,
            LeaseGrant: self._on_grant,
            LeaseReject: self._on_reject,
            LeaseRelease: self._on_release,
            ControllerNotice: self._on_notice,
        }

    # -- the core contract ---------------------------------------------------------

    @property
    def is_controller(self) -> bool:
        """Whether this node holds the lease."""
        return self.lease_epoch is not None

    def start(self, now: float) -> None:
        """Begin: look for a configuration or a controller.

        A voter that granted before does not know whether that grant is
        still running (grants are not persisted, only the epoch is), so it
        grants nothing until any grant it could have made has expired.
        """
        self._view_changed_at = now
        self._wake_at = now
        if self.granted_epoch > 0:
            self._grant = _Grant("", self.granted_epoch, now + self.config.voter_grant_s)

    def receive(self, message: Any, sender: Address, now: float) -> None:
        """Handle one decoded election message."""
        self.handlers[type(message)](message, sender, now)

    def tick(self, now: float) -> None:
        """Do whatever is due at `now`."""
        if self._wake_at is not None and now >= self._wake_at:
            self._evaluate(now)

    def next_deadline(self) -> float | None:
        """When `tick` should next be called."""
        return self._wake_at

    def drain(self) -> Output:
        """Persist items (carrying the messages they release) and events
        since the last drain."""
        return self.out.drain()

    def stream_failed(self, peer: Address, now: float) -> None:
        """Election uses datagrams only."""

    # -- commands and inputs from the node -----------------------------------------

    def view_changed(self, now: float) -> None:
        """Membership changed. Only bootstrap waits on the view (until it has
        been still for `bootstrap_settle_s`); the rest runs on its timers.

        A controller tells the members it has not told yet at its next
        renewal. A member forgets a controller its view reports dead or
        left: it would otherwise list it until the notices stop (up to
        `notice_interval_s + lease_s`) when no successor takes over.
        """
        self._view_changed_at = now
        self._view_dirty = True
        known = self.known
        if known is not None and known[0] != self.name and self._state_of is not None:
            if self._state_of(known[0]) in _GONE:
                self._set_known(None, known[1])
        if self.voters is None:
            at = now + self.config.bootstrap_settle_s
            if self._wake_at is None or at < self._wake_at:
                self._wake_at = at

    def leave(self, now: float) -> None:
        """Stop standing; as controller, release the lease to the voters.

        A request in flight (a campaign, or a controller's renewal) is dropped
        first, so that grants still on their way are stale when they arrive:
        otherwise a renewal granted just before the voters saw our release
        would make us controller again, next to the successor they elect
        once released (the simulator's swarm found this). Its grants are
        released too, so nobody waits for them to run out.
        """
        self._leaving = True
        req, self._request = self._request, None
        late, self._late = self._late, None
        releases: dict[int, set[str]] = {}
        if self.lease_epoch is not None and self.voters is not None:
            releases[self.lease_epoch] = set(self.voters.voters)
        for r in (req, late):
            if r is not None:
                asked = releases.setdefault(r.epoch, set())
                asked.update(self._targets(r))
        for epoch, voters in releases.items():
            for voter in sorted(voters):
                if voter == self.name:
                    self._on_release(LeaseRelease(epoch, self.name), ("", 0), now)
                else:
                    self._send_to(voter, LeaseRelease(epoch, self.name))
        if self.lease_epoch is not None:
            self._lose(now, "released")

    def rejoin(self, now: float) -> None:
        """Stand again after a leave (a `join` after `leave`)."""
        self._leaving = False
        self._wake(now)

    def remove_voter(self, name: str, now: float) -> bool:
        """As controller, start removing `name` from the voters (force-leave).
        Returns False when this node is not the controller or a change runs."""
        if not self.is_controller or self.voters is None or name not in self.voters.voters:
            return False
        if self._request is not None or len(self.voters.voters) == 1:
            return False
        if self.voters != self._quorum_config:
            return False  # a change is still in flight
        self._renew(now, self.voters.without_voter(name))
        return True

    # -- evaluation (timers) ---------------------------------------------------------

    def _evaluate(self, now: float) -> None:
        self._wake_at = None
        if self.lease_epoch is not None and now >= self.lease_end_at:
            self._lose(now, "expired")
        req = self._request
        if req is not None and now >= req.deadline_at and not self._wait_longer(req, now):
            self._request_failed(req, now)
        elif req is not None:
            msg = LeaseRequest(req.seq, req.epoch, self.name, req.config)
            if now >= req.resend_at:
                req.resend_at = float("inf")
                for voter in self._targets(req):
                    if voter not in req.answered and voter not in req.retry_at:
                        self.counters.resends += 1
                        self._send_to(voter, msg)
            for voter, at in list(req.retry_at.items()):
                if now >= at:
                    del req.retry_at[voter]
                    req.answered.discard(voter)  # the resend covers the retry too
                    resend_at = now + self.config.request_timeout_s * _RESEND_AFTER
                    req.resend_at = min(req.resend_at, resend_at)
                    self._send_to(voter, msg)
        if self._late is not None and now >= self._late.resend_at:
            self._resend_late(self._late, now)
        if self.known is not None and now >= self.known_until and not self.is_controller:
            self._set_known(None, self.known[1])
        if self.is_controller:
            self._controller_duties(now)
        elif self._request is None and not self._leaving:
            if self.voters is None:
                self._maybe_bootstrap(now)
            else:
                self._maybe_stand(now)
        self._schedule(now)

    def _schedule(self, now: float) -> None:
        times = []
        if self.is_controller:
            times += [self.lease_end_at, self._renew_at, self._notice_at]
        if self._request is not None:
            times += [self._request.deadline_at, self._request.resend_at]
            times += self._request.retry_at.values()
        if self._late is not None:
            times.append(self._late.resend_at)
        if self._stand_at is not None:
            times.append(self._stand_at)
        if not self.is_controller and self.voters is not None and not self._leaving:
            # Look again when what blocks us ends, and at least once per lease
            # (a safety net: liveness never hangs on one lost message).
            times += [self._blocked_until, now + self.config.lease_s]
        if self.known is not None and not self.is_controller:
            times.append(self.known_until)
        if self.voters is None and not self._leaving:
            times.append(self._view_changed_at + self.config.bootstrap_settle_s)
        grant = self._grant
        if grant is not None and grant.until_at > now:
            times.append(grant.until_at)
        future = [t for t in times if t > now]
        soonest = min(future) if future else None
        if soonest is not None and (self._wake_at is None or soonest < self._wake_at):
            self._wake_at = soonest

    def _wake(self, now: float) -> None:
        self._wake_at = now

    def _maybe_bootstrap(self, now: float) -> None:
        if now < self._view_changed_at + self.config.bootstrap_settle_s:
            return
        members = self._candidates_if_first()
        if len(members) < self.bootstrap_expect:
            return
        chosen = tuple(sorted(members[: self.config.max_voters]))
        config = VoterConfig(self.rng.randbytes(8), 1, chosen)
        self._campaign(now, config)

    def _maybe_stand(self, now: float) -> None:
        voters = self.voters
        assert voters is not None
        if self.name not in voters.voters or not self._self_eligible():
            self._stand_at = None
            return
        grant = self._grant
        blocked = self._blocked_until
        if grant is not None and grant.holder != self.name:
            blocked = max(blocked, grant.until_at)  # our own grant is the real bound
        elif grant is None and self.known is not None and self.known[0] != self.name:
            blocked = max(blocked, self.known_until)
        if blocked > now:
            self._stand_at = None
            return
        if self._stand_at is None:
            # The holder whose grant ran out without renewal, or who released
            # it, is not a candidate: it is gone or leaving.
            gone = {self._released_by, grant.holder if grant is not None else ""}
            ranked = [n for n in self._candidates() if n in voters.voters and n not in gone]
            rank = ranked.index(self.name) if self.name in ranked else len(ranked)
            delay = rank * self.config.rank_backoff_s + self.rng.uniform(0, 0.01)
            self._stand_at = max(now, blocked) + delay
        if now >= self._stand_at:
            self._stand_at = None
            self._campaign(now, voters)

    def _controller_duties(self, now: float) -> None:
        self._now_hint = now
        if self._request is None and now >= self._renew_at:
            if self._view_dirty:
                self._notify(now, everyone=False)  # members not told yet
            if self.voters != self._quorum_config and self._quorum_config is not None:
                # Finish the change in flight (ours, or one adopted on sight)
                # before any other: two uncommitted steps could make
                # majorities that do not intersect.
                self._renew(now, self.voters, old=self._quorum_config)
            else:
                self._renew(now, self._next_config())
        if now >= self._notice_at:
            self._notify_all(now)
        if self.config.preempt and self._request is None:
            best = [n for n in self._candidates() if self.voters and n in self.voters.voters]
            if best and best[0] != self.name:
                self.leave(now)
                self._leaving = False

    def _next_config(self) -> VoterConfig | None:
        """One voter change the controller should make now, if any."""
        voters = self.voters
        assert voters is not None
        states = {name: state for name, _, state in self._view()}
        settled = self._now_hint - self.elected_at >= _REAPED_GUARD_S
        for name in voters.voters:
            gone = name not in states and settled
            if name != self.name and (states.get(name) == "left" or gone):
                return voters.without_voter(name)
        if len(voters.voters) < self.config.max_voters:
            for name in self._candidates():
                if name not in voters.voters:
                    return voters.with_voter(name)
        return None

    # -- sending requests --------------------------------------------------------------

    def _campaign(self, now: float, config: VoterConfig) -> None:
        self.counters.campaigns += 1
        epoch = max(self.epoch_known, self.granted_epoch) + 1
        self._issue(now, epoch, config, None, renewal=False)

    def _renew(self, now: float, change: VoterConfig | None,
               old: VoterConfig | None = None) -> None:  # fmt: skip
        assert self.lease_epoch is not None and self.voters is not None
        self.counters.renewals += 1
        self._renew_at = now + self.config.renew_interval_s
        epoch = self.lease_epoch
        if self._fresh_epoch:  # a voter is past our epoch (after a merge): move above it
            epoch = max(self.epoch_known, self.granted_epoch) + 1
            self._fresh_epoch = False
        if change is not None:
            self._issue(now, epoch, change, old or self.voters, renewal=True)
        else:
            self._issue(now, epoch, self.voters, None, renewal=True)

    def _issue(self, now: float, epoch: int, config: VoterConfig, old: VoterConfig | None,
               renewal: bool) -> None:  # fmt: skip
        self._seq += 1
        self._late = None  # the new request asks every voter
        timeout = self.config.request_timeout_s
        req = _Request(self._seq, epoch, config, old, now, now + timeout, renewal,
                       now + timeout * _RESEND_AFTER)  # fmt: skip
        self._request = req
        msg = LeaseRequest(req.seq, epoch, self.name, config)
        for voter in self._targets(req):
            if voter == self.name:
                self._answer(self._vote(msg, now), ("", 0), now)
            else:
                self._send_to(voter, msg)

    def _resend_late(self, late: _Request, now: float) -> None:
        """Ask a voter that has not answered a won renewal again, every
        `request_timeout_s * _RESEND_AFTER`, until the next renewal.

        A voter's grant runs `voter_grant_s` (2.04 s) from the request's
        arrival; with renewals 1 s apart a voter that misses one and is not
        asked again may see its grant end before the next one arrives, and
        then it stands: a new epoch for nothing. The simulator (5 nodes,
        20 runs of 600 s) counted new epochs with the
        controller alive: at 3 % loss 27 without these resends, 2 with the
        old 0.6 s renewals, 0 with them; at 10 % loss 421, 26 and 0. A lost
        copy costs one more datagram; a healthy cluster sends none. Voters
        the view reports dead or left are not asked again."""
        step = self.config.request_timeout_s * _RESEND_AFTER
        for voter in self._targets(late):
            if voter in late.answered or voter == self.name:
                continue
            if self._state_of is not None and self._state_of(voter) in _GONE:
                continue
            self.counters.resends += 1
            self._send_to(voter, LeaseRequest(late.seq, late.epoch, self.name, late.config))
        late.resend_at = now + step
        if late.resend_at >= self._renew_at:
            self._late = None  # the next renewal asks everyone

    def _wait_longer(self, req: _Request, now: float) -> bool:
        """Give an uncontested campaign more time, once: until there is just
        time left for one renewal within the lease it would win.

        Every grant waits for an fsync, the candidate's own and then the
        voter's: on a slow disk the answers come after `request_timeout_s`
        but are not refusals. Failing there would release the grants, back
        off and fail again the same way. Only a campaign that nobody has
        refused waits; the lease still counts from sending, so winning late
        is safe (it only shortens the first term)."""
        if req.renewal or req.extended or not req.answered <= req.granted:
            return False
        until = req.sent_at + self.config.holder_lease_s - self.config.request_timeout_s
        if until <= now:
            return False
        req.extended = True
        req.deadline_at = until
        req.resend_at = now  # and ask the silent voters once more (below)
        return True

    @staticmethod
    def _targets(req: _Request) -> list[str]:
        """The voters a request asks: of its configuration, and of the old one."""
        return sorted(set(req.config.voters) | set(req.old.voters if req.old else ()))

    # -- voter ----------------------------------------------------------------------------

    def _on_request(self, msg: LeaseRequest, sender: Address, now: float) -> None:
        self.out.send_durable(Send(sender, (self._vote(msg, now),)))

    def _vote(self, msg: LeaseRequest, now: float) -> LeaseGrant | LeaseReject:
        """The voter's rule (module docstring); persists before granting."""
        mine = self.voters
        if mine != msg.config:
            if msg.config.supersedes(mine):
                self._adopt(msg.config, now)
            else:
                return self._reject(msg, REJECT_CONFIG, now)
        if self.name not in msg.config.voters:
            return self._reject(msg, REJECT_NOT_VOTER, now)
        grant = self._grant
        yielded_epoch = 0
        if grant is not None and grant.holder == self.name and self._outranked_by(msg.candidate):
            # We are campaigning too, and a better candidate asks: give up our
            # campaign (never claimed, so safe to drop) instead of duelling.
            req = self._request
            assert req is not None
            yielded_epoch = req.epoch
            self._request_failed(req, now)
            grant = self._grant
        if grant is not None and grant.holder != msg.candidate and now < grant.until_at:
            if grant.holder != self.name and self._ranks_above_me(msg.candidate):
                # A better candidate will ask again when this grant ends: do
                # not stand against it meanwhile.
                hold_off = grant.until_at + 2 * self.config.request_timeout_s
                self._blocked_until = max(self._blocked_until, hold_off)
            return self._reject(msg, REJECT_HELD, now)
        self.epoch_known = max(self.epoch_known, msg.epoch)
        if grant is not None and grant.holder == msg.candidate and grant.epoch == msg.epoch:
            grant.until_at = now + self.config.voter_grant_s  # a renewal
            self._refresh_known(msg.candidate, msg.epoch, now)
            return LeaseGrant(msg.seq, msg.epoch, self.name)
        if msg.epoch <= self.granted_epoch and not (msg.epoch == yielded_epoch > 0):
            # (The epoch of a campaign we just abandoned was never claimed and
            # never will be: the candidate we yielded to may take it.)
            return self._reject(msg, REJECT_EPOCH, now)
        self.granted_epoch = msg.epoch
        self._grant = _Grant(msg.candidate, msg.epoch, now + self.config.voter_grant_s)
        self.out.persist(PersistElection(self.granted_epoch, self.voters))
        self.counters.grants += 1
        self._stand_at = None
        self._wake(now)
        return LeaseGrant(msg.seq, msg.epoch, self.name)

    def _outranked_by(self, candidate: str) -> bool:
        """Whether our campaign in flight should yield to `candidate`."""
        req = self._request
        if req is None or req.renewal or self.is_controller:
            return False
        return self._ranks_above_me(candidate)

    def _ranks_above_me(self, candidate: str) -> bool:
        if candidate == self.name:
            return False
        ranked = self._candidates()
        if candidate not in ranked or self.name not in ranked:
            return False
        return ranked.index(candidate) < ranked.index(self.name)

    def _reject(self, msg: LeaseRequest, reason: int, now: float) -> LeaseReject:
        grant = self._grant
        holder, remaining_ms = "", 0
        if grant is not None and now < grant.until_at:
            holder, remaining_ms = grant.holder, int((grant.until_at - now) * 1000)
        return LeaseReject(msg.seq, self.name, reason, self.granted_epoch, holder, remaining_ms,
                           self.voters)  # fmt: skip

    def _on_release(self, msg: LeaseRelease, sender: Address, now: float) -> None:
        grant = self._grant
        if grant is not None and grant.holder == msg.holder and grant.epoch == msg.epoch:
            self._grant = None
            if msg.holder != self.name:
                self._released_by = msg.holder  # leaving: not a candidate to rank
            self._blocked_until = 0.0
            if self.known is not None and self.known[0] == msg.holder:
                self._set_known(None, msg.epoch)
            self._wake(now)

    # -- candidate / controller -------------------------------------------------------

    def _on_grant(self, msg: LeaseGrant, sender: Address, now: float) -> None:
        self._answer(msg, sender, now)

    def _on_reject(self, msg: LeaseReject, sender: Address, now: float) -> None:
        self._answer(msg, sender, now)

    def _answer(self, msg: LeaseGrant | LeaseReject, sender: Address, now: float) -> None:
        req = self._request
        if req is None or msg.seq != req.seq:
            late = self._late
            if late is not None and msg.seq == late.seq:
                late.answered.add(msg.voter)  # no need to ask it again
                return
            self.counters.stale_messages += 1
            return
        req.answered.add(msg.voter)
        if isinstance(msg, LeaseGrant):
            req.granted.add(msg.voter)
            if req.config.has_quorum(req.granted) and (
                req.old is None or req.old.has_quorum(req.granted)
            ):
                self._request = None
                self._won(req, now)
            return
        self.counters.rejects += 1
        self.epoch_known = max(self.epoch_known, msg.granted_epoch)
        if msg.reason == REJECT_EPOCH and req.renewal:
            self._fresh_epoch = True
        if msg.holder and msg.holder != self.name:
            wait_s = msg.remaining_ms / 1000
            if msg.reason == REJECT_HELD and not req.renewal and wait_s <= _RETRY_HELD_S:
                # The old holder's grant runs out in a moment (grants end up to
                # 2 * drift * lease apart): ask this voter again then, instead
                # of failing and letting the next candidate duel with us.
                retry_at = now + wait_s + 0.005
                req.retry_at[msg.voter] = retry_at
                req.deadline_at = max(req.deadline_at, retry_at + self.config.request_timeout_s)
                if self._wake_at is None or retry_at < self._wake_at:
                    self._wake_at = retry_at
                return
            self._blocked_until = max(self._blocked_until, now + wait_s)
        if msg.config is not None and msg.config.supersedes(self.voters):
            self._adopt(msg.config, now)
            self._request_failed(req, now)

    def _won(self, req: _Request, now: float) -> None:
        if req.renewal:
            self._late = req
            if req.resend_at == float("inf"):  # already asked again once
                req.resend_at = now + self.config.request_timeout_s * _RESEND_AFTER
        self._quorum_config = req.config
        self.lease_end_at = req.sent_at + self.config.holder_lease_s
        self._renew_at = req.sent_at + self.config.renew_interval_s
        if req.old is not None:
            self.counters.voter_changes += 1
        if self.lease_epoch == req.epoch:
            self._wake(now)
            return
        self.lease_epoch = req.epoch
        self.elected_at = now
        self.counters.elected += 1
        self._events.append(ControllerElected(req.epoch))
        self._set_known((self.name, req.epoch), req.epoch)
        self.known_until = self.lease_end_at
        self._notices_left = _NOTICE_REPEATS
        self._notify_all(now)
        self._wake(now)

    def _request_failed(self, req: _Request, now: float) -> None:
        if self._request is req:
            self._request = None
        if req.renewal:
            # Try again at once while the lease lasts (`renew_interval_s`).
            self.counters.renewals_failed += 1
            self._renew_at = now
            self._wake(now)
            return
        # A campaign that missed its majority gives back what it got, so that
        # the voters are free for the next candidate at once.
        for voter in req.granted:
            if voter == self.name:
                self._on_release(LeaseRelease(req.epoch, self.name), ("", 0), now)
            else:
                self._send_to(voter, LeaseRelease(req.epoch, self.name))
        backoff = self.config.rank_backoff_s * (1 + self.rng.random() * 3)
        self._blocked_until = max(self._blocked_until, now + backoff)
        self._wake(now)

    def _lose(self, now: float, reason: str) -> None:
        epoch = self.lease_epoch
        assert epoch is not None
        self.lease_epoch = None
        self._late = None
        self._events.append(ControllerLost(epoch, reason))
        self._set_known(None, epoch)
        self._wake(now)

    def _notify_all(self, now: float) -> None:
        if self._notices_left > 0:
            self._notices_left -= 1
            self._notice_at = now + _NOTICE_GAP_S
        else:
            self._notice_at = now + self.config.notice_interval_s
        self._notify(now, everyone=True)

    def _notify(self, now: float, everyone: bool) -> None:
        """Tell every live member who the controller is, or (not `everyone`)
        only those not told in this lease."""
        assert self.lease_epoch is not None and self.voters is not None
        self._view_dirty = False
        remaining_ms = int(max(0.0, self.lease_end_at - now) * 1000)
        notice = ControllerNotice(self.lease_epoch, self.name, remaining_ms, self.voters)
        told, live = self._told, set()
        for name, _, state in self._view():
            if state in _LIVE and name != self.name:
                live.add(name)
                if everyone or name not in told:
                    self._send_to(name, notice)
        self._told = live  # a member that dies and comes back is told again

    def _on_notice(self, msg: ControllerNotice, sender: Address, now: float) -> None:
        if msg.config.supersedes(self.voters):
            self._adopt(msg.config, now)
        elif msg.config != self.voters:
            return  # a notice from the lineage or configuration we left behind
        self.epoch_known = max(self.epoch_known, msg.epoch)
        if msg.holder == self.name:
            return
        if self.known is not None and self.known[1] > msg.epoch:
            self.counters.stale_messages += 1
            return
        until = now + msg.remaining_ms / 1000 + self.config.lease_s
        self._set_known((msg.holder, msg.epoch), msg.epoch)
        self.known_until = max(until, now + self.config.notice_interval_s + self.config.lease_s)
        self._wake(now)

    # -- state changes --------------------------------------------------------------------

    def _adopt(self, config: VoterConfig, now: float) -> None:
        old = self.voters
        self.voters = config
        self.out.persist(PersistElection(self.granted_epoch, config))
        self._events.append(VotersChanged(config))
        if old is not None and old.lineage != config.lineage:
            self._fresh_epoch = True
            if self.lease_epoch is not None:
                self._lose(now, "merged")
        self._wake(now)

    def _refresh_known(self, holder: str, epoch: int, now: float) -> None:
        if self.known == (holder, epoch):
            self.known_until = now + self.config.voter_grant_s

    def _set_known(self, known: tuple[str, int] | None, epoch: int) -> None:
        if known is not None:
            self._released_by = ""  # a new controller: the last leaver is history
        if known != self.known:
            self.known = known
            self._events.append(ControllerChanged(known[0] if known else "", epoch))

    # -- helpers ---------------------------------------------------------------------------

    def _candidates(self) -> list[str]:
        """Alive eligible members (this node included), best-ranked first."""
        ranked = [(rank_key(name, tags), name) for name, tags, state in self._view()
                  if state in _LIVE and eligible(tags)]  # fmt: skip
        return [name for _, name in sorted(ranked)]

    def _candidates_if_first(self) -> list[str]:
        """`_candidates()` if this node ranks first among them, else [].

        Every node without a configuration asks this on each view change;
        the scan stops at the first better-ranked live member, so a formed
        cluster of N asks in about N·ln N steps, not N².
        """
        view = self._view
        mine = next((rank_key(n, t) for n, t, st in view()
                     if n == self.name and st in _LIVE and eligible(t)), None)  # fmt: skip
        if mine is None:
            return []
        for name, tags, state in view():
            if state in _LIVE and eligible(tags) and rank_key(name, tags) < mine:
                return []
        return self._candidates()

    def _self_eligible(self) -> bool:
        return any(name == self.name and eligible(tags) for name, tags, _ in self._view())

    def _send_to(self, name: str, msg: Any) -> None:
        addr = self._addr_of(name)
        if addr is not None:
            self.out.send_durable(Send(addr, (msg,)))
