"""A late confirmation that ends an old suspicion at once is held for a
probe timeout, and the suspect pinged (SuspicionTimer.hold, `overdue`):
after a heal, such a confirmation was held back by the cut, or is a
push-pull's echo of the observer's own side's verdict."""

import random

from shoal.membership.events import MemberDied
from shoal.membership.messages import Alive, Ping, Suspect
from shoal.membership.swim import SwimNode
from tests.unit.membership.helpers import CONFIG, ident

# n2 suspected at 0 by n21 and confirmed by n15..n17, and by n1's own check
# at 1 s: four confirmations of the six counted at 21 members, so its
# suspicion ends at 3.14 s (min_s 5.29 s, halfway down to the floor of one
# probe interval); a fifth one moves that to 2.07 s.
SOURCES = ["n21", "n15", "n16", "n17"]
LATE = 3.1  # three probe intervals into the suspicion, before it ends


def _node() -> SwimNode:
    """n1 knowing n2..n21, suspecting n2 since 0 with four confirmations."""
    node = SwimNode(ident(1), CONFIG, random.Random(1))
    node.start(0.0)
    for i in range(2, 22):
        node.receive(Alive(1, ident(i)), ident(i).addr, 0.0)
    for source in SOURCES:
        node.receive(Suspect(1, "n2", source), ident(21).addr, 0.0)
    node.drain()
    return node


def _run(node: SwimNode, until: float, inputs: dict) -> tuple:
    """Tick deadline by deadline from 0 to `until`, delivering `inputs`
    (time -> message, from its node); (deaths as (now, name), times of
    pings to n2 that carried its suspicion)."""
    deaths, pings = [], []
    pending = sorted(inputs.items())
    now = 0.0
    while now <= until:
        while pending and pending[0][0] <= now:
            at, msg = pending.pop(0)
            sender = msg.node if isinstance(msg, Alive) else ident(int(msg.source[1:]))
            node.receive(msg, sender.addr, at)
        node.tick(now)
        out = node.drain()
        deaths += [(now, e.member.name) for e in out.events if isinstance(e, MemberDied)]
        for send in out.send:
            kinds = {type(m) for m in send.messages}
            if Ping in kinds and any(isinstance(m, Suspect) and m.node == "n2"
                                     for m in send.messages):  # fmt: skip
                pings.append(now)
        nexts = [t for t in (node.next_deadline(), pending[0][0] if pending else None) if t]
        now = max(now + 1e-6, min(nexts))
    return deaths, pings


def test_a_confirmation_that_ends_an_old_suspicion_at_once_is_held():
    """A fifth confirmation of n2's suspicion arrives at 3.1 s, just
    before its deadline, and moves the deadline to 2.07 s: the verdict is
    held (the suspicion is three probe intervals old), n2 is pinged with
    its suspicion, refutes 10 ms later and is never declared dead (on
    main's code it was, at 3.1 s)."""
    node = _node()
    inputs = {LATE: Suspect(1, "n2", "n19"), LATE + 0.01: Alive(2, ident(2))}
    deaths, pings = _run(node, LATE + 2.0, inputs)
    assert deaths == []
    assert LATE in pings
    assert node.counters.suspicions_held == 1


def test_a_held_overdue_suspect_that_stays_silent_dies_a_probe_timeout_later():
    """The same, with no answer: dead a probe timeout after the confirmation."""
    node = _node()
    deaths, _ = _run(node, 5.0, {LATE: Suspect(1, "n2", "n19")})
    (at, name), = deaths  # fmt: skip
    assert name == "n2" and abs(at - (LATE + CONFIG.probe_timeout_s)) < 1e-6


def test_a_young_suspicion_ended_by_a_confirmation_is_not_held():
    """A crash: the checks' confirmations arrive about a second into its
    suspicion, and the one that reaches the cap (the floor: one probe
    interval) ends it at once, as before."""
    node = _node()
    inputs = {0.5: Suspect(1, "n2", "n19"), 1.2: Suspect(1, "n2", "n20")}
    deaths, _ = _run(node, 3.0, inputs)
    assert deaths == [(1.2, "n2")]
    assert node.counters.suspicions_held == 0
