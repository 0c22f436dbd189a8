"""The roles decide, the façade acts (election/decisions.py): each role, alone,
with a view that only answers and a list it records its decisions in."""

import random

from shoal.election.campaign import Request
from shoal.election.config import LeaseConfig
from shoal.election.decisions import (
    Adopt,
    Follow,
    Granted,
    HoldOff,
    ReleaseOwn,
    SawEpoch,
    Superseded,
    Vouch,
    Wake,
    YieldCampaign,
)
from shoal.election.events import ElectionCounters, PersistElection
from shoal.election.lease import LeaseElection
from shoal.election.messages import ControllerNotice, LeaseGrant, LeaseRequest
from shoal.election.notices import KnownController
from shoal.election.ranking import Ranking, Standing
from shoal.election.view import Liveness, ViewMember
from shoal.election.voter import Grant, Voter
from shoal.election.voters import VoterConfig
from shoal.kernel.outbox import Outbox

CONFIG = VoterConfig(b"L" * 8, 1, ("a", "b", "c"))
NEWER = VoterConfig(b"L" * 8, 2, ("a", "b", "c"))


class View:
    """A read-only view whose answers the test sets."""

    def __init__(self, voters: VoterConfig | None = CONFIG) -> None:
        self.voters = voters
        self.feature_level = 1
        self.has_log = False
        self.log_position = lambda: (0, 0)
        self.log_ready = lambda: True
        self.caught_up = lambda name: True
        self.above: set[str] = set()

    def next_epoch(self) -> int:
        return 1

    def ranks_above_me(self, candidate: str) -> bool:
        return candidate in self.above

    def would_yield(self, candidate: str) -> bool:
        return False


def a_voter(view: View, decisions: list) -> tuple[Voter, Outbox]:
    out = Outbox()
    return Voter("b", LeaseConfig(), out, ElectionCounters(), 0, view, decisions), out


def test_a_voter_returns_a_newer_configuration_to_adopt_and_changes_nothing_first():
    view, decisions = View(), []
    voter, out = a_voter(view, decisions)
    req = LeaseRequest(7, 1, "a", NEWER)
    assert voter.vote(req, 0.0) == Adopt(NEWER)
    assert decisions == [] and voter.granted_epoch == 0 and not out
    view.voters = NEWER  # the façade adopted it, and asks again
    assert voter.vote(req, 0.0) == LeaseGrant(7, 1, "b")
    assert decisions == [SawEpoch(1), Granted()]
    assert out.drain().persist[0].write == PersistElection(1, NEWER)


def test_a_voter_holding_its_own_grant_asks_for_our_campaign_to_be_yielded_first():
    view, decisions = View(), []
    voter, _ = a_voter(view, decisions)
    voter.granted_epoch, voter.grant = 3, Grant("b", 3, 10.0, 1)
    req = LeaseRequest(7, 3, "a", CONFIG)
    assert voter.vote(req, 0.0) == YieldCampaign("a")
    voter.grant = None  # the façade yielded: our campaign gave our grant back
    assert voter.vote(req, 0.0, yielded=3) == LeaseGrant(7, 3, "b")  # even its epoch


def test_a_voter_refusing_a_better_candidate_decides_to_hold_off():
    view, decisions = View(), []
    view.above = {"c"}
    voter, _ = a_voter(view, decisions)
    voter.granted_epoch, voter.grant = 2, Grant("a", 2, 5.0, 1)
    voter.vote(LeaseRequest(7, 3, "c", CONFIG), 1.0)
    assert decisions == [HoldOff(5.0 + 2 * LeaseConfig().request_timeout_s)]


def test_a_notice_decides_in_order_what_the_node_does_and_adopts_first():
    view, decisions = View(), []
    out, standing = Outbox(), Standing(Ranking("b", lambda: [], False), 1.0, random.Random(1))
    known = KnownController("b", LeaseConfig(), out, ElectionCounters(), standing, None, view,
                            decisions, lambda name, msg: None)  # fmt: skip
    notice = ControllerNotice(4, "a", 9, 1960, CONFIG, 1)
    assert known.on_notice(notice, 0.0) is None
    assert decisions == [SawEpoch(4), Superseded(4), Follow(notice), Vouch("a", 4, 9), Wake()]
    assert known.known is None  # knowing it is the façade's step (`Follow`), after `Superseded`
    decisions.clear()
    newer = ControllerNotice(5, "c", 1, 1960, NEWER, 1)
    assert known.on_notice(newer, 1.0) == Adopt(NEWER) and decisions == []
    known.on_notice(newer, 1.0, adopted=True)  # another lineage's epoch: nothing of ours
    assert decisions == [SawEpoch(5), Follow(newer), Wake()]


def test_a_failed_campaign_gives_our_grant_back_before_it_holds_off():
    """`on_release` clears the back-off: the order of the decisions matters."""
    el = LeaseElection("a", LeaseConfig(), random.Random(1), lambda: [
        ViewMember(n, (), Liveness.LIVE) for n in "abc"], lambda n: ("10.0.0.1", 7946), 0,
        CONFIG)  # fmt: skip
    req = Request(1, 2, CONFIG, None, 0.0, 1.0, False, 0.5, granted={"a", "c"})
    el.candidacy.request_failed(req, 0.0)
    (release, hold, wake) = el.decisions
    assert release == ReleaseOwn(2) and isinstance(hold, HoldOff) and wake == Wake()
    el.voter.grant = Grant("a", 2, 5.0)
    el._act(0.0)  # noqa: SLF001
    assert el.decisions == [] and el.voter.grant is None
    assert el.standing.blocked_until == hold.until


def test_the_facade_leaves_no_decision_behind():
    el = LeaseElection("b", LeaseConfig(), random.Random(1), lambda: [], lambda n: None, 0,
                       CONFIG)  # fmt: skip
    el.receive(LeaseRequest(7, 1, "a", NEWER), ("10.0.0.9", 7946), 0.0)
    assert el.decisions == [] and el.voters == NEWER and el.granted_epoch == 1
