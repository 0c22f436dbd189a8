"""Members lost to a cut are pinged again, at a bounded cost (reconnect.py)."""

import random

from shoal.kernel.contract import Channel
from shoal.membership.messages import Ack, Alive, Dead, Ping, PushPull
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
