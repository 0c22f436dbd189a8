"""The controller role: holding the lease, renewing it, changing the voters.

Theory of operation. A controller holds `lease_epoch` until `lease_end_at`,
counted `holder_lease_s` (`lease_s * (1 - drift)`) from when the request
that won was *sent* (`Controller.won`). It renews every `renew_interval_s`
in the same epoch; a renewal that misses its majority is tried again at
once while the lease lasts (`renewal_failed`). A voter that refuses our
epoch as too old (after a merge of two lineages) makes the next renewal
move to a fresh epoch, above everything this node has seen
(`fresh_epoch`).

**Voter changes.** A renewal carries at most one voter change
(`voters.py`): the one `ranking.Ranking.next_config` proposes, or a
force-leave (`remove_voter`). `quorum_config` is the configuration of our
last request that won; while `voters` differs from it a change is in
flight (ours, or one adopted on sight), and it is finished before any
other starts: two uncommitted steps could make majorities that do not
intersect.

Where the cluster speaks the metadata log (feature level 2), gossip only
proposes a change and the log decides it (issue 37): the change goes to the
log first (a `ProposeVoters` decision), as an entry committed on a
majority of the old voters and of the new, and only once it is committed
(`decided`) does a renewal carry it. So a majority of every configuration
holds every entry committed before it, and a voter is added only once it
has caught up as a non-voter (`_ready`: the log replicates to every live
member). Before that level, or where this node runs no log, the renewal
alone carries the change, as 0.2.0 did.

**Voters that left.** A voter that left gracefully (SIGTERM, `shoal
leave`) is removed only once it has been gone `left_voter_grace_s` (60 s)
by this controller's clock, counted from when this controller first saw it
left (`_left_since`; a new controller counts afresh, so later, never
sooner). Until then it is a voter as one that crashed is: the majority is
still of three, the same two live voters as of a configuration without it,
and a restart brings it back a voter with its log, with nothing to catch up
and no change to commit. Removed at once, as before, a restarted agent of
three voters was out of every majority until it had caught up and been
added back, and the controller lost meanwhile left one voter of two with
no majority (tests/integration/test_meta_sessions.py saw it in CI).

A voter that vanished from the view (reaped) is removed only after
`_REAPED_GUARD_S` as controller, so that a fresh controller whose view is
still filling up does not remove voters it has not heard of yet.

**Voters that came back with a new data directory** (voters.py,
"Identity"). A voter refusing our request because the configuration names
it with another id (`REJECT_IDENTITY`) tells us its new id
(`note_identity`); its old identity can never grant again, so the next
change removes it (`VoterReplaced`, logged as `voter-replaced`), and the
one after adds it back under its new id as a new voter, once it has caught
up as a non-voter: the metadata log replicates to it meanwhile
(`learners`), and what its old self acknowledged no longer counts
(`lost_disk`). Its old self's copies of entries are gone, so an entry may
now be on just half of the others; added back empty, it could help elect a
controller without that entry. At feature level 2 (all members read voter ids) a change also
carries the ids of the voters it adds, and fills in those not known yet.

**Notices.** A new controller (`ControllerElected`) knows itself as the
controller and tells every member (`notices.Notices`); each renewal that
wins tells every member again, with the lease it vouches for, and a
member that lost a notice asks for one (`NoticeQuery`, answered by
`LeaseElection`). One that steps down (`ControllerLost`) knows of no
controller.

**Preemption.** With `preempt`, a controller that sees a better-ranked
voter steps aside (releases its lease, as a leave does, and stays a
candidate). A controller that is no longer eligible (its
`controller_eligible` tag set to false, or with `healthy_only` its own
health critical) steps aside the same way when an eligible voter is live.

What the role needs to know of the rest of the node (the configuration,
the feature level, the epochs seen, the log) it reads from an
`ElectionView`; what reaches past it (issuing a request, proposing a
change to the log, stepping aside, deciding the feature level) it records
as decisions (decisions.py) for `LeaseElection` to carry out. A renewal's
request is issued before the notices it numbers and the preemption that
reads the configuration it may change: `duties`, then `oversee`.
"""

from __future__ import annotations

from collections.abc import Iterable

from shoal.election.campaign import Campaign, Request
from shoal.election.config import LeaseConfig
from shoal.election.decisions import (
    Decisions,
    Elected,
    ElectionView,
    Issue,
    LostDisk,
    ProposeVoters,
    StepAside,
)
from shoal.election.events import (
    ControllerElected,
    ControllerLost,
    ElectionCounters,
    VoterReplaced,
)
from shoal.election.messages import ControllerNotice
from shoal.election.notices import KnownController, Notices
from shoal.election.ranking import Ranking
from shoal.election.voters import VoterConfig
from shoal.kernel.outbox import Outbox
from shoal.kernel.versions import META_LOG_FEATURE

# A controller removes voters that vanished from its view (reaped) only
# after holding the lease this long, so that a fresh controller whose view
# is still filling up does not remove voters it has not heard of yet.
_REAPED_GUARD_S = 60.0


class Controller:
    """The lease this node holds, if any, and its renewals."""

    # A deliberate bug, set only by the test that shows the swarm's checks
    # catch it (tests/sim/test_voter_changes.py): "unlogged" (voters change
    # by the renewal alone, as before the metadata log, and are added
    # without catching up first).
    mutation: str | None = None

    def __init__(self, name: str, config: LeaseConfig, out: Outbox, counters: ElectionCounters,
                 campaign: Campaign, ranking: Ranking, notices: Notices,
                 following: KnownController, view: ElectionView,
                 decisions: Decisions) -> None:  # fmt: skip
        """Args:
        name: this node's name.
        config: timing (`renew_interval_s`, `holder_lease_s`, `preempt`).
        out: the election's outbox (its events).
        counters: the election's counters.
        campaign: the requests in flight.
        ranking: who should vote, and who should be controller.
        notices: how the members are told.
        following: the controller this node knows of.
        view: what the role reads of the rest of the node.
        decisions: where the role records what the node is to do.
        """
        self.name, self.config, self.out, self.counters = name, config, out, counters
        self.campaign, self.ranking, self.notices = campaign, ranking, notices
        self.following = following
        self._view = view
        self._decide = decisions.append
        self.lease_epoch: int | None = None  # set while this node is controller
        self.lease_end_at = self.elected_at = 0.0
        self.renew_at = 0.0
        self.fresh_epoch = False  # the next renewal moves to a new epoch
        self._ineligible = False  # our own tags say we may not be controller (duties)
        # Voters told by a notice that we hold our epoch after they refused
        # it (`Candidacy._refused_renewal`); cleared with each new epoch.
        self.told_of_epoch: set[str] = set()
        self.quorum_config: VoterConfig | None = None  # of our last request that won
        # Voter name -> the data directory's id it answered with, where the
        # configuration names another (`note_identity`).
        self.came_back: dict[str, bytes] = {}
        self._replaced_told: set[tuple[str, bytes]] = set()  # VoterReplaced events made
        self.decided: VoterConfig | None = None  # a change the log committed, to adopt
        self._left_since: dict[
            str, float
        ] = {}  # voter -> when first seen left ("Voters that left")

    @property
    def is_controller(self) -> bool:
        """Whether this node holds the lease."""
        return self.lease_epoch is not None

    def deadlines(self) -> Iterable[float]:
        """When the controller has something to do."""
        return (self.lease_end_at, self.renew_at, self.notices.notice_at)

    def remove_voter(self, name: str, now: float) -> bool:
        """Start removing `name` from the voters (force-leave). False when
        this node is not the controller or a change runs."""
        voters = self._view.voters
        if not self.is_controller or voters is None or name not in voters.voters:
            return False
        if self.campaign.request is not None or len(voters.voters) == 1:
            return False
        if voters != self.quorum_config or not self._view.log_ready():
            return False  # a change is still in flight, or the log's first entry
        self._change(now, voters.without_voter(name))
        return True

    def decide(self, config: VoterConfig, now: float) -> None:
        """The metadata log committed our change to `config`: renew with it
        now (the caller wakes the election)."""
        self.decided = config
        self.renew_at = min(self.renew_at, now)

    def duties(self, now: float) -> None:
        """Renew when due (then `oversee`, once the renewal is issued)."""
        if self.campaign.request is None and now >= self.renew_at:
            voters = self._view.voters
            assert voters is not None
            # Once per renewal (a scan of the view): still eligible ourselves?
            self._ineligible = not self.ranking.self_eligible()
            if voters != self.quorum_config and self.quorum_config is not None:
                # Finish the change in flight (module docstring).
                self.renew(now, voters, old=self.quorum_config)
            elif self.decided is not None:
                self.renew(now, self._adoptable(voters))
            elif self._view.log_ready():  # the log's entry of our epoch first
                self._change(now, self._next_change(voters, now))
            else:
                self.renew(now, None)

    def oversee(self, now: float) -> None:
        """Tell the members when due, and step aside for a better candidate."""
        if now >= self.notices.notice_at:
            self.notices.tell_everyone(now, self.notice(now))
        voters = self._view.voters
        if self.campaign.request is None and voters is not None and (
                self.config.preempt or self._ineligible):  # fmt: skip
            best = self.ranking.best_voter(voters)
            if best is not None and best != self.name:
                self._decide(StepAside())

    def _change(self, now: float, change: VoterConfig | None) -> None:
        """Renew, with `change` once decided: where the log decides changes,
        it goes to the log first, and this renewal carries none."""
        if (change is not None and self._view.has_log and Controller.mutation != "unlogged"
                and self._view.feature_level >= META_LOG_FEATURE):  # fmt: skip
            self._decide(ProposeVoters(change))
            change = None
        self.renew(now, change)

    def _adoptable(self, voters: VoterConfig) -> VoterConfig | None:
        """The change the log decided, if it still follows `voters` (it
        does, but for a lineage merged meanwhile, which stepped us down)."""
        decided, self.decided = self.decided, None
        assert decided is not None
        if decided.lineage == voters.lineage and decided.version == voters.version + 1:
            return decided
        if self._view.has_log:
            self._decide(ProposeVoters(None))
        return None

    def _next_change(self, voters: VoterConfig, now: float) -> VoterConfig | None:
        """The one voter change to carry in the next renewal, if any."""
        settled = now - self.elected_at >= _REAPED_GUARD_S
        kept = self._kept_left(voters, now)
        if self._view.feature_level >= META_LOG_FEATURE:  # voters have ids
            return self._replace(voters) or self.ranking.next_config(
                voters, settled, self.config.max_voters, self.came_back, self._ready, kept
            )
        if voters.ids:  # the level was lowered (an operator's cap, before a downgrade)
            return voters.without_ids()
        return self.ranking.next_config(voters, settled, self.config.max_voters, kept=kept)

    def _kept_left(self, voters: VoterConfig, now: float) -> set[str]:
        """The voters that left less than `left_voter_grace_s` ago, as this
        controller counts (module docstring, "Voters that left"); one back
        is forgotten, so that it gets the whole grace if it leaves again."""
        since = self._left_since
        self._left_since = {n: since.get(n, now) for n in self.ranking.left_voters(voters)}
        grace = self.config.left_voter_grace_s
        return {n for n, t in self._left_since.items() if now - t < grace}

    def note_identity(self, voter: str, voter_id: bytes) -> None:
        """`voter` refused a request of ours as not the voter our
        configuration names: its data directory is now `voter_id`."""
        voters = self._view.voters
        if voters is not None and voter_id and voters.id_of(voter) not in (b"", voter_id):
            if self.came_back.get(voter) != voter_id:
                self._decide(LostDisk(voter))
            self.came_back[voter] = voter_id

    def learners(self) -> tuple[str, ...]:
        """The voters that came back with a new data directory, until they
        are voters again: the metadata log replicates to them meanwhile."""
        return tuple(sorted(self.came_back))

    def _ready(self, name: str) -> bool:
        """Whether `name` may be added as a voter now (where the log decides
        changes): only once it holds the committed entries, as a non-voter
        first, a new member and one back with a new data directory alike
        (module docstring)."""
        return self._view.caught_up(name) or Controller.mutation == "unlogged"

    def _replace(self, voters: VoterConfig) -> VoterConfig | None:
        """The change that removes a voter's old identity, once it came back
        with a new data directory (module docstring); None: there is none."""
        for name, new_id in sorted(self.came_back.items()):
            old_id = voters.id_of(name)
            if old_id == new_id:
                del self.came_back[name]  # a voter again, under its new id
                continue
            if not old_id or name == self.name:
                continue  # not a voter now (the entry is the id to add it back with)
            if (name, new_id) not in self._replaced_told:
                self._replaced_told.add((name, new_id))
                self.counters.voters_replaced += 1
                self.out.events.append(VoterReplaced(name, old_id, new_id))
            return voters.without_voter(name)
        return None

    def renew(self, now: float, change: VoterConfig | None,
              old: VoterConfig | None = None) -> None:  # fmt: skip
        """Ask the voters to renew our lease, with `change` if not None."""
        voters = self._view.voters
        assert self.lease_epoch is not None and voters is not None
        self.counters.renewals += 1
        self.renew_at = now + self.config.renew_interval_s
        epoch = self.lease_epoch
        if self.fresh_epoch:  # a voter is past our epoch (after a merge): move above it
            epoch = self._view.next_epoch()
            self.fresh_epoch = False
        if change is not None:
            self._decide(Issue(epoch, change, old or voters, renewal=True))
        else:
            self._decide(Issue(epoch, voters, None, renewal=True))

    def won(self, req: Request, now: float) -> None:
        """`req` won its majority: a new lease, or a renewal of ours."""
        self.campaign.won(req, now)
        self.quorum_config = req.config
        self.lease_end_at = req.sent_at + self.config.holder_lease_s
        self.renew_at = req.sent_at + self.config.renew_interval_s
        if req.old is not None:
            self.counters.voter_changes += 1
            if self._view.has_log and self._view.feature_level >= META_LOG_FEATURE:
                # The next change the log decides need not wait a renewal
                # interval (a voter replaced is two changes: 3-5 s before, 0.5 s).
                self.renew_at = now
        if self.lease_epoch == req.epoch:
            # Members know the controller only as long as a notice vouches
            # for its lease (notices.py): tell them the lease is longer now.
            self.following.until = self.lease_end_at
            self.notices.tell(self.notice(now), now)
            return
        self.lease_epoch = req.epoch
        self.told_of_epoch = set()
        self.elected_at = now
        self.counters.elected += 1
        self.out.events.append(ControllerElected(req.epoch))
        self.following.set((self.name, req.epoch), req.epoch)
        self.following.until = self.lease_end_at
        self.notices.elected()
        self._decide(Elected())  # the level decided, then `announce`

    def announce(self, now: float) -> None:
        """Tell every member of our new lease (after `Elected`: the node
        decided the feature level the first notice announces)."""
        self.notices.tell_everyone(now, self.notice(now))

    def renewal_failed(self, now: float) -> None:
        """A renewal missed its majority: try again at once."""
        self.counters.renewals_failed += 1
        self.renew_at = now

    def step_down(self, reason: str) -> None:
        """Stop being controller: the lease `expired`, was `released` or
        `merged` into a larger lineage."""
        epoch = self.lease_epoch
        assert epoch is not None
        self.lease_epoch = None
        self.decided = None
        self._left_since = {}  # counted afresh by a later term ("Voters that left")
        self.campaign.late = None
        self.out.events.append(ControllerLost(epoch, reason))
        self.following.set(None, epoch)

    def notice(self, now: float) -> ControllerNotice:
        """Who the controller is, for the members."""
        voters = self._view.voters
        assert self.lease_epoch is not None and voters is not None
        remaining_ms = int(max(0.0, self.lease_end_at - now) * 1000)
        level = self._view.feature_level
        if voters.ids and level < META_LOG_FEATURE:
            # Lowered (a cap), but the voters' ids are still in use: the
            # members hear of the lower level with the configuration that
            # drops them, so none restarts on an older build that cannot read it.
            level = META_LOG_FEATURE
        return ControllerNotice(self.lease_epoch, self.name, self.campaign.seq, remaining_ms,
                                voters, level)  # fmt: skip
