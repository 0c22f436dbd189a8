"""Anti-entropy follows membership: ShoalNode's wiring of the view to the
sync core (peers chosen among alive members, a session with a member that
comes back)."""

from __future__ import annotations

import random

from shoal.kernel.contract import Channel
from shoal.membership.member import Member, MemberState, NodeIdentity
from shoal.membership.messages import Alive, Dead, Suspect
from shoal.membership.profiles import PROFILES
from shoal.node.composition import ShoalNode
from shoal.storage.messages import RecordPush, SyncTree


def ident(i: int) -> NodeIdentity:
    return NodeIdentity(f"n{i}", bytes([i]) * 16, (f"10.0.0.{i}", 7946))


def formed(n: int = 6) -> ShoalNode:
    """Node n0, started knowing n1..n(n-1) alive at incarnation 1."""
    node = ShoalNode(ident(0), PROFILES["lan"], random.Random(7))
    node.adopt({ident(i).name: Member(ident(i), 1, MemberState.ALIVE) for i in range(n)})
    node.start(0.0)
    node.drain()
    return node


def sync_sends(node: ShoalNode, kind: type) -> list:
    return [s.to for s in node.drain().send if isinstance(s.messages[0], kind)]


def test_pushes_and_sessions_go_to_alive_members_only():
    """Writes are pushed, and sessions opened, only to members the view
    holds alive: never to a suspect (maybe cut off) or a dead one."""
    node = formed()
    node.receive(Suspect(1, "n1", "n2"), ident(2).addr, 1.0)
    node.receive(Suspect(1, "n3", "n2"), ident(2).addr, 1.0)
    node.receive(Dead(1, "n4", "n2"), ident(2).addr, 1.0)
    node.drain()
    pushed: set = set()
    for k in range(30):
        node.write(b"k%d" % k, b"v", 1.0 + k * 0.001)
        pushed |= set(sync_sends(node, RecordPush))
    assert pushed == {ident(2).addr, ident(5).addr}
    sessions: set = set()
    now = 1.0
    while now < 120.0:
        now = node.next_deadline()
        node.tick(now)
        out = node.drain()
        for s in out.send:
            if isinstance(s.messages[0], SyncTree):
                sessions.add(s.to)
                node.stream_failed(s.to, now)  # no answers in this test
            elif s.channel is Channel.STREAM:
                node.stream_failed(s.to, now)
    assert sessions and sessions <= {ident(2).addr, ident(5).addr}


def test_a_member_back_from_suspect_or_dead_gets_a_session_at_once():
    """When the view sees a member alive again (a refuted suspicion, a
    return from dead at a new incarnation), a session with it starts at
    once; a first join does not (the newcomer syncs on its own start)."""
    node = formed()
    node.receive(Suspect(1, "n1", "n2"), ident(2).addr, 1.0)
    node.receive(Dead(1, "n3", "n2"), ident(2).addr, 1.0)
    node.drain()
    node.receive(Alive(2, ident(1)), ident(1).addr, 2.0)
    assert sync_sends(node, SyncTree) == [ident(1).addr]
    node.stream_failed(ident(1).addr, 2.1)
    node.receive(Alive(2, ident(3)), ident(2).addr, 2.2)
    node.tick(2.2)
    assert sync_sends(node, SyncTree) == [ident(3).addr]
    node.receive(Alive(1, ident(9)), ident(9).addr, 2.4)  # a newcomer
    node.receive(Alive(3, ident(1)), ident(1).addr, 2.4)  # alive, alive before
    assert node.counters()["sync_sessions_on_return"] == 2  # none queued
