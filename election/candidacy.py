"""Candidacy: the candidate's step, as raft's `stepCandidate` is one.

Theory of operation. A follower stands (`maybe_stand`) once nothing blocks
it and its rank's wait is over (`Standing`, ranking.py), first with a
pre-vote, or, with no configuration yet, by proposing the first one and
asking at once. Its requests are the campaign's (campaign.py); this reads
their answers:

- a majority of would-grants turns a pre-vote into a real request at a new
  epoch; a majority of grants makes this node controller, or renews its
  lease (`Controller.won`);
- a refusal raises the epoch this node knows of, may name a voter that came
  back with a new data directory (`Controller.note_identity`), may come
  from a voter whose grant to another ends soon (asked again the moment it
  is free) or that holds a newer configuration (adopted, and the request
  fails);
- a refused renewal of a lease we hold is answered with a notice when the
  voter merely does not know we hold our epoch (`_refused_renewal`);
- a request that failed gives back what it got and backs off a random
  while (`request_failed`); a renewal is tried again at once.

What becoming controller or follower does is the controller's (controller.py)
and the façade's (lease.py). What reaches past the candidate's own state
(issuing a request, adopting a configuration, giving back our own
voter's grant, holding off, waking) it records as decisions (decisions.py)
for `LeaseElection` to carry out; the façade issues the requests, and
hands this node's own answer back to `on_answer`.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable

from shoal.election.campaign import Campaign, Request
from shoal.election.config import LeaseConfig
from shoal.election.controller import Controller
from shoal.election.decisions import (
    Adopt,
    Decisions,
    ElectionView,
    HoldOff,
    Issue,
    ReleaseOwn,
    RequestFailed,
    Wake,
    WakeBy,
)
from shoal.election.events import ElectionCounters
from shoal.election.messages import (
    REJECT_EPOCH,
    REJECT_HELD,
    REJECT_IDENTITY,
    LeaseGrant,
    LeaseReject,
    LeaseRelease,
    PreVoteGrant,
)
from shoal.election.notices import KnownController
from shoal.election.ranking import Ranking, Standing
from shoal.election.voter import Voter


class Candidacy:
    """This node as a candidate: standing, and the answers to its requests."""

    def __init__(
        self,
        name: str,
        node_id: bytes,
        config: LeaseConfig,
        rng: random.Random,
        counters: ElectionCounters,
        roles: tuple[Voter, Campaign, Ranking, Standing, KnownController, Controller],
        send_to: Callable[[str, object], None],
        view: ElectionView,
        decisions: Decisions,
        epoch_known: int,
        bootstrap_expect: int,
    ) -> None:
        """Args:
        name, node_id: this node (a voter is its name and its data
            directory's id).
        config: timing.
        rng: the election's randomness (back-offs, the first configuration).
        counters: the election's counters.
        roles: the election's voter, campaign, ranking, standing, the
            controller it follows and its own controller role.
        send_to: sends a message to a member by name, after the writes
            before it are durable.
        view: what the candidate reads of the rest of the node.
        decisions: where the candidate records what the node is to do.
        epoch_known: the highest epoch this node knows was used.
        bootstrap_expect: eligible members to wait for before the first
            configuration is formed.
        """
        self.name, self.node_id, self.config, self.rng = name, node_id, config, rng
        self.counters = counters
        voter, campaign, ranking, standing, following, controller = roles
        self.voter, self.campaign, self.ranking = voter, campaign, ranking
        self.standing, self.following, self.controller = standing, following, controller
        self._send_to = send_to
        self._view = view
        self._decide = decisions.append
        self.epoch_known = epoch_known
        self.bootstrap_expect = bootstrap_expect

    def next_epoch(self) -> int:
        """An epoch above every epoch this node has seen or granted."""
        return max(self.epoch_known, self.voter.granted_epoch) + 1

    def saw_epoch(self, epoch: int) -> None:
        """A request for `epoch` exists: campaign above it."""
        self.epoch_known = max(self.epoch_known, epoch)

    def maybe_stand(self, now: float, view_changed_at: float) -> None:
        """Become a candidate when due, or bootstrap once the view is still
        (has not changed since `view_changed_at` for `bootstrap_settle_s`)."""
        config, known = self._view.voters, self.following
        if config is None:
            if now < view_changed_at + self.config.bootstrap_settle_s:
                return
            config = self.ranking.first_config(self.bootstrap_expect, self.config.max_voters,
                                               self.rng)  # fmt: skip
            if config is None:
                return
            self.counters.campaigns += 1  # nothing to disturb yet: no pre-vote
            self._decide(Issue(self.next_epoch(), config, None, renewal=False))
            return
        if not config.identifies(self.name, self.node_id):
            # Named with another data directory's id: that was our old self
            # (our disk was wiped), and we never stand as it.
            self.standing.stand_at = None
            return
        if not self.standing.due(now, config, self.voter.grant, known.known, known.until):
            return
        self.counters.pre_votes += 1
        self._decide(Issue(self.next_epoch(), config, None, renewal=False, pre=True))

    def request_failed(self, req: Request, now: float) -> None:
        """`req` missed its majority (timed out, refused, or given up)."""
        self.campaign.failed(req)
        if req.renewal:
            # Try again at once while the lease lasts (`renew_interval_s`).
            self.controller.renewal_failed(now)
            self._decide(Wake())
            return
        # A campaign that missed its majority gives back what it got, so that
        # the voters are free for the next candidate at once (a pre-vote got
        # nothing).
        if not req.pre:
            self.release(req.epoch, req.granted)
        self._decide(HoldOff(now + self.config.rank_backoff_s * (1 + self.rng.random() * 3)))
        self._decide(Wake())

    def release(self, epoch: int, voters: Iterable[str]) -> None:
        """Give back our grants of `epoch` from `voters` (our own by a
        decision, `ReleaseOwn`)."""
        for voter in voters:
            if voter == self.name:
                self._decide(ReleaseOwn(epoch))
            else:
                self._send_to(voter, LeaseRelease(epoch, self.name))

    def on_answer(self, msg: LeaseGrant | PreVoteGrant | LeaseReject, now: float) -> None:
        """A voter's answer to our request or pre-vote."""
        req = self.campaign.record(msg)
        if req is None:
            return
        if not isinstance(msg, LeaseReject):
            if req.has_quorum() and req.pre:  # a majority would grant: ask for real
                self.campaign.failed(req)
                self.counters.campaigns += 1
                self._decide(Issue(self.next_epoch(), req.config, None, renewal=False))
            elif req.has_quorum():  # a new lease, or a renewal of ours
                self.controller.won(req, now)
                self._decide(Wake())
            return
        self.counters.rejects += 1
        if msg.reason == REJECT_IDENTITY:
            self.controller.note_identity(msg.voter, msg.voter_id)
        self.epoch_known = max(self.epoch_known, msg.granted_epoch)
        if req.renewal and self._refused_renewal(msg, now):
            return
        if msg.holder and msg.holder != self.name:
            retry_at = self.campaign.retry_when_free(req, msg, now)
            if retry_at is not None:  # ask this voter again the moment it is free
                self._decide(WakeBy(retry_at))
                return
            self._decide(HoldOff(now + msg.remaining_ms / 1000))
        if msg.config is not None and msg.config.supersedes(self._view.voters):
            self._decide(Adopt(msg.config))
            self._decide(RequestFailed(req))

    def _refused_renewal(self, msg: LeaseReject, now: float) -> bool:
        """A voter refused our renewal. Past our epoch (after a merge), the
        next renewal moves above it. A voter that does not know we hold our
        epoch (it restarted, or granted it to a candidate that lost it) is
        told by a notice, and then takes us as the holder of that epoch
        (`Voter.vouch`): a new epoch for that would unseat a healthy
        controller for nothing (issue 28). One told that still refuses
        granted our epoch number under another lineage: we move above it.
        Whether the refusal is dealt with."""
        epoch = self.controller.lease_epoch
        if epoch is None or msg.config != self._view.voters:
            return False
        told = self.controller.told_of_epoch
        if msg.reason == REJECT_EPOCH:
            if msg.granted_epoch > epoch or msg.voter in told:
                # Past our epoch (after a merge), or told and still refusing
                # (its epoch came from a lineage it left): move above it.
                self.controller.fresh_epoch = True
                return False
            told.add(msg.voter)
        elif msg.reason != REJECT_HELD or msg.holder == self.name:
            return False
        self._send_to(msg.voter, self.controller.notice(now))
        return not msg.holder  # a grant to another still binds: handled as before

    def yield_campaign(self, candidate: str, now: float) -> int:
        """Abandon our campaign in flight (never claimed, so safe to drop)
        when `candidate` outranks us; the epoch given up, or 0."""
        req = self.campaign.request
        if req is None or req.renewal or self.controller.lease_epoch is not None:
            return 0
        if not self.ranking.ranks_above_me(candidate):
            return 0
        self.request_failed(req, now)
        return req.epoch

    def would_yield(self, candidate: str) -> bool:
        """Whether `yield_campaign` would abandon our campaign for `candidate`."""
        req = self.campaign.request
        if req is None or req.renewal or req.pre or self.controller.lease_epoch is not None:
            return False
        return self.ranking.ranks_above_me(candidate)
