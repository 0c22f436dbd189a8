"""Members lost to a cut are pinged again, at a bounded cost (reconnect.py)."""

import random

from shoal.kernel.contract import Channel
from shoal.membership.messages import Ack, Alive, Dead, Ping, PushPull, Suspect
from shoal.membership.probing import COORD_SEQ_MIN
from shoal.membership.swim import SwimNode
from tests.unit.membership.helpers import CONFIG, ident

DIED_AT = 0.0


def _dead_member_node() -> SwimNode:
    """n1 knowing n2, then told by n3 that n2 is dead, before its first probe."""
    node = SwimNode(ident(1), CONFIG, random.Random(1))
    node.start(0.0)
    node.receive(Alive(1, ident(2)), ident(2).addr, 0.0)
    node.receive(Dead(1, "n2", "n3"), ident(3).addr, DIED_AT)
    return node


def _run(node: SwimNode, start: float, until: float) -> list[tuple[float, object, object]]:
    """Tick deadline by deadline; every datagram sent as (now, to, message)."""
    sent = []
    now = start
    while now <= until:
        node.tick(now)
        for send in node.drain().send:
            sent += [(now, send.to, m) for m in send.messages]
        at = node.next_deadline()
        assert at is not None
        now = max(now, at)
    return sent


def test_a_dead_member_is_pinged_within_a_probe_interval_and_at_most_64_times():
    """Declared dead, n2 gets its first reconnect ping within a probe
    interval, one per probe interval for 60 s, four more with backoff, and
    none after about 60 + 30 s: at most 64 in all (the bound in the docs)."""
    node = _dead_member_node()
    sent = _run(node, DIED_AT, 200.0)
    pings = [at for at, to, m in sent
             if to == ident(2).addr and isinstance(m, Ping) and m.seq < COORD_SEQ_MIN]  # fmt: skip
    assert pings and pings[0] <= DIED_AT + CONFIG.probe_interval_s
    assert len(pings) <= CONFIG.reconnect_fast_s / CONFIG.probe_interval_s + 4
    # 2 + 4 + 8 + 16 s of backoff after the fast minute, which ends at a
    # turn of the round robin (one interval, from a random phase)
    last_at = DIED_AT + CONFIG.reconnect_fast_s + 30.0 + 2 * CONFIG.probe_interval_s
    assert pings[-1] <= last_at
    fast = [at for at in pings if at < DIED_AT + CONFIG.reconnect_fast_s]
    gaps = [b - a for a, b in zip(fast, fast[1:], strict=False)]
    assert max(gaps) <= CONFIG.probe_interval_s + 1e-9


def test_an_answer_from_a_dead_member_starts_a_push_pull_with_it():
    """n2 acks a reconnect ping: n1 syncs its whole table with n2 at once."""
    node = _dead_member_node()
    sent = _run(node, DIED_AT, DIED_AT + 1.0)
    (seq,) = [m.seq for _, to, m in sent if to == ident(2).addr and isinstance(m, Ping)]
    node.receive(Ack(seq), ident(2).addr, DIED_AT + 1.0)
    out = node.drain().send
    assert any(s.to == ident(2).addr and s.channel is Channel.STREAM
               and isinstance(s.messages[0], PushPull) for s in out)  # fmt: skip
    assert node.counters.reconnects_answered == 1


def _suspecting_node(members: int, suspects: range) -> SwimNode:
    """n1 knowing n2..n(members + 1), its own probes having failed on `suspects`."""
    node = SwimNode(ident(1), CONFIG, random.Random(1))
    node.start(0.0)
    for i in range(2, members + 2):
        node.receive(Alive(1, ident(i)), ident(i).addr, 0.0)
    for i in suspects:
        node.receive(Suspect(1, f"n{i}", "n1"), ident(i).addr, 0.1)  # n1's own verdict
    node.drain()
    return node


def _reconnect_pings(sends: list) -> dict[str, bool]:
    """Reconnect pings in `sends`: target -> whether its suspicion rode along."""
    pings = {}
    for send in sends:
        msgs = send.messages
        for m in msgs:
            if isinstance(m, Ping) and m.seq < COORD_SEQ_MIN:
                pings[m.target] = any(isinstance(x, Suspect) and x.node == m.target for x in msgs)
    return pings


def test_a_suspect_that_pings_us_has_the_other_suspects_told_at_once():
    """Twenty members cut off and suspected by n1; the cut heals and one of
    them pings n1. That is a sign the others are back too: sixteen of them
    (the bound per probe interval) get a ping with their suspicion at once,
    so they refute now, not at their turn of the round robin."""
    node = _suspecting_node(40, range(2, 22))
    node.receive(Ping(COORD_SEQ_MIN, "n1", "n2"), ident(2).addr, 0.5)
    pings = _reconnect_pings(node.drain().send)
    assert len(pings) == 16 and all(pings.values()), pings
    assert set(pings) <= {f"n{i}" for i in range(3, 22)}
    # another one within the same probe interval: no second burst
    node.receive(Ping(COORD_SEQ_MIN + 1, "n1", "n3"), ident(3).addr, 0.6)
    assert not _reconnect_pings(node.drain().send)


def test_a_member_only_we_suspect_is_pinged_every_probe_interval_at_60_members():
    """At 60 members the round robin of the dead is slowed (16 pings a
    second for the whole cluster), but a suspicion of our own is told to
    its suspect once per probe interval: nobody else will tell it."""
    node = _suspecting_node(59, range(2, 3))
    at = []
    now = 0.1
    while now < 4.0:
        node.tick(now)
        sends = node.drain().send
        at += [now for target in _reconnect_pings(sends) if target == "n2"]
        for send in sends:  # every other member answers its probes
            for m in send.messages:
                if isinstance(m, Ping) and m.seq >= COORD_SEQ_MIN and m.target != "n2":
                    node.receive(Ack(m.seq), send.to, now)
        deadline = node.next_deadline()
        assert deadline is not None
        now = max(now, deadline)
    assert at and at[0] <= 0.1 + CONFIG.probe_interval_s
    gaps = [b - a for a, b in zip(at, at[1:], strict=False)]
    assert len(at) >= 3 and max(gaps) <= CONFIG.probe_interval_s + 1e-9, at


def test_a_burst_tells_suspects_of_others_suspicions_however_young():
    """Suspicions raised by other members during a cut wait two probe
    intervals for the round robin (a false one from loss is refuted
    sooner), but when a lost member is heard from, a cut may have healed:
    the burst pings those suspects too, with their suspicion."""
    node = SwimNode(ident(1), CONFIG, random.Random(1))
    node.start(0.0)
    for i in range(2, 12):
        node.receive(Alive(1, ident(i)), ident(i).addr, 0.0)
    for i in range(2, 7):
        node.receive(Suspect(1, f"n{i}", "n11"), ident(11).addr, 0.1)
    node.drain()
    node.receive(Alive(2, ident(2)), ident(2).addr, 0.2)  # n2 refutes
    pings = _reconnect_pings(node.drain().send)
    assert pings == {f"n{i}": True for i in range(3, 7)}, pings


def test_a_burst_pings_the_suspects_before_the_dead():
    """Twenty members declared dead, then one suspected: when a lost member
    is heard from, the suspect is among the sixteen pinged at once (its
    suspicion would end in a death; the dead rejoin anyway)."""
    node = SwimNode(ident(1), CONFIG, random.Random(1))
    node.start(0.0)
    for i in range(2, 30):
        node.receive(Alive(1, ident(i)), ident(i).addr, 0.0)
    for i in range(2, 23):
        node.receive(Dead(1, f"n{i}", "n29"), ident(29).addr, 0.1)
    node.receive(Suspect(1, "n23", "n29"), ident(29).addr, 0.2)
    node.drain()
    node.receive(Alive(2, ident(2)), ident(2).addr, 0.3)  # n2 is back
    pings = _reconnect_pings(node.drain().send)
    assert len(pings) == 16 and pings.get("n23") is True, pings
