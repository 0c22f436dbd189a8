"""A member that has just started asks the voters for the controller's
notice (election/notices.py, `KnownController.ask_voters`): it knows the
controller as soon as its view shows the voters, not at the next renewal,
and only for the lease the answer vouches for (issue 28)."""

from __future__ import annotations

import random

from shoal.election.config import LeaseConfig
from shoal.election.lease import LeaseElection
from shoal.election.messages import (
    ControllerNotice,
    LeaseGrant,
    LeaseRequest,
    NoticeQuery,
    PreVote,
    PreVoteGrant,
)
from shoal.election.view import Liveness, ViewMember
from shoal.election.voters import VoterConfig

CONFIG = VoterConfig(b"L" * 8, 1, ("a", "b", "c"))
LIVE = Liveness.LIVE


def addr(name: str) -> tuple[str, int]:
    return (f"10.0.0.{ord(name)}", 7946)


def core(name: str, states: dict[str, Liveness], voters: VoterConfig | None = CONFIG,
         granted_epoch: int = 0) -> LeaseElection:  # fmt: skip
    """`name`'s election as a start leaves it: `voters` stored by its last
    run, a view of `states` (name -> liveness) that the test changes."""
    view = lambda: [ViewMember(n, (), st) for n, st in states.items()]  # noqa: E731
    return LeaseElection(name, LeaseConfig(), random.Random(1), view, addr, granted_epoch,
                         voters, liveness_of=states.get)  # fmt: skip


def queries(el: LeaseElection) -> list[tuple[tuple[str, int], object]]:
    return [(s.to, m) for s in el.drain().all_sends() for m in s.messages
            if isinstance(m, NoticeQuery)]  # fmt: skip


def test_a_restarted_member_asks_each_voter_once_as_its_view_shows_it():
    states = {"d": LIVE}  # a start: the view knows only this node
    el = core("d", states)
    el.start(0.0)
    el.view_changed(0.0)
    assert queries(el) == []  # nobody to ask yet
    states.update(a=LIVE, b=Liveness.DEAD)
    el.view_changed(0.2)  # the join's push-pull: a live, b reported dead
    assert queries(el) == [(addr("a"), NoticeQuery(0))]
    states.update(b=LIVE, c=LIVE, e=LIVE)  # e is no voter: never asked
    el.view_changed(0.3)
    assert sorted(to for to, _ in queries(el)) == [addr("b"), addr("c")]
    el.view_changed(0.4)
    assert queries(el) == []  # once per voter
    assert el.known is None  # asking names nobody


def test_a_voter_restarted_asks_the_other_voters_not_itself():
    states = {"c": LIVE, "a": LIVE, "b": LIVE}
    el = core("c", states, granted_epoch=3)
    el.start(0.0)
    el.view_changed(0.1)
    assert sorted(to for to, _ in queries(el)) == [addr("a"), addr("b")]


def test_a_member_that_stored_no_voters_or_has_heard_a_notice_asks_nobody():
    states = {"d": LIVE, "a": LIVE, "b": LIVE, "c": LIVE}
    new = core("d", states, voters=None)  # a first start: no configuration stored
    new.start(0.0)
    new.view_changed(0.1)
    assert queries(new) == []
    seen = {"d": LIVE}
    told = core("d", seen)
    told.start(0.0)
    told.receive(ControllerNotice(1, "a", 5, 1960, CONFIG), addr("a"), 0.1)
    told.drain()
    seen.update(a=LIVE, b=LIVE, c=LIVE)
    told.view_changed(0.2)
    assert queries(told) == []  # the notices come as they always did


def elected(name: str = "a") -> LeaseElection:
    """Voter `name`, controller of the configuration (b grants its pre-vote
    and its request)."""
    el = core(name, {"a": LIVE, "b": LIVE, "c": LIVE})
    el.start(0.0)
    el.tick(0.0)  # the best-ranked stands within 10 ms (jitter)
    el.tick(el.next_deadline() or 0.0)
    (pre, *_) = [m for s in el.drain().all_sends() for m in s.messages
                 if isinstance(m, PreVote)]  # fmt: skip
    assert el.campaign.request is not None
    el.receive(PreVoteGrant(pre.seq, pre.epoch, "b"), addr("b"), el.campaign.request.sent_at)
    (req, *_) = [m for s in el.drain().all_sends() for m in s.messages
                 if isinstance(m, LeaseRequest)]  # fmt: skip
    el.receive(LeaseGrant(req.seq, req.epoch, "b"), addr("b"), 0.05)
    el.drain()
    assert el.is_controller
    return el


def test_the_controller_answers_at_once_and_the_member_knows_it_for_that_lease_only():
    """The answer is a notice like any other: the member names the
    controller for the lease it vouches for, and no longer without another."""
    controller = elected("a")
    voter_b = core("b", {"a": LIVE, "b": LIVE, "c": LIVE})
    states = {"d": LIVE}
    member = core("d", states)
    member.start(0.0)
    now = 0.5
    states.update(a=LIVE, b=LIVE, c=LIVE)
    member.view_changed(now)
    asked = dict(queries(member))
    assert set(asked) == {addr("a"), addr("b"), addr("c")}
    voter_b.receive(asked[addr("b")], addr("d"), now)  # not the controller: ignored
    assert not [m for s in voter_b.drain().all_sends() for m in s.messages
                if isinstance(m, ControllerNotice)]  # fmt: skip
    controller.receive(asked[addr("a")], addr("d"), now)
    (answer,) = controller.drain().all_sends()
    assert answer.to == addr("d")
    (notice,) = answer.messages
    assert isinstance(notice, ControllerNotice) and notice.holder == "a"
    member.receive(notice, addr("a"), now + 0.001)
    assert member.known == ("a", notice.epoch)
    assert member.following.until == now + 0.001 + notice.remaining_ms / 1000
    assert member.following.until <= controller.lease_end_at + 0.001
    member.tick(member.following.until)
    assert member.known is None  # no later notice: forgotten when its lease ends
