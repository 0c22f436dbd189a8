"""A heal learned from any datagram: the node tells membership whom it heard
from (ShoalNode.receive_all -> SwimNode.heard_from), so a datagram of the
election from a member held lost is a sign of a heal like a refutation
(claims.py holds the verdicts, reconnect.py pings the lost members)."""

import random

from shoal.election.messages import NoticeQuery
from shoal.membership.events import MemberDied
from shoal.membership.messages import Alive, Dead, Ping, Suspect
from shoal.node.composition import ShoalNode
from tests.unit.membership.helpers import CONFIG, ident

# n3 is declared dead at 0; n2 suspected at SUSPECTED_AT and confirmed six
# times (the cap at 21 members), so its suspicion runs out a probe interval
# on. By then n3 has been lost for 3 probe intervals: long enough to be a sign.
SUSPECTED_AT = 2.0
RUNS_OUT_AT = SUSPECTED_AT + CONFIG.suspicion_floor_mult * CONFIG.probe_interval_s


def _node() -> ShoalNode:
    """n1 knowing n2..n21, with n3 dead (cut off, say) since 0."""
    node = ShoalNode(ident(1), CONFIG, random.Random(1))
    node.start(0.0)
    for i in range(2, 22):
        node.receive_all([Alive(1, ident(i))], ident(i).addr, 0.0)
    node.receive_all([Dead(1, "n3", "n21")], ident(21).addr, 0.0)
    node.drain()
    return node


def _suspected(node: ShoalNode, name: str, at: float) -> None:
    """`name` suspected by n21 and confirmed by n15..n20, at `at`."""
    for source in ["n21", *(f"n{i}" for i in range(15, 21))]:
        node.receive_all([Suspect(1, name, source)], ident(21).addr, at)


def _run(node: ShoalNode, start: float, until: float, inputs: dict) -> tuple:
    """Tick deadline by deadline until `until`, delivering `inputs`
    (time -> (sender's address, messages)); (deaths as (now, name), pings
    as (now, target, whether the ping carried the target's suspicion))."""
    deaths, pings = [], []
    now = start
    pending = sorted(inputs.items())
    while now <= until:
        while pending and pending[0][0] <= now:
            at, (sender, messages) = pending.pop(0)
            node.receive_all(messages, sender, at)
        node.tick(now)
        out = node.drain()
        deaths += [(now, e.member.name) for e in out.events if isinstance(e, MemberDied)]
        for send in out.send:
            suspects = {m.node for m in send.messages if isinstance(m, Suspect)}
            pings += [(now, m.target, m.target in suspects)
                      for m in send.messages if isinstance(m, Ping)]  # fmt: skip
        nexts = [t for t in (node.next_deadline(), pending[0][0] if pending else None) if t]
        now = max(now + 1e-6, min(nexts))
    return deaths, pings


def test_an_election_datagram_from_a_dead_member_holds_a_verdict_due_just_after():
    """A cut heals: the first datagram across it is the election's (here a
    NoticeQuery from n3, which n1 holds dead), 50 ms before n1's suspicion
    of n2 runs out, and n2's refutation comes 10 ms after. n1 holds the
    verdict, pings n2 with its suspicion, and n2 is never
    declared dead (on main's code it was, when the suspicion ran out)."""
    node = _node()
    _suspected(node, "n2", SUSPECTED_AT)
    heard_at = RUNS_OUT_AT - 0.05
    inputs = {
        heard_at: (ident(3).addr, [NoticeQuery(1)]),
        RUNS_OUT_AT + 0.01: (ident(2).addr, [Alive(2, ident(2))]),
    }
    deaths, pings = _run(node, SUSPECTED_AT, RUNS_OUT_AT + 2.0, inputs)
    assert deaths == []
    assert any(target == "n2" and told and heard_at <= at <= RUNS_OUT_AT
               for at, target, told in pings), pings  # fmt: skip
    m = node.swim.table.get("n2")
    assert m is not None and m.state.name == "ALIVE" and m.incarnation == 2
    assert node.swim.counters.suspicions_held == 1


def test_a_datagram_from_a_member_lost_only_a_moment_holds_nothing():
    """A member suspected (from loss, say) for less than two probe intervals
    that sends an election datagram is no sign of a heal: the verdict on a
    crashed member comes on time."""
    node = _node()
    _suspected(node, "n2", SUSPECTED_AT)
    _suspected(node, "n4", SUSPECTED_AT + 0.5)
    inputs = {RUNS_OUT_AT - 0.05: (ident(4).addr, [NoticeQuery(1)])}
    deaths, _ = _run(node, SUSPECTED_AT, RUNS_OUT_AT + 0.2, inputs)
    assert deaths == [(RUNS_OUT_AT, "n2")]
    assert node.swim.counters.suspicions_held == 0


def test_a_datagram_from_a_member_not_lost_holds_nothing():
    """The same election datagram from a member held alive: no hold."""
    node = _node()
    _suspected(node, "n2", SUSPECTED_AT)
    inputs = {RUNS_OUT_AT - 0.05: (ident(5).addr, [NoticeQuery(1)])}
    deaths, _ = _run(node, SUSPECTED_AT, RUNS_OUT_AT + 0.2, inputs)
    assert deaths == [(RUNS_OUT_AT, "n2")]


def test_the_table_keeps_the_addresses_of_the_lost_members_only():
    """`table.lost` holds each suspect or dead member's address and since
    when it has been lost (suspect, then dead: from the suspicion on), and
    is empty again once they are alive: the node tests it per datagram."""
    node = _node()
    table = node.swim.table
    assert table.lost == {ident(3).addr: ("n3", 0.0)}
    node.receive_all([Suspect(1, "n2", "n21")], ident(21).addr, 1.0)
    node.receive_all([Dead(1, "n2", "n21")], ident(21).addr, 1.5)
    assert table.lost[ident(2).addr] == ("n2", 1.0)
    node.receive_all([Alive(2, ident(2)), Alive(2, ident(3))], ident(21).addr, 2.0)
    assert table.lost == {}


def test_a_live_member_at_a_dead_members_address_is_not_a_sign_of_a_heal():
    """n3 is dead and another member, n30, now listens at n3's address (a
    machine reinstalled under another name): n30's datagrams are no sign of
    a heal (a verdict due just after one runs out on time)."""
    node = _node()
    n30 = ident(30)
    moved = type(n30)(n30.name, n30.node_id, ident(3).addr)
    node.receive_all([Alive(1, moved)], moved.addr, 0.5)
    assert node.swim.table.lost == {}
    _suspected(node, "n2", SUSPECTED_AT)
    inputs = {RUNS_OUT_AT - 0.05: (moved.addr, [NoticeQuery(1)])}
    deaths, _ = _run(node, SUSPECTED_AT, RUNS_OUT_AT + 0.2, inputs)
    assert deaths == [(RUNS_OUT_AT, "n2")]
    assert node.swim.counters.suspicions_held == 0
