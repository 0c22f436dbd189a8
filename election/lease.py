"""LeaseElection: one controller at a time, by a lease from a majority of voters.

Theory of operation (compare Kafka's ZooKeeper-based controller: an
ephemeral znode plus `controller_epoch`; and Gray & Cheriton's leases).
This module is the façade: the timers and the transitions between the
roles, split as raft splits `stepLeader`/`stepCandidate`/`stepFollower`:

- `voter.py`: the grant rule, what a voter may promise and what must be
  durable first (the safety argument lives there);
- `candidacy.py`: the candidate's step: when to stand, what the answers to
  its requests and pre-votes mean, a request that failed;
- `campaign.py`: a candidate's or controller's requests, resends, late
  grants, won renewals;
- `controller.py`: the controller's lease, renewals, voter changes and
  notices;
- `ranking.py`: who should stand and who should vote;
- `notices.py`: how every member learns who the controller is, and the
  controller a member knows of (`KnownController`);
- `voters.py`: the voter configuration and its majorities; `view.py`: the
  membership view as the election reads it;
- `decisions.py`: what the roles decide and this façade carries out;
  `steps.py`: each message handed to its role, and the roles' decisions
  carried out.

**Roles decide, the façade acts** (raft's step functions). A role changes
its own state and records what reaches past it as decisions (adopt a
configuration, issue a request, step down or aside, wake, tell the
metadata log), which `_act` carries out in order as soon as the role's
handler returns; what a role needs to know it reads from this façade as
an `ElectionView`, which only answers. The façade issues requests, and
hands this node's own vote and answer to the voter and the candidate
(`_issue`).

**States.** A node is a *follower* (it knows of a controller, `known`, or
none), a *candidate* (a campaign in flight), or the *controller* (it holds
`lease_epoch` until `lease_end_at`). Transitions:

- follower → candidate: `Candidacy.maybe_stand`, once nothing blocks it (a grant it
  holds, a controller it knows of, a back-off) and its rank's wait is over;
  or, with no configuration yet, to bootstrap one. A candidate first runs
  a pre-vote (`PreVote`, voter.py): only a majority of voters that *would*
  grant lets it ask for real, at a new epoch, so a member cut off from a
  quorum, or a restarted one that does not know the controller yet, raises
  no epoch (Raft's pre-vote, Ongaro's thesis section 9.6). A bootstrap
  campaign has no controller to disturb and asks at once.
- candidate → controller: `Controller.won`, on a majority. The lease
  counts `lease_s * (1 - drift)` from when the request was *sent*.
- candidate → follower: `Candidacy.request_failed` releases what it got and backs
  off, or the campaign yields to a better candidate (`yield_campaign`).
- controller → controller: renewal every `renew_interval_s` (same epoch),
  tried again at once when it misses its majority, carrying at most one
  voter change (`controller.py`).
- controller → follower: `_become_follower` when the lease ends unrenewed
  (`expired`), on a graceful `leave` (`released`), or when a larger lineage
  is adopted (`merged`).

**Durability.** Every election message rides on the write it depends on,
or on a barrier after the last one (`Outbox.send_durable`): a grant, a
candidate's request and a notice all speak for the epoch state.

**Bootstrap** (`ranking.py`): with no configuration, the best-ranked
eligible member proposes one. Two clusters bootstrapped apart
have different lineages; when they meet, the smaller lineage adopts the
larger's configuration, its controller steps down, and its members join
as voters (keeping any grant they hold until it expires, and making the
next controller's epoch exceed everything either side used).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from shoal.election.campaign import Campaign
from shoal.election.candidacy import Candidacy
from shoal.election.config import LeaseConfig
from shoal.election.controller import Controller
from shoal.election.decisions import (
    Adopt,
    Decisions,
    Elected,
    Follow,
    Granted,
    HoldOff,
    Issue,
    LostDisk,
    ProposeVoters,
    ReleaseOwn,
    RequestFailed,
    SawEpoch,
    StepAside,
    Superseded,
    Vouch,
    Wake,
    WakeBy,
)
from shoal.election.events import ElectionCounters
from shoal.election.messages import (
    ControllerNotice,
    LeaseGrant,
    LeaseReject,
    LeaseRelease,
    LeaseRequest,
    NoticeQuery,
    PreVote,
    PreVoteGrant,
)
from shoal.election.notices import KnownController, Notices
from shoal.election.ranking import Ranking, Standing
from shoal.election.steps import SELF, Steps
from shoal.election.view import AddrFn, LivenessFn, ViewFn
from shoal.election.voter import Voter
from shoal.election.voters import VoterConfig
from shoal.kernel.contract import Address, Output, Send
from shoal.kernel.outbox import Outbox


class LeaseElection(Steps):
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
        node_id: bytes = b"",
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
            node_id: this node's data directory's id: a voter is its name
                and this (voters.py, "Identity").
        """
        self.name, self.config, self.rng = name, config, rng
        self.counters = ElectionCounters()
        self.voters = voters
        self._addr_of, self._liveness_of = addr_of, liveness_of
        self.out = Outbox()  # every message rides on a write or a barrier (module docstring)
        self.node_id = node_id
        self.decisions: Decisions = []  # made by the roles, carried out by `_act`
        self.voter = Voter(name, config, self.out, self.counters, granted_epoch, self,
                           self.decisions, node_id)  # fmt: skip
        self.campaign = Campaign(name, config, self.counters, rng.getrandbits(32),
                                 self._send_to, liveness_of)  # fmt: skip
        self.campaign.node_id = node_id
        self.ranking = Ranking(name, view, bool(config.healthy_only))
        self.notices = Notices(name, config.notice_interval_s, view, self._send_to)
        self.standing = Standing(self.ranking, config.rank_backoff_s, rng)
        self.following = KnownController(name, config, self.out, self.counters, self.standing,
                                         liveness_of, self, self.decisions,
                                         self._send_to)  # fmt: skip
        self.controller = Controller(name, config, self.out, self.counters, self.campaign,
                                     self.ranking, self.notices, self.following, self,
                                     self.decisions)  # fmt: skip
        roles = (
            self.voter,
            self.campaign,
            self.ranking,
            self.standing,
            self.following,
            self.controller,
        )
        self.candidacy = Candidacy(
            name,
            node_id,
            config,
            rng,
            self.counters,
            roles,
            self._send_to,
            self,
            self.decisions,
            granted_epoch,
            bootstrap_expect,
        )
        self._view_changed_at, self._leaving = 0.0, False
        # The feature level this node announces when it controls; the node
        # that composes the cores decides it (node/composition.py).
        self.feature_level = 1
        # This node's metadata log's last entry (epoch, index), for the
        # voter's up-to-date check and the campaign's requests; set by the
        # node that composes the cores (metalog/).
        self.log_position: Callable[[], tuple[int, int]] = lambda: (0, 0)
        # Whether the controller may change the voters now (metalog: not
        # before an entry of its epoch is committed).
        self.log_ready: Callable[[], bool] = lambda: True
        # Have the metadata log decide a voter change (controller.py, "Voter
        # changes"); None: no log here. Set likewise.
        self.propose_voters: Callable[[VoterConfig | None, float], bool] | None = None
        # Decide the cluster's feature level as this node becomes controller,
        # before its first notice (set by the node that composes the cores).
        self.decide_level: Callable[[], None] = lambda: None
        # The metadata log's view of a voter that came back with a new data
        # directory (controller.py): whether it has caught up, and telling
        # the log to forget what its old self acknowledged. Set likewise.
        self.caught_up: Callable[[str], bool] = lambda name: True
        self.lost_disk: Callable[[str], None] = lambda name: None
        self.campaign.log_position = lambda: self.log_position()
        self._wake_at: float | None = None
        self.handlers = self._handlers()
        self._carry_out = self._actions()

    def _handlers(self) -> dict[type, Callable[[Any, Address, float], None]]:
        """Message type -> the role that handles it."""
        return {
            LeaseRequest: self._on_request,
            PreVote: self._on_pre_vote,
            LeaseGrant: self._on_answer,
            PreVoteGrant: self._on_answer,
            LeaseReject: self._on_answer,
            LeaseRelease: self.on_release,
            ControllerNotice: self._on_notice,
            NoticeQuery: self._on_notice_query,
        }

    @property
    def is_controller(self) -> bool:
        """Whether this node holds the lease."""
        return self.controller.lease_epoch is not None

    @property
    def lease_epoch(self) -> int | None:
        """The epoch of the lease this node holds (None: not controller)."""
        return self.controller.lease_epoch

    @property
    def lease_end_at(self) -> float:
        """When our lease ends, on this node's clock (if controller)."""
        return self.controller.lease_end_at

    @property
    def known(self) -> tuple[str, int] | None:
        """The controller this node knows of, and its epoch."""
        return self.following.known

    @property
    def epoch_known(self) -> int:
        """The highest epoch this node knows was used (granted, asked or refused)."""
        return self.candidacy.epoch_known

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

        A controller tells every member at each renewal that wins; a member
        forgets a controller its view reports dead or left
        (`notices.KnownController.view_changed`).
        """
        self._view_changed_at = now
        self.following.view_changed()
        if self.voters is None:
            self.wake_by(now + self.config.bootstrap_settle_s)

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
        lease_epoch = self.controller.lease_epoch
        if lease_epoch is not None and self.voters is not None:
            releases[lease_epoch] = set(self.voters.voters)
        for r in dropped:
            releases.setdefault(r.epoch, set()).update(r.targets())
        for epoch, voters in releases.items():
            self.candidacy.release(epoch, sorted(voters))
            self._act(now)
        if lease_epoch is not None:
            self._become_follower(now, "released")

    def rejoin(self, now: float) -> None:
        """Stand again after a leave (a `join` after `leave`)."""
        self._leaving = False
        self.wake(now)

    def remove_voter(self, name: str, now: float) -> bool:
        """As controller, start removing `name` from the voters (force-leave).
        Returns False when this node is not the controller or a change runs."""
        started = self.controller.remove_voter(name, now)
        self._act(now)
        return started

    # -- timers ----------------------------------------------------------------------

    def _evaluate(self, now: float) -> None:
        self._wake_at = None
        ctl = self.controller
        if ctl.lease_epoch is not None and now >= ctl.lease_end_at:
            self._become_follower(now, "expired")
        campaign = self.campaign
        req = campaign.request
        if req is not None:
            if campaign.timed_out(req, now):
                self.candidacy.request_failed(req, now)
                self._act(now)
            else:
                campaign.resend_due(req, now)
        campaign.resend_late(now, ctl.renew_at)
        if self.is_controller:
            ctl.duties(now)
            self._act(now)  # the renewal is issued before `oversee` numbers a notice
            ctl.oversee(now)
            self._act(now)
        else:
            self.following.expire(now)
            self.following.ask(now)
            if campaign.request is None and not self._leaving:
                self.candidacy.maybe_stand(now, self._view_changed_at)
                self._act(now)
        self._schedule(now)

    def _schedule(self, now: float) -> None:
        times = list(self.campaign.deadlines())
        if self.is_controller:
            times += self.controller.deadlines()
        if self.standing.stand_at is not None:
            times.append(self.standing.stand_at)
        if not self.is_controller and self.voters is not None and not self._leaving:
            # Look again when what blocks us ends, and at least once per lease
            # (a safety net: liveness never hangs on one lost message).
            times += [self.standing.blocked_until, now + self.config.lease_s]
        if self.following.known is not None and not self.is_controller:
            times += [self.following.until, self.following.ask_at]
        if self.voters is None and not self._leaving:
            times.append(self._view_changed_at + self.config.bootstrap_settle_s)
        grant = self.voter.grant
        if grant is not None and grant.until_at > now:
            times.append(grant.until_at)
        future = [t for t in times if t > now]
        if future:
            self.wake_by(min(future))

    def _send_to(self, name: str, msg: object) -> None:
        addr = self._addr_of(name)
        if addr is not None:
            self.out.send_durable(Send(addr, (msg,)))

    # -- carrying out what the roles decide (decisions.py) -------------------------------

    def _actions(self) -> dict[type, Callable[[Any, float], None]]:
        """Decision type -> how the node carries it out."""
        return {
            Adopt: lambda d, now: self.adopt(d.config, now),
            Wake: lambda d, now: self.wake(now),
            WakeBy: lambda d, now: self.wake_by(d.at),
            Issue: self._issue,
            RequestFailed: self._request_failed,
            ReleaseOwn: lambda d, now: self.on_release(
                LeaseRelease(d.epoch, self.name), SELF, now
            ),  # fmt: skip
            HoldOff: lambda d, now: self.standing.block(d.until),
            SawEpoch: lambda d, now: self.saw_epoch(d.epoch),
            Granted: self._granted,
            Superseded: lambda d, now: self.superseded(d.epoch, now),
            Follow: lambda d, now: self.following.follow(d.notice, now),
            Vouch: lambda d, now: self.voter.vouch(d.holder, d.epoch, d.seq, now),
            Elected: self._elected,
            StepAside: lambda d, now: self.step_aside(now),
            ProposeVoters: self._propose,
            LostDisk: lambda d, now: self.lost_disk(d.name),
        }

    def issue(self, now: float, epoch: int, config: VoterConfig, old: VoterConfig | None,
              renewal: bool, pre: bool = False) -> None:  # fmt: skip
        """Send a request for `epoch`, or a pre-vote for it (this node
        answers its own at once)."""
        self._issue(Issue(epoch, config, old, renewal, pre), now)

    def step_aside(self, now: float) -> None:
        """Release the lease to a better candidate (`preempt`), and keep standing."""
        self.leave(now)
        self._leaving = False

    # -- what the roles may ask (decisions.ElectionView) -------------------------------

    @property
    def has_log(self) -> bool:
        """Whether this node runs a metadata log that decides voter changes."""
        return self.propose_voters is not None

    def next_epoch(self) -> int:
        """An epoch above every epoch this node has seen or granted."""
        return self.candidacy.next_epoch()

    def ranks_above_me(self, candidate: str) -> bool:
        """Whether `candidate` ranks above this node."""
        return self.ranking.ranks_above_me(candidate)

    def would_yield(self, candidate: str) -> bool:
        """Whether our campaign in flight would be abandoned for `candidate`."""
        return self.candidacy.would_yield(candidate)
