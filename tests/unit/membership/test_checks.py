"""Checks of suspects (probing.py) and the confirmed suspicion's floor
(suspicion.py): a member that hears a suspicion probes the suspect at once."""

from shoal.membership.events import MemberDied, MemberRefuted, MemberSuspected
from shoal.membership.messages import Ping, PingReq, Suspect
from tests.unit.membership.helpers import CONFIG, Net

FLOOR_S = CONFIG.suspicion_floor_mult * CONFIG.probe_interval_s


def _formed(n: int) -> Net:
    net = Net(n)
    net.form()
    net.run(0.0, 2.0)
    return net


def _sent_by(net: Net, who: str, after: float) -> list[tuple[float, object]]:
    """(time, (to, message)) of every datagram message `who` sent after `after`."""
    return [(t, x) for t, w, x in net.timed if w == who and t > after and isinstance(x, tuple)]


def test_a_member_that_hears_a_suspicion_pings_the_suspect_at_once_with_it():
    """Told that n2 suspects n5, n1 pings n5 in the same instant, the
    suspicion attached (so that a live n5 refutes at once)."""
    net = _formed(5)
    n1, n5 = net.node(1), net.node(5)
    net.down.add(n5.ident.addr)
    inc = n1.table.get("n5").incarnation
    n1.receive(Suspect(inc, "n5", "n2"), net.node(2).ident.addr, 2.0)
    net.deliver_all(2.0)
    to_n5 = [m for t, (to, m) in _sent_by(net, "n1", 1.99) if to == n5.ident.addr]
    assert any(isinstance(m, Ping) for m in to_n5)
    assert any(isinstance(m, Suspect) and m.node == "n5" for m in to_n5)


def test_an_unanswered_check_confirms_the_suspicion_once_the_relays_have_nacked():
    """A silent suspect: the checker asks its relays after a quarter of the
    probe timeout, they nack at theirs, and the checker's own suspicion goes
    out well within the probe interval."""
    net = _formed(5)
    n1, n5 = net.node(1), net.node(5)
    net.down.add(n5.ident.addr)
    n1.receive(Suspect(n1.table.get("n5").incarnation, "n5", "n2"), ("10.0.0.2", 7946), 2.0)
    net.run(2.0, 3.0, step=0.01)
    sent = _sent_by(net, "n1", 2.0)
    asked = min(t for t, (_, m) in sent if isinstance(m, PingReq) and m.target == "n5")
    assert asked <= 2.0 + CONFIG.probe_timeout_s * 0.25 + 0.011
    confirmed = min(t for t, (_, m) in sent
                    if isinstance(m, Suspect) and m.node == "n5" and m.source == "n1")  # fmt: skip
    assert confirmed - 2.0 <= CONFIG.probe_timeout_s * 1.25 + 0.05
    assert n1.counters.suspect_checks_failed == 1


def test_a_live_suspect_answers_the_checks_refutes_and_is_confirmed_by_nobody():
    """A false suspicion (n2's probe was lost, say): every check is answered,
    n5 refutes, and no member confirms, let alone declares it dead."""
    net = _formed(5)
    n2 = net.node(2)
    n2.receive(Suspect(n2.table.get("n5").incarnation, "n5", "n2"), n2.ident.addr, 2.0)
    net.run(2.0, 20.0)
    assert any(who == "n5" for who, _ in net.of_type(MemberRefuted))
    assert sum(net.node(i).counters.suspect_checks for i in (1, 3, 4)) >= 1
    assert all(net.node(i).counters.suspect_checks_failed == 0 for i in (1, 2, 3, 4))
    assert not [e for _, e in net.of_type(MemberDied)]
    assert all(net.state_of(i, 5) == "alive" for i in (1, 2, 3, 4))


def _hang_times(refused: bool) -> tuple[float, float]:
    """n5 of 5 hangs (silent) or crashes (refused) at 2 s: the first
    suspicion of it and its first death, after the fault."""
    net = _formed(5)
    addr = net.node(5).ident.addr
    (net.refused if refused else net.down).add(addr)
    net.run(2.0, 40.0)
    about = [(t, e) for t, _, e in net.timed if t > 2.0 and getattr(e, "member", None)
             and e.member.name == "n5"]  # fmt: skip
    suspected = min(t for t, e in about if isinstance(e, MemberSuspected))
    died = min(t for t, e in about if isinstance(e, MemberDied))
    return suspected, died


def test_a_suspicion_every_other_member_confirms_ends_at_the_floor_not_before():
    """When all the others fail to reach the suspect, its death comes a
    floor (one probe interval) after the first suspicion, not memberlist's
    minimum (4 s at 5 members): both for a silent member and a refused one."""
    for refused in (False, True):
        suspected, died = _hang_times(refused)
        assert FLOOR_S - 0.05 <= died - suspected <= FLOOR_S + CONFIG.probe_interval_s
