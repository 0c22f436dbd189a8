"""The election's steps: each message to a role, and each decision carried out.

Theory of operation (etcd raft's `Step`: a message goes to the step
function of the node's state, which records what must be done). This is
the half of the façade (`LeaseElection`, lease.py) that runs the roles: a
message is handed to the role that reads it, and what the role decided
(decisions.py) is carried out at once, in order (`_act`). Two steps are
the façade's own:

- a request's vote (`_vote`): the voter's rule returns what must be
  carried out before it can answer (a newer configuration adopted, our
  campaign yielded to a better candidate), and is asked again;
- issuing a request (`_issue`): this node's own vote is answered in its
  place in name order, and its answer handed to the candidate, so that the
  requests after it wait for the write it makes.

A notice's newer configuration is adopted the same way, before the notice
is read (`_on_notice`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from shoal.election.campaign import Campaign
from shoal.election.candidacy import Candidacy
from shoal.election.controller import Controller
from shoal.election.decisions import (
    Adopt,
    Decisions,
    Elected,
    Granted,
    Issue,
    ProposeVoters,
    RequestFailed,
    YieldCampaign,
)
from shoal.election.events import ElectionCounters, PersistElection, VotersChanged
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
from shoal.election.notices import KnownController
from shoal.election.ranking import Standing
from shoal.election.voter import Voter
from shoal.election.voters import VoterConfig
from shoal.kernel.contract import Address, Send
from shoal.kernel.outbox import Outbox

SELF: Address = ("", 0)  # the sender of this node's answers to itself


class Steps:
    """The election's message handlers and how it carries out decisions
    (a part of `LeaseElection`, which sets everything declared here)."""

    name: str
    voters: VoterConfig | None
    out: Outbox
    counters: ElectionCounters
    decisions: Decisions
    voter: Voter
    campaign: Campaign
    candidacy: Candidacy
    controller: Controller
    following: KnownController
    standing: Standing
    decide_level: Callable[[], None]
    propose_voters: Callable[[VoterConfig | None, float], bool] | None
    _carry_out: dict[type, Callable[[Any, float], None]]
    _wake_at: float | None

    # -- messages ---------------------------------------------------------------------

    def _on_notice_query(self, msg: NoticeQuery, sender: Address, now: float) -> None:
        """A member lost a notice and asks for a fresh one."""
        if self.controller.is_controller:
            self.out.send_durable(Send(sender, (self.controller.notice(now),)))

    def on_release(self, msg: LeaseRelease, sender: Address, now: float) -> None:
        """A holder gives back its grant of `msg.epoch` from this node."""
        if self.voter.release(msg.holder, msg.epoch):
            if msg.holder != self.name:
                self.standing.released_by = msg.holder  # leaving: not a candidate to rank
            self.standing.blocked_until = 0.0
            self.following.released(msg.holder, msg.epoch)
            self.wake(now)

    def _on_request(self, msg: LeaseRequest, sender: Address, now: float) -> None:
        """Answer a candidate; the answer waits for every write before it."""
        answer = self._vote(msg, now)
        if answer is not None:
            self.out.send_durable(Send(sender, (answer,)))

    def _vote(self, msg: LeaseRequest, now: float) -> LeaseGrant | LeaseReject | None:
        """The voter's answer to `msg`, once what it must have carried out
        first is (a newer configuration adopted, our campaign yielded)."""
        yielded: int | None = None
        while True:
            verdict = self.voter.vote(msg, now, yielded)
            self._act(now)
            if isinstance(verdict, Adopt):
                self.adopt(verdict.config, now)
            elif isinstance(verdict, YieldCampaign):
                yielded = self.candidacy.yield_campaign(verdict.candidate, now)
                self._act(now)
            else:
                return verdict

    def _on_pre_vote(self, msg: PreVote, sender: Address, now: float) -> None:
        """Answer a pre-vote (after every write before it, like any answer)."""
        answer = self.voter.pre_vote(msg, now)
        self._act(now)
        self.out.send_durable(Send(sender, (answer,)))

    def _on_answer(self, msg: LeaseGrant | PreVoteGrant | LeaseReject, sender: Address,
                   now: float) -> None:  # fmt: skip
        """A voter's answer to our request or pre-vote."""
        self.candidacy.on_answer(msg, now)
        self._act(now)

    def _on_notice(self, msg: ControllerNotice, sender: Address, now: float) -> None:
        """A controller's notice (notices.py), its configuration adopted first."""
        adopt = self.following.on_notice(msg, now)
        if adopt is not None:
            self.adopt(adopt.config, now)
            self.following.on_notice(msg, now, adopted=True)
        self._act(now)

    def _issue(self, d: Issue, now: float) -> None:
        """Send a request (or a pre-vote) to every voter it asks; this
        node's own vote is answered at once, in its place in name order, so
        that the requests after it wait for the write it makes."""

        def ask_self(msg: LeaseRequest | PreVote) -> None:
            if isinstance(msg, PreVote):
                pre = self.voter.pre_vote(msg, now)
                self._act(now)
                self._on_answer(pre, SELF, now)
                return
            answer = self._vote(msg, now)
            if answer is not None:
                self._on_answer(answer, SELF, now)

        self.campaign.issue(now, d.epoch, d.config, d.old, d.renewal, ask_self, d.pre)

    # -- decisions ----------------------------------------------------------------------

    def _act(self, now: float) -> None:
        """Carry out the decisions made, in order (each one's own are
        carried out within it)."""
        decisions = self.decisions
        if decisions:
            batch = decisions.copy()
            decisions.clear()
            for d in batch:
                self._carry_out[type(d)](d, now)
            assert not decisions

    def _request_failed(self, d: RequestFailed, now: float) -> None:
        self.candidacy.request_failed(d.req, now)
        self._act(now)

    def _granted(self, d: Granted, now: float) -> None:
        """We granted a new lease: stop standing, look again."""
        self.standing.stand_at = None
        self.wake(now)

    def _elected(self, d: Elected, now: float) -> None:
        """Decide the feature level before the first notice announces it."""
        self.decide_level()
        self.controller.announce(now)

    def _propose(self, d: ProposeVoters, now: float) -> None:
        if self.propose_voters is not None:
            self.propose_voters(d.config, now if d.config is not None else 0.0)

    def wake(self, now: float) -> None:
        """Evaluate again at `now`."""
        self._wake_at = now

    def wake_by(self, at: float) -> None:
        """Evaluate again at `at` at the latest."""
        if self._wake_at is None or at < self._wake_at:
            self._wake_at = at

    def adopt(self, config: VoterConfig, now: float) -> None:
        """Adopt a newer voter configuration (written before any answer)."""
        old = self.voters
        self.voters = config
        self.out.persist(PersistElection(self.voter.granted_epoch, config))
        self.out.events.append(VotersChanged(config))
        if old is not None and old.lineage != config.lineage:
            self.voter.foreign_epoch = self.voter.granted_epoch  # granted under the other lineage
            self.controller.fresh_epoch = True
            if self.controller.is_controller:
                self._become_follower(now, "merged")
        self.wake(now)

    def logged_voters(self, config: VoterConfig, now: float) -> None:
        """The metadata log committed `config` and this node, following,
        applied it: adopt it if it is a later one of our lineage, as the
        controller's renewal carrying it would (Raft's servers use the
        newest configuration in their log).

        Without this a voter cut off after it held the entry, before the
        renewal reached it, campaigned under the configuration before, and
        that one may name its voters by name alone (before the controller
        filled in their ids): a voter back with a wiped disk then granted
        as its old self, and the laggard won without the entries the wiped
        voter had held (the swarm's seed 703, sessions=3; two committed
        histories). Under the logged configuration the wiped voter's new id
        is refused (voter.py, step 1). A single change at a time, committed:
        any majority of it meets any majority of the one before, so
        adopting it early elects no one a majority of the other would not.
        The controller decides its own changes (`Controller.decide`)."""
        current = self.voters
        if self.controller.is_controller or (current is not None and (
                config.lineage != current.lineage or config.recovery != current.recovery
                or config.version <= current.version)):  # fmt: skip
            return
        self.adopt(config, now)

    def saw_epoch(self, epoch: int) -> None:
        """A request for `epoch` exists: campaign above it."""
        self.candidacy.saw_epoch(epoch)

    def superseded(self, epoch: int, now: float) -> None:
        """A notice of another holder's lease at `epoch`, in our configuration.
        If we hold a lease below it, ours has run out on every clock but ours
        (a voter granted `epoch` only after our grant ended on its clock): our
        clock is slow, outside the drift bound. Step down at once, so that two
        claimants, possible there, overlap as briefly as one notice allows."""
        mine = self.controller.lease_epoch
        if mine is not None and mine < epoch:
            self.counters.superseded += 1
            self._become_follower(now, "superseded")

    def _become_follower(self, now: float, reason: str) -> None:
        self.controller.step_down(reason)
        self.wake(now)
