"""LeaseElection: one controller at a time, by a lease from a majority of voters.

Theory of operation (compare Kafka's ZooKeeper-based controller: an
ephemeral znode plus `controller_epoch`; and Gray & Cheriton's leases).
This module is the façade: the timers and the transitions between the
roles, split as raft splits `stepLeader`/`stepCandidate`/`stepFollower`:

- `voter.py`: the grant rule, what a voter may promise and what must be
  durable first (the safety argument lives there);
- `campaign.py`: a candidate's or controller's requests, resends, late
  grants, won renewals;
- `ranking.py`: who should stand and who should vote;
- `notices.py`: how every member learns who the controller is;
- `voters.py`: the voter configuration and its majorities; `view.py`: the
  membership view as the election reads it.

**States.** A node is a *follower* (it knows of a controller, `known`, or
none), a *candidate* (a campaign in flight), or the *controller* (it holds
`lease_epoch` until `lease_end_at`). Transitions:

- follower → candidate: `_maybe_stand`, once nothing blocks it (a grant it
  holds, a controller it knows of, a back-off) and its rank's wait is over;
  or `_maybe_bootstrap` with no configuration yet.
- candidate → controller: `_become_controller`, on a majority. The lease
  counts `lease_s * (1 - drift)` from when the request was *sent*.
- candidate → follower: `_request_failed` releases what it got and backs
  off, or the campaign yields to a better candidate (`yield_campaign`).
- controller → controller: renewal every `renew_interval_s` (same epoch),
  tried again at once when it misses its majority; a renewal carries at
  most one voter change (`voters.py`), finished before the next starts.
- controller → follower: `_become_follower` when the lease ends unrenewed
  (`expired`), on a graceful `leave` (`released`), or when a larger lineage
  is adopted (`merged`).

**Durability.** Every election message rides on the write it depends on,
or on a barrier after the last one (`Outbox.send_durable`): a grant, a
candidate's request and a notice all speak for the epoch state.

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

from shoal.election.campaign import Campaign, Request
from shoal.election.config import LeaseConfig
from shoal.election.events import (
    ControllerChanged,
    ControllerElected,
    ControllerLost,
    ElectionCounters,
    PersistElection,
    VotersChanged,
)
from shoal.election.messages import (
    REJECT_EPOCH,
    ControllerNotice,
    LeaseGrant,
    LeaseReject,
    LeaseRelease,
    LeaseRequest,
)
from shoal.election.notices import Notices
from shoal.election.ranking import Ranking, Standing
from shoal.election.view import AddrFn, Liveness, LivenessFn, ViewFn
from shoal.election.voter import Voter
from shoal.election.voters import VoterConfig
from shoal.kernel.contract import Address, Output, Send
from shoal.kernel.outbox import Outbox

# A controller removes voters that vanished from its view (reaped) only
# after holding the lease this long, so that a fresh controller whose view
# is still filling up does not remove voters it has not heard of yet.
_REAPED_GUARD_S = 60.0
_LIVE = Liveness.LIVE
_SELF: Address = ("", 0)  # the sender of this node's answers to itself


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
        liveness_of: LivenessFn | None = None,
    ) -> None:
        """Create the core from what a previous run persisted.

        Args:
            name: this node's name.
            config: timing.
            rng: the core's only randomness.
            view: the members this node knows (see `view.ViewFn`).
            addr_of: the gossip address of a member, by name.
            granted_epoch: the highest epoch this node ever granted.
            voters: the voter configuration it last adopted.
            bootstrap_expect: eligible members to wait for before the first
                configuration is formed.
            liveness_of: one member's liveness; without it, a member keeps a
                controller its view reports dead until the notices stop.
        """
        self.name, self.config, self.rng = name, config, rng
        self.counters = ElectionCounters()
        self.voters = voters
        self.bootstrap_expect = bootstrap_expect
        self.epoch_known = granted_epoch
        self.lease_epoch: int | None = None  # set while this node is controller
        self.lease_end_at = self.elected_at = 0.0
        self.known: tuple[str, int] | None = None  # the controller we know of
        self.known_until = 0.0
        self._addr_of, self._liveness_of = addr_of, liveness_of
        self.out = Outbox()  # every message rides on a write or a barrier (module docstring)
        self.voter = Voter(name, config, self.out, self.counters, granted_epoch, self)
        self.campaign = Campaign(name, config, self.counters, rng.getrandbits(32),
                                 self._send_to, liveness_of)  # fmt: skip
        self.ranking = Ranking(name, view)
        self.notices = Notices(name, config.notice_interval_s, view, self._send_to)
        self.standing = Standing(self.ranking, config.rank_backoff_s, rng)
        self._renew_at = self._view_changed_at = 0.0
        self._fresh_epoch = False  # the next renewal moves to a new epoch
        self._leaving = False
        self._quorum_config: VoterConfig | None = None  # of our last request that won
        self._wake_at: float | None = None
        self.handlers: dict[type, Callable[[Any, Address, float], None]] = {
            LeaseRequest: self.voter.on_request,
            LeaseGrant: self._on_answer,
            LeaseReject: self._on_answer,
            LeaseRelease: self._on_release,
            ControllerNotice: self._on_notice,
        }

    @property
    def is_controller(self) -> bool:
        """Whether this node holds the lease."""
        return self.lease_epoch is not None

    @property
    def granted_epoch(self) -> int:
        """The highest epoch this node ever granted."""
        return self.voter.granted_epoch

    # -- the core contract ---------------------------------------------------------

    def start(self, now: float) -> None:
        """Begin: look for a configuration or a controller (a voter that
        granted before waits out any grant it may have running)."""
        self._view_changed_at = now
        self._wake_at = now
        self.voter.restart(now)

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
        self.notices.view_changed()
        known = self.known
        if known is not None and known[0] != self.name and self._liveness_of is not None:
            liveness = self._liveness_of(known[0])
            if liveness is not None and liveness is not _LIVE:
                self._set_known(None, known[1])
        if self.voters is None:
            self._wake_by(now + self.config.bootstrap_settle_s)

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
        dropped = self.campaign.drop()
        releases: dict[int, set[str]] = {}
        if self.lease_epoch is not None and self.voters is not None:
            releases[self.lease_epoch] = set(self.voters.voters)
        for r in dropped:
            releases.setdefault(r.epoch, set()).update(r.targets())
        for epoch, voters in releases.items():
            self._release(epoch, sorted(voters), now)
        if self.lease_epoch is not None:
            self._become_follower(now, "released")

    def rejoin(self, now: float) -> None:
        """Stand again after a leave (a `join` after `leave`)."""
        self._leaving = False
        self._wake(now)

    def remove_voter(self, name: str, now: float) -> bool:
        """As controller, start removing `name` from the voters (force-leave).
        Returns False when this node is not the controller or a change runs."""
        if not self.is_controller or self.voters is None or name not in self.voters.voters:
            return False
        if self.campaign.request is not None or len(self.voters.voters) == 1:
            return False
        if self.voters != self._quorum_config:
            return False  # a change is still in flight
        self._renew(now, self.voters.without_voter(name))
        return True

    # -- timers ----------------------------------------------------------------------

    def _evaluate(self, now: float) -> None:
        self._wake_at = None
        if self.lease_epoch is not None and now >= self.lease_end_at:
            self._become_follower(now, "expired")
        campaign = self.campaign
        req = campaign.request
        if req is not None:
            if campaign.timed_out(req, now):
                self._request_failed(req, now)
            else:
                campaign.resend_due(req, now)
        campaign.resend_late(now, self._renew_at)
        if self.known is not None and now >= self.known_until and not self.is_controller:
            self._set_known(None, self.known[1])
        if self.is_controller:
            self._controller_duties(now)
        elif campaign.request is None and not self._leaving:
            if self.voters is None:
                self._maybe_bootstrap(now)
            else:
                self._maybe_stand(now)
        self._schedule(now)

    def _schedule(self, now: float) -> None:
        times = list(self.campaign.deadlines())
        if self.is_controller:
            times += [self.lease_end_at, self._renew_at, self.notices.notice_at]
        if self.standing.stand_at is not None:
            times.append(self.standing.stand_at)
        if not self.is_controller and self.voters is not None and not self._leaving:
            # Look again when what blocks us ends, and at least once per lease
            # (a safety net: liveness never hangs on one lost message).
            times += [self.standing.blocked_until, now + self.config.lease_s]
        if self.known is not None and not self.is_controller:
            times.append(self.known_until)
        if self.voters is None and not self._leaving:
            times.append(self._view_changed_at + self.config.bootstrap_settle_s)
        grant = self.voter.grant
        if grant is not None and grant.until_at > now:
            times.append(grant.until_at)
        future = [t for t in times if t > now]
        if future:
            self._wake_by(min(future))

    def _wake(self, now: float) -> None:
        self._wake_at = now

    def _wake_by(self, at: float) -> None:
        if self._wake_at is None or at < self._wake_at:
            self._wake_at = at

    def _maybe_bootstrap(self, now: float) -> None:
        if now < self._view_changed_at + self.config.bootstrap_settle_s:
            return
        members = self.ranking.candidates_if_first()
        if len(members) < self.bootstrap_expect:
            return
        chosen = tuple(sorted(members[: self.config.max_voters]))
        config = VoterConfig(self.rng.randbytes(8), 1, chosen)
        self._become_candidate(now, config)

    def _maybe_stand(self, now: float) -> None:
        voters = self.voters
        assert voters is not None
        if self.standing.due(now, voters, self.voter.grant, self.known, self.known_until):
            self._become_candidate(now, voters)

    def _controller_duties(self, now: float) -> None:
        if self.campaign.request is None and now >= self._renew_at:
            if self.notices.dirty:
                self.notices.tell(self._notice(now), everyone=False)  # members not told yet
            voters = self.voters
            assert voters is not None
            if voters != self._quorum_config and self._quorum_config is not None:
                # Finish the change in flight (ours, or one adopted on sight)
                # before any other: two uncommitted steps could make
                # majorities that do not intersect.
                self._renew(now, voters, old=self._quorum_config)
            else:
                settled = now - self.elected_at >= _REAPED_GUARD_S
                change = self.ranking.next_config(voters, settled, self.config.max_voters)
                self._renew(now, change)
        if now >= self.notices.notice_at:
            self.notices.tell_everyone(now, self._notice(now))
        if self.config.preempt and self.campaign.request is None and self.voters is not None:
            best = self.ranking.best_voter(self.voters)
            if best is not None and best != self.name:
                self.leave(now)
                self._leaving = False

    # -- transitions -----------------------------------------------------------------

    def _become_candidate(self, now: float, config: VoterConfig) -> None:
        self.counters.campaigns += 1
        epoch = max(self.epoch_known, self.voter.granted_epoch) + 1
        self._issue(now, epoch, config, None, renewal=False)

    def _renew(self, now: float, change: VoterConfig | None,
               old: VoterConfig | None = None) -> None:  # fmt: skip
        assert self.lease_epoch is not None and self.voters is not None
        self.counters.renewals += 1
        self._renew_at = now + self.config.renew_interval_s
        epoch = self.lease_epoch
        if self._fresh_epoch:  # a voter is past our epoch (after a merge): move above it
            epoch = max(self.epoch_known, self.voter.granted_epoch) + 1
            self._fresh_epoch = False
        if change is not None:
            self._issue(now, epoch, change, old or self.voters, renewal=True)
        else:
            self._issue(now, epoch, self.voters, None, renewal=True)

    def _issue(self, now: float, epoch: int, config: VoterConfig, old: VoterConfig | None,
               renewal: bool) -> None:  # fmt: skip
        def ask_self(msg: LeaseRequest) -> None:
            self._on_answer(self.voter.vote(msg, now), _SELF, now)

        self.campaign.issue(now, epoch, config, old, renewal, ask_self)

    def _become_controller(self, req: Request, now: float) -> None:
        """`req` won its majority: a new lease, or a renewal of ours."""
        self.campaign.won(req, now)
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
        self.out.events.append(ControllerElected(req.epoch))
        self._set_known((self.name, req.epoch), req.epoch)
        self.known_until = self.lease_end_at
        self.notices.elected()
        self.notices.tell_everyone(now, self._notice(now))
        self._wake(now)

    def _request_failed(self, req: Request, now: float) -> None:
        self.campaign.failed(req)
        if req.renewal:
            # Try again at once while the lease lasts (`renew_interval_s`).
            self.counters.renewals_failed += 1
            self._renew_at = now
            self._wake(now)
            return
        # A campaign that missed its majority gives back what it got, so that
        # the voters are free for the next candidate at once.
        self._release(req.epoch, req.granted, now)
        self.standing.block(now + self.config.rank_backoff_s * (1 + self.rng.random() * 3))
        self._wake(now)

    def _become_follower(self, now: float, reason: str) -> None:
        epoch = self.lease_epoch
        assert epoch is not None
        self.lease_epoch = None
        self.campaign.late = None
        self.out.events.append(ControllerLost(epoch, reason))
        self._set_known(None, epoch)
        self._wake(now)

    def _release(self, epoch: int, voters: Iterable[str], now: float) -> None:
        """Give back our grants of `epoch` from `voters` (our own at once)."""
        for voter in voters:
            if voter == self.name:
                self._on_release(LeaseRelease(epoch, self.name), _SELF, now)
            else:
                self._send_to(voter, LeaseRelease(epoch, self.name))

    # -- messages ------------------------------------------------------------------------

    def _on_answer(self, msg: LeaseGrant | LeaseReject, sender: Address, now: float) -> None:
        req = self.campaign.record(msg)
        if req is None:
            return
        if isinstance(msg, LeaseGrant):
            if req.has_quorum():
                self._become_controller(req, now)
            return
        self.counters.rejects += 1
        self.epoch_known = max(self.epoch_known, msg.granted_epoch)
        if msg.reason == REJECT_EPOCH and req.renewal:
            self._fresh_epoch = True
        if msg.holder and msg.holder != self.name:
            retry_at = self.campaign.retry_when_free(req, msg, now)
            if retry_at is not None:  # ask this voter again the moment it is free
                self._wake_by(retry_at)
                return
            self.standing.block(now + msg.remaining_ms / 1000)
        if msg.config is not None and msg.config.supersedes(self.voters):
            self.adopt(msg.config, now)
            self._request_failed(req, now)

    def _on_release(self, msg: LeaseRelease, sender: Address, now: float) -> None:
        if self.voter.release(msg.holder, msg.epoch):
            if msg.holder != self.name:
                self.standing.released_by = msg.holder  # leaving: not a candidate to rank
            self.standing.blocked_until = 0.0
            if self.known is not None and self.known[0] == msg.holder:
                self._set_known(None, msg.epoch)
            self._wake(now)

    def _on_notice(self, msg: ControllerNotice, sender: Address, now: float) -> None:
        if msg.config.supersedes(self.voters):
            self.adopt(msg.config, now)
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

    def _notice(self, now: float) -> ControllerNotice:
        assert self.lease_epoch is not None and self.voters is not None
        remaining_ms = int(max(0.0, self.lease_end_at - now) * 1000)
        return ControllerNotice(self.lease_epoch, self.name, remaining_ms, self.voters)

    def _set_known(self, known: tuple[str, int] | None, epoch: int) -> None:
        if known is not None:
            self.standing.released_by = ""  # a new controller: the last leaver is history
        if known != self.known:
            self.known = known
            self.out.events.append(ControllerChanged(known[0] if known else "", epoch))

    def _send_to(self, name: str, msg: object) -> None:
        addr = self._addr_of(name)
        if addr is not None:
            self.out.send_durable(Send(addr, (msg,)))

    # -- what the voter asks of the node (voter.VoterHost) -------------------------------

    def adopt(self, config: VoterConfig, now: float) -> None:
        """Adopt a newer voter configuration (written before any answer)."""
        old = self.voters
        self.voters = config
        self.out.persist(PersistElection(self.voter.granted_epoch, config))
        self.out.events.append(VotersChanged(config))
        if old is not None and old.lineage != config.lineage:
            self._fresh_epoch = True
            if self.lease_epoch is not None:
                self._become_follower(now, "merged")
        self._wake(now)

    def yield_campaign(self, candidate: str, now: float) -> int:
        """Abandon our campaign in flight (never claimed, so safe to drop)
        when `candidate` outranks us; the epoch given up, or 0."""
        req = self.campaign.request
        if req is None or req.renewal or self.is_controller:
            return 0
        if not self.ranking.ranks_above_me(candidate):
            return 0
        self._request_failed(req, now)
        return req.epoch

    def ranks_above_me(self, candidate: str) -> bool:
        """Whether `candidate` ranks above this node."""
        return self.ranking.ranks_above_me(candidate)

    def hold_off(self, until: float) -> None:
        """Do not stand before `until`."""
        self.standing.block(until)

    def saw_epoch(self, epoch: int) -> None:
        """A request for `epoch` exists: campaign above it."""
        self.epoch_known = max(self.epoch_known, epoch)

    def renewed(self, holder: str, epoch: int, now: float) -> None:
        """The controller we know of renewed with us: keep knowing it."""
        if self.known == (holder, epoch):
            self.known_until = now + self.config.voter_grant_s

    def granted(self, now: float) -> None:
        """We granted a new lease: stop standing, look again."""
        self.standing.stand_at = None
        self._wake(now)
