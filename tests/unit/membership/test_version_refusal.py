"""Refusal by versions in the membership core: a peer whose ranges do not
overlap is refused on join, by gossip and by push-pull, never half-merged
(memberlist's TestVerifyProtocol, driven through SwimNode)."""

from __future__ import annotations

import random

from shoal.kernel.versions import THIS_BUILD, Versions
from shoal.membership.events import JoinCompleted, MemberJoined, MemberRefused
from shoal.membership.member import NodeIdentity
from shoal.membership.messages import Alive, PushPull
from shoal.membership.swim import SwimNode
from tests.unit.membership.helpers import CONFIG, Net

FAR_AHEAD = Versions((1, 1), (3, 4), (1, 1), (1, 1), 3)  # two releases ahead: no overlap
NEXT = Versions((1, 1), (1, 2), (1, 1), (1, 1), 2)  # one release ahead: overlaps


def newcomer(net: Net, i: int, versions: Versions) -> SwimNode:
    ident = NodeIdentity(f"n{i}", bytes([i]) * 16, (f"10.0.0.{i}", 7946), (), versions)
    return net.add(SwimNode(ident, CONFIG, random.Random(i)))


def test_an_incompatible_agent_is_refused_on_join_and_says_why_on_both_sides():
    """Its join fails (the seed answers with its own row only, which the
    newcomer refuses), nobody lists it, and both report the refusal."""
    net = Net(3)
    net.form()
    far = newcomer(net, 9, FAR_AHEAD)
    far.start(0.0)
    far.join([net.node(1).ident.addr], 0.0)
    net.deliver_all(0.0)
    for i in (1, 2, 3):
        assert net.state_of(i, 9) is None
    assert far.table.get("n1") is None
    refused = net.of_type(MemberRefused)
    assert {who for who, _ in refused} >= {"n1", "n9"}
    seed_side = next(e for who, e in refused if who == "n1")
    assert seed_side.protocols == ("membership",) and seed_side.theirs == FAR_AHEAD
    assert ("n9", JoinCompleted(net.node(1).ident.addr, False)) in net.events
    assert net.node(1).counters.refused_push_pulls == 1


def test_gossip_about_an_incompatible_member_is_refused_and_counted():
    """An Alive naming a member we cannot talk with is never merged."""
    net = Net(2)
    net.form()
    far = NodeIdentity("n9", bytes([9]) * 16, ("10.0.0.9", 7946), (), FAR_AHEAD)
    net.node(1).receive(Alive(1, far), net.node(2).ident.addr, 0.1)
    net.deliver_all(0.1)
    assert net.state_of(1, 9) is None and net.state_of(2, 9) is None
    assert net.node(1).counters.ignored_incompatible == 1
    assert [e.name for _, e in net.of_type(MemberRefused)] == ["n9"]


def test_a_push_pull_row_of_an_incompatible_member_is_refused_the_rest_merged():
    """A compatible peer's table that lists an incompatible member: the
    others are merged, that one is not."""
    net = Net(1)
    net.form()
    me = net.node(1)
    peer = NodeIdentity("n2", bytes([2]) * 16, ("10.0.0.2", 7946), (), NEXT)
    far = NodeIdentity("n9", bytes([9]) * 16, ("10.0.0.9", 7946), (), FAR_AHEAD)
    from shoal.membership.table import alive_row

    me.receive(PushPull("n2", False, True, (alive_row(peer, 1), alive_row(far, 1))),
               peer.addr, 0.1)  # fmt: skip
    assert net.state_of(1, 2) == "alive" and net.state_of(1, 9) is None


def test_adjacent_releases_form_one_cluster():
    """The release and the next one (overlapping ranges) see each other."""
    net = Net(2)
    nxt = newcomer(net, 3, NEXT)
    net.form()
    nxt.join([net.node(1).ident.addr], 0.0)
    net.deliver_all(0.0)
    assert net.state_of(1, 3) == "alive" and net.state_of(2, 3) == "alive"
    assert nxt.table.get("n2") is not None
    assert not net.of_type(MemberRefused)
    assert any(e.member.name == "n3" for _, e in net.of_type(MemberJoined))


def test_a_member_restarted_on_an_incompatible_build_stops_counting():
    """A known member that comes back announcing versions we cannot talk
    with is declared failed here, not kept alive under its old row."""
    net = Net(2)
    net.form()
    restarted = NodeIdentity("n2", bytes([2]) * 16, ("10.0.0.2", 7946), (), FAR_AHEAD)
    net.node(1).receive(Alive(50, restarted), ("10.0.0.2", 7946), 0.2)
    assert net.state_of(1, 2) == "dead"
    assert THIS_BUILD is net.node(1).table.versions
