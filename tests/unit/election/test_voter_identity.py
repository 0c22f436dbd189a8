"""A voter is its name and its data directory's id (issue 37;
election/voters.py, "Identity"): a node whose disk was wiped never grants,
and never counts, as its old self; the controller removes the old identity;
and messages keep their 0.2.0 shapes until the configuration has ids."""

import random

import cbor2
import pytest

from shoal.daemon.disk.datadir import DataDir
from shoal.election.config import LeaseConfig
from shoal.election.events import PersistElection, VoterReplaced, election_fields
from shoal.election.lease import LeaseElection
from shoal.election.messages import (
    REJECT_IDENTITY,
    REJECT_NOT_VOTER,
    LeaseGrant,
    LeaseReject,
    LeaseRequest,
    PreVote,
)
from shoal.election.view import Liveness, ViewMember
from shoal.election.voters import VoterConfig
from shoal.kernel import codec
from shoal.kernel.codec import DecodeError

ID = {n: bytes([ord(n)]) * 16 for n in "abc"}
WIPED_B = b"\x99" * 16
LEGACY = VoterConfig(b"L" * 8, 1, ("a", "b", "c"))
NAMED = VoterConfig(b"L" * 8, 2, ("a", "b", "c"), (ID["a"], ID["b"], ID["c"]))
PEER = ("10.0.0.9", 7946)


def node(name: str, node_id: bytes, config: VoterConfig | None = NAMED,
         level: int = 2) -> LeaseElection:  # fmt: skip
    view = lambda: [ViewMember(n, (), Liveness.LIVE, ID[n]) for n in "abc"]  # noqa: E731
    el = LeaseElection(name, LeaseConfig(), random.Random(1), view,
                       lambda n: (f"10.0.0.{ord(n)}", 7946), 0, config, 3, None,
                       node_id)  # fmt: skip
    el.feature_level = level
    return el


def answer(el: LeaseElection, msg: object, now: float = 0.0) -> object:
    el.receive(msg, PEER, now)
    out = el.drain()
    (reply,) = [m for s in out.all_sends() for m in s.messages]
    return reply


def wire(msg: object) -> list:
    return cbor2.loads(codec.encode_payload([msg]))[0]


def test_a_wiped_voter_never_grants_as_its_old_self():
    """b's disk was wiped: it boots with nothing (no epoch, no
    configuration, no log) under its name and a new id. A request naming b
    with its old id is refused, nothing is promised or written, and the
    refusal tells the candidate b's new id."""
    b = node("b", WIPED_B, config=None)
    reply = answer(b, LeaseRequest(7, 5, "a", NAMED, 0, 0, ID["a"]))
    assert isinstance(reply, LeaseReject) and reply.reason == REJECT_IDENTITY
    assert reply.voter_id == WIPED_B
    assert b.granted_epoch == 0 and b.voter.grant is None
    pre = answer(b, PreVote(8, 5, "a", NAMED, 0, 0, ID["a"]))
    assert isinstance(pre, LeaseReject) and pre.reason == REJECT_IDENTITY
    assert b.counters.identity_refusals == 2


def test_the_voter_named_with_its_own_id_grants_and_says_who_it_is():
    b = node("b", ID["b"])
    reply = answer(b, LeaseRequest(7, 5, "a", NAMED, 0, 0, ID["a"]))
    assert reply == LeaseGrant(7, 5, "b", ID["b"])


def test_a_candidate_with_another_data_directory_is_refused():
    """A request from `a` whose id is not the one the configuration names
    for `a` is from a wiped `a`, standing as its old self."""
    b = node("b", ID["b"])
    reply = answer(b, LeaseRequest(7, 5, "a", NAMED, 0, 0, WIPED_B))
    assert isinstance(reply, LeaseReject) and reply.reason == REJECT_IDENTITY
    assert b.granted_epoch == 0


def test_without_ids_a_voter_is_its_name_and_answers_in_the_old_shapes():
    """Before feature level 2 the configuration has no ids: a voter grants
    by name, and every message is the one a 0.2.0 agent reads (its tag, its
    fields, a configuration of three items)."""
    b = node("b", WIPED_B, config=LEGACY, level=1)
    request = LeaseRequest(7, 5, "a", LEGACY)
    assert wire(request) == [20, 7, 5, "a", [b"L" * 8, 1, ["a", "b", "c"]]]
    reply = answer(b, request)
    assert reply == LeaseGrant(7, 5, "b") and wire(reply) == [21, 7, 5, "b"]
    refusal = answer(node("d", b"\x01" * 16, LEGACY), request)
    assert refusal.reason == REJECT_NOT_VOTER and wire(refusal)[0] == 22


@pytest.mark.parametrize("msg", [
    LeaseRequest(7, 5, "a", NAMED, 3, 9, ID["a"]),
    PreVote(7, 5, "a", NAMED, 0, 0, ID["a"]),
    LeaseGrant(7, 5, "b", ID["b"]),
    LeaseReject(7, "b", REJECT_IDENTITY, 4, "", 0, NAMED, WIPED_B),
])  # fmt: skip
def test_messages_with_ids_take_their_own_tags_and_come_back_equal(msg):
    fields = wire(msg)
    assert 80 <= fields[0] <= 83
    assert codec.decode_payload(codec.encode_payload([msg])) == [msg]


@pytest.mark.parametrize("ids", [
    [b"\x01" * 16, b"\x02" * 16],  # one id short
    [b"\x01" * 16, b"\x02" * 15, b"\x03" * 16],  # not 16 bytes
    [b"", b"", b""],  # an id list without an id
])  # fmt: skip
def test_a_configuration_with_bad_ids_is_refused_at_the_boundary(ids):
    payload = cbor2.dumps([[24, 1, "a", 1, 100, [b"L" * 8, 2, ["a", "b", "c"], ids], 2]])
    with pytest.raises(DecodeError):
        codec.decode_payload(payload)


def test_a_grant_from_another_data_directory_does_not_count():
    """The candidate counts a grant only from the voter its configuration
    names: two grants, one from a wiped `b`, are not a majority of three."""
    a = node("a", ID["a"])
    a.issue(0.0, 5, NAMED, None, renewal=False)
    assert a.drain() is not None and a.campaign.request is not None
    seq = a.campaign.request.seq
    a.receive(LeaseGrant(seq, 5, "b", WIPED_B), PEER, 0.01)
    assert not a.is_controller and a.counters.identity_refusals == 1
    a.receive(LeaseGrant(seq, 5, "c", ID["c"]), PEER, 0.02)
    assert a.is_controller


def test_the_controller_replaces_a_voter_that_came_back_with_a_new_disk():
    """A renewal refused with REJECT_IDENTITY names b's new id: the log
    forgets what b's old self acknowledged, the next change removes b's old
    identity (`voter-replaced`, once), and b, replicated to as a non-voter
    meanwhile, is added back under its new id once it has caught up."""
    a = node("a", ID["a"])
    forgotten: list[str] = []
    log_has = {"b": False}
    a.lost_disk = forgotten.append
    a.caught_up = lambda name: log_has[name]
    a.issue(0.0, 5, NAMED, None, renewal=False)
    seq = a.campaign.request.seq
    a.receive(LeaseGrant(seq, 5, "c", ID["c"]), PEER, 0.01)
    assert a.is_controller
    a.drain()
    a.tick(1.0)  # the first renewal: nothing to change
    renewal = a.campaign.request
    a.receive(LeaseReject(renewal.seq, "b", REJECT_IDENTITY, 0, "", 0, NAMED, WIPED_B), PEER, 1.01)
    a.receive(LeaseGrant(renewal.seq, 5, "c", ID["c"]), PEER, 1.02)
    a.drain()
    a.tick(2.0)
    change = a.campaign.request
    assert change.config.voters == ("a", "c") and change.old == NAMED
    events = [e for e in a.drain().events if isinstance(e, VoterReplaced)]
    assert events == [VoterReplaced("b", ID["b"], WIPED_B)]
    assert election_fields(events[0])["reason"] == "came back with a new data directory"
    assert forgotten == ["b"] and a.controller.learners() == ("b",)
    a.receive(LeaseGrant(change.seq, 5, "c", ID["c"]), PEER, 2.01)
    a.drain()
    a.tick(3.0)  # the change won, but b has not caught up: no change
    held = a.campaign.request
    assert held.old is None and held.config.voters == ("a", "c")
    a.receive(LeaseGrant(held.seq, 5, "c", ID["c"]), PEER, 3.01)
    a.drain()
    log_has["b"] = True
    a.tick(4.0)  # caught up: b comes back as a new voter, with its new id
    back = a.campaign.request
    assert back.config.voters == ("a", "b", "c") and back.config.id_of("b") == WIPED_B
    a.receive(LeaseGrant(back.seq, 5, "c", ID["c"]), PEER, 4.01)
    a.receive(LeaseGrant(back.seq, 5, "b", WIPED_B), PEER, 4.02)
    a.drain()
    a.tick(5.0)
    assert a.controller.learners() == () and forgotten == ["b"]  # a voter again


def test_at_level_2_the_controller_fills_in_the_ids_of_a_legacy_configuration():
    a = node("a", ID["a"], config=LEGACY)
    a.issue(0.0, 5, LEGACY, None, renewal=False)
    a.receive(LeaseGrant(a.campaign.request.seq, 5, "c"), PEER, 0.01)
    assert a.is_controller
    a.drain()
    a.tick(1.0)
    filled = a.campaign.request.config
    assert filled.voters == LEGACY.voters and filled.ids == (ID["a"], ID["b"], ID["c"])
    assert filled.version == LEGACY.version + 1


def test_the_ids_are_kept_in_the_data_directory(tmp_path):
    data = DataDir(tmp_path, 4, "prod")
    data.save_election(5, NAMED)
    data.close()
    again = DataDir(tmp_path, 4, "prod")
    assert again.load_election() == (5, NAMED)
    again.save_election(6, LEGACY)
    again.close()
    third = DataDir(tmp_path, 4, "prod")
    assert third.load_election() == (6, LEGACY)
    third.close()


def test_a_persisted_configuration_keeps_its_ids():
    b = node("b", ID["b"], config=LEGACY)
    b.receive(LeaseRequest(7, 5, "a", NAMED, 0, 0, ID["a"]), PEER, 0.0)
    writes = [p.write for p in b.drain().persist]
    assert writes[0] == PersistElection(0, NAMED)  # adopted, then granted under it
    assert writes[-1] == PersistElection(5, NAMED)


def test_a_lowered_level_drops_the_ids_before_the_members_hear_of_it():
    """`shoal features --cap 1` before a downgrade: the controller's next
    change drops the voters' ids (a 0.2.0 build reads configurations of
    three items only), and its notices announce level 1 only with that
    configuration, so no member restarts on the old build holding ids."""
    a = node("a", ID["a"])
    a.issue(0.0, 5, NAMED, None, renewal=False)
    a.receive(LeaseGrant(a.campaign.request.seq, 5, "c", ID["c"]), PEER, 0.01)
    assert a.is_controller
    a.feature_level = 1  # the cap, as the node decided it
    assert a.controller.notice(0.5).level == 2  # the ids are still in use
    a.drain()
    a.tick(1.0)
    change = a.campaign.request
    assert change.config.voters == NAMED.voters and change.config.ids == ()
    assert change.message("a") == LeaseRequest(change.seq, 5, "a", change.config)  # 0.2.0's shape
    a.receive(LeaseGrant(change.seq, 5, "c", ID["c"]), PEER, 1.01)
    notices = [m for s in a.drain().all_sends() for m in s.messages if hasattr(m, "level")]
    assert notices and all(n.level == 1 and n.config.ids == () for n in notices)
