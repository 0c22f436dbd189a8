"""A suspicion that runs out just after a lost member was heard from is held
for a probe timeout, and its suspect pinged (claims.py, `Claims._hold`)."""

import random

from shoal.membership.events import MemberDied
from shoal.membership.messages import Alive, Dead, Ping, Suspect
from shoal.membership.swim import SwimNode
from tests.unit.membership.helpers import CONFIG, ident

SUSPECTED_AT = 0.1
# Six confirmations of a suspicion raised by n21: the cap at 20 members
# (k = 2, four fast ones), so the suspicion runs out one probe interval on.
RUNS_OUT_AT = SUSPECTED_AT + CONFIG.suspicion_floor_mult * CONFIG.probe_interval_s


def _node() -> SwimNode:
    """n1 knowing n2..n21."""
    node = SwimNode(ident(1), CONFIG, random.Random(1))
    node.start(0.0)
    for i in range(2, 22):
        node.receive(Alive(1, ident(i)), ident(i).addr, 0.0)
    node.drain()
    return node


def _dead(node: SwimNode, name: str) -> None:
    """`name` declared dead by n21 at 0 (cut off, say)."""
    node.receive(Dead(1, name, "n21"), ident(21).addr, 0.0)
    node.drain()


def _suspected(node: SwimNode, name: str, at: float) -> None:
    """`name` suspected by n21 and confirmed by n15..n20, at `at`."""
    for source in ["n21", *(f"n{i}" for i in range(15, 21))]:
        node.receive(Suspect(1, name, source), ident(21).addr, at)


def _run(node: SwimNode, start: float, until: float, answer: dict[float, Alive]) -> tuple:
    """Tick deadline by deadline until `until`, delivering `answer`'s
    refutations at their times; (deaths as (now, name), pings to suspects
    that carried their suspicion, as (now, name))."""
    deaths, pings = [], []
    now = start
    pending = sorted(answer.items())
    while now <= until:
        while pending and pending[0][0] <= now:
            at, alive = pending.pop(0)
            node.receive(alive, alive.node.addr, at)
        node.tick(now)
        out = node.drain()
        deaths += [(now, e.member.name) for e in out.events if isinstance(e, MemberDied)]
        for send in out.send:
            targets = {m.target for m in send.messages if isinstance(m, Ping)}
            pings += [(now, m.node) for m in send.messages
                      if isinstance(m, Suspect) and m.node in targets]  # fmt: skip
        nexts = [t for t in (node.next_deadline(), pending[0][0] if pending else None) if t]
        now = max(now + 1e-6, min(nexts))
    return deaths, pings


def test_a_suspect_whose_refutation_comes_just_after_its_suspicion_ran_out_stays_alive():
    """A cut heals: n3, declared dead in it, is heard alive again. n2's
    suspicion runs out a moment later, before n2's own refutation arrives
    (10 ms later): n1 holds the verdict, pings n2 with its suspicion, and
    n2 is never declared dead."""
    node = _node()
    _dead(node, "n3")
    _suspected(node, "n2", SUSPECTED_AT)
    heard_at = RUNS_OUT_AT - 0.05
    answers = {heard_at: Alive(2, ident(3)), RUNS_OUT_AT + 0.01: Alive(2, ident(2))}
    deaths, pings = _run(node, SUSPECTED_AT, RUNS_OUT_AT + 2.0, answers)
    assert deaths == []
    assert any(name == "n2" and heard_at <= at <= RUNS_OUT_AT for at, name in pings), pings
    m = node.table.get("n2")
    assert m is not None and m.state.name == "ALIVE" and m.incarnation == 2
    assert node.counters.suspicions_held == 1


def test_without_a_lost_member_heard_the_same_suspicion_ends_on_time():
    """The same suspicion with nobody heard from: n2 is declared dead when
    it runs out, and its late refutation brings it back as a rejoin."""
    node = _node()
    _suspected(node, "n2", SUSPECTED_AT)
    late = {RUNS_OUT_AT + 0.01: Alive(2, ident(2))}
    deaths, _ = _run(node, SUSPECTED_AT, RUNS_OUT_AT + 2.0, late)
    assert [name for _, name in deaths] == ["n2"]
    assert abs(deaths[0][0] - RUNS_OUT_AT) < 1e-6
    assert node.counters.suspicions_held == 0


def test_a_held_suspect_that_does_not_answer_is_declared_dead_a_probe_timeout_later():
    """The hold is once and short: a suspect that stays silent is declared
    dead at most a probe timeout after its suspicion ran out."""
    node = _node()
    _dead(node, "n3")
    _suspected(node, "n2", SUSPECTED_AT)
    heard = {RUNS_OUT_AT - 0.05: Alive(2, ident(3))}
    deaths, _ = _run(node, SUSPECTED_AT, RUNS_OUT_AT + 5.0, heard)
    (at, name), = deaths  # fmt: skip
    assert name == "n2"
    assert RUNS_OUT_AT < at <= RUNS_OUT_AT + CONFIG.probe_timeout_s + 1e-6


def test_a_suspicion_raised_after_the_lost_member_was_heard_is_not_held():
    """A crash after the heal: its suspicion started after n3 was heard
    from, so it ends on time (detection is not slowed by the hold)."""
    node = _node()
    _dead(node, "n3")
    node.receive(Alive(2, ident(3)), ident(3).addr, SUSPECTED_AT + 0.1)
    _suspected(node, "n2", SUSPECTED_AT + 0.2)
    deaths, _ = _run(node, SUSPECTED_AT + 0.2, RUNS_OUT_AT + 2.0, {})
    (at, name), = deaths  # fmt: skip
    assert name == "n2" and abs(at - (RUNS_OUT_AT + 0.2)) < 1e-6
    assert node.counters.suspicions_held == 0


def test_a_false_suspicion_refuted_quickly_is_no_sign_of_a_heal():
    """Loss makes false suspicions, refuted within a second or so: such a
    refutation holds no other verdict (a crash is detected on time)."""
    node = _node()
    _suspected(node, "n2", SUSPECTED_AT)
    _suspected(node, "n3", SUSPECTED_AT)
    quick = {RUNS_OUT_AT - 0.05: Alive(2, ident(3))}  # n3 refutes after 0.95 s
    deaths, _ = _run(node, SUSPECTED_AT, RUNS_OUT_AT + 2.0, quick)
    assert [name for _, name in deaths] == ["n2"]
    assert abs(deaths[0][0] - RUNS_OUT_AT) < 1e-6
