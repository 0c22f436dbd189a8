"""Readers see a frozen status snapshot of a node, not its cores' tables."""

from __future__ import annotations

import random

import msgspec
import pytest

from shoal.membership.member import MemberState, NodeIdentity
from shoal.membership.profiles import PROFILES
from shoal.node.composition import ShoalNode
from shoal.node.status import NodeStatus, status, summary


def node(name: str = "n1", last: int = 1) -> ShoalNode:
    ident = NodeIdentity(name, bytes([last]) * 16, ("10.0.0.1", 7946), (("rack", "r1"),))
    n = ShoalNode(ident, PROFILES["local"], random.Random(1))
    n.start(0.0)
    return n


def test_a_started_node_reports_itself_alive_and_no_controller():
    """A lone node lists itself, alive, with its tags, and knows no controller."""
    n = node()
    s = status(n)
    assert s.me.name == "n1" and s.me.state is MemberState.ALIVE
    assert s.members == (s.me,) and s.me.tags == (("rack", "r1"),)
    assert (s.controller, s.epoch, s.is_controller) == (None, None, False)
    assert (s.voters, s.voters_version, s.records, s.live_peers) == ((), 0, 0, 0)
    assert s.counters == n.counters()
    assert summary(n) == msgspec.structs.replace(summary(n), live_peers=0, known=1)


def test_the_snapshot_is_frozen_and_does_not_follow_the_node():
    """A snapshot keeps what it saw; a later write shows in the next one."""
    n = node()
    before = status(n)
    n.write(b"k", b"v", 1.0)
    assert status(n).records == 1 and before.records == 0
    with pytest.raises(AttributeError):
        before.records = 5  # type: ignore[misc]
    assert isinstance(before, NodeStatus)


def test_a_controller_reports_its_own_lease_epoch_never_a_successors():
    """`is_self` with an epoch is a fencing token: a controller that has heard
    of a successor (its clock slow, its lease not yet run out by it) still
    reports the epoch of the lease it holds, not the successor's."""
    ident = NodeIdentity("n1", b"\x01" * 16, ("10.0.0.1", 7946), ())
    n = ShoalNode(ident, PROFILES["local"], random.Random(1), bootstrap_expect=1)
    n.start(0.0)
    now = 0.0
    while not n.election.is_controller and now < 30:
        now += 0.05
        n.tick(now)
        n.drain()
    mine = n.election.lease_epoch
    assert mine is not None
    n.election.following.set(("n2", mine + 3), mine + 3)  # a successor heard of
    s = status(n)
    assert (s.controller, s.epoch, s.is_controller) == ("n1", mine, True)
