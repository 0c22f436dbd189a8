"""SwimNode behaviour a user would notice, driven with explicit time."""

import random

import msgspec.structs

from shoal.kernel.contract import Address, Channel
from shoal.membership.events import (
    MemberDied,
    MemberJoined,
    MemberLeft,
    MemberRefuted,
    MemberSuspected,
    NameConflicted,
)  # fmt: skip
from shoal.membership.member import MemberState, NodeIdentity
from shoal.membership.messages import (
    Ack,
    Alive,
    Dead,
    MemberRecord,
    Nack,
    Ping,
    PingReq,
    PushPull,
    Suspect,
)  # fmt: skip
from shoal.membership.probing import COORD_SEQ_MIN
from shoal.membership.swim import SwimNode
from tests.unit.membership.helpers import CONFIG, Net, ident


def test_three_nodes_join_through_one_and_all_see_all():
    """Nodes that only know a seed end up knowing each other."""
    net = Net(3)
    net.form()
    net.run(0.0, 2.0)
    for i in (1, 2, 3):
        for j in (1, 2, 3):
            assert net.state_of(i, j) == "alive"


def test_start_persists_an_incarnation_above_the_last_run():
    """A restarted node never reuses an incarnation it announced before."""
    node = SwimNode(ident(1), CONFIG, random.Random(1), incarnation=41)
    node.start(0.0)
    out = node.drain()
    assert [p.write.incarnation for p in out.persist] == [42]
    alive = [m for s in out.send for m in s.messages if isinstance(m, Alive)]
    assert alive == [] or alive[0].incarnation == 42  # nothing sent before a peer exists


def test_a_silent_node_is_suspected_then_declared_dead_by_all():
    """A crashed member is suspected by whoever probes it, then dead everywhere."""
    net = Net(5)
    net.form()
    net.run(0.0, 2.0)
    net.down.add(net.node(5).ident.addr)
    net.run(2.0, 40.0)
    for i in (1, 2, 3, 4):
        assert net.state_of(i, 5) == "dead"
    suspected = net.of_type(MemberSuspected)
    assert suspected and all(e.source in {"n1", "n2", "n3", "n4"} for _, e in suspected)
    assert {who for who, e in net.of_type(MemberDied)} == {"n1", "n2", "n3", "n4"}


def test_a_suspected_node_refutes_and_records_who_suspected_it():
    """A live node that hears it is suspected raises its incarnation and stays alive."""
    net = Net(3)
    net.form()
    net.run(0.0, 1.0)
    n2 = net.node(2)
    before = n2.incarnation
    n2.receive(Suspect(before, "n2", "n3"), net.node(3).ident.addr, 1.0)
    net.run(1.0, 3.0)
    assert n2.incarnation == before + 1
    assert net.persisted["n2"] == before + 1
    assert net.state_of(1, 2) == "alive" and net.state_of(3, 2) == "alive"
    refuted = [e for who, e in net.of_type(MemberRefuted) if who == "n2"]
    assert refuted and refuted[0].source == "n3"


def test_a_ping_to_a_suspect_carries_the_suspicion_buddy_system():
    """The suspect hears about its suspicion along with the next ping to it."""
    net = Net(2)
    net.form()
    n1 = net.node(1)
    n1.receive(Suspect(n1.table.get("n2").incarnation, "n2", "n9"), ("10.0.0.9", 1), 0.5)
    n1.drain()
    now = 0.5
    while True:
        now += 0.1
        n1.tick(now)
        sends = n1.drain().send
        pings = [s for s in sends if any(isinstance(m, Ping) for m in s.messages)]
        if pings:
            assert any(isinstance(m, Suspect) and m.node == "n2" for m in pings[0].messages)
            return
        assert now < 5.0


def test_leave_is_seen_as_left_never_as_failed():
    """A graceful leave is recorded as left by every member."""
    net = Net(4)
    net.form()
    net.run(0.0, 2.0)
    net.node(4).leave(2.0)
    net.run(2.0, 3.0)
    net.down.add(net.node(4).ident.addr)  # the process exits after the leave
    net.run(3.0, 40.0)
    for i in (1, 2, 3):
        assert net.state_of(i, 4) == "left"
    assert not [e for _, e in net.of_type(MemberDied) if e.member.name == "n4"]
    assert {who for who, e in net.of_type(MemberLeft)} >= {"n1", "n2", "n3"}


def test_a_node_that_left_can_join_again_without_restarting():
    """After `shoal leave`, `shoal join` brings the same process back."""
    net = Net(3)
    net.form()
    net.run(0.0, 1.0)
    n3 = net.node(3)
    n3.leave(1.0)
    net.run(1.0, 2.0)
    assert net.state_of(1, 3) == "left"
    n3.join([net.node(1).ident.addr], 2.0)
    net.run(2.0, 4.0)
    assert net.state_of(1, 3) == "alive" and net.state_of(2, 3) == "alive"
    assert not n3.leaving


def test_a_restarted_node_with_a_new_address_rejoins_at_once():
    """Same name and id at a new address is the same node, not a conflict."""
    net = Net(3)
    net.form()
    net.run(0.0, 1.0)
    old = net.node(3)
    net.down.add(old.ident.addr)
    moved = NodeIdentity("n3", old.ident.node_id, ("10.0.0.33", 7946))
    new = net.add(SwimNode(moved, CONFIG, random.Random(7), incarnation=net.persisted["n3"]))
    new.start(1.0)
    new.join([net.node(1).ident.addr], 1.0)
    net.deliver_all(1.0)
    net.run(1.0, 2.0)
    for i in (1, 2):
        m = net.node(i).table.get("n3")
        assert m.state.label == "alive" and m.ident.addr == ("10.0.0.33", 7946)
    assert not net.of_type(NameConflicted)


def test_a_second_node_with_a_taken_name_is_refused_and_reported():
    """An impostor with another id is kept out, with an event naming both ids."""
    net = Net(2)
    net.form()
    net.run(0.0, 1.0)
    impostor = NodeIdentity("n2", b"\x99" * 16, ("10.0.0.99", 7946))
    bad = net.add(SwimNode(impostor, CONFIG, random.Random(9)))
    bad.start(1.0)
    bad.join([net.node(1).ident.addr], 1.0)
    net.deliver_all(1.0)
    m = net.node(1).table.get("n2")
    assert m.ident.node_id == bytes([2]) * 16 and m.ident.addr == ("10.0.0.2", 7946)
    conflicts = [e for who, e in net.of_type(NameConflicted) if who == "n1"]
    assert conflicts and conflicts[0].claimed_id == b"\x99" * 16


def test_stale_full_state_cannot_bring_back_a_reaped_member():
    """A removed node stays removed even if an old view still lists it."""
    from msgspec.structs import replace

    config = replace(CONFIG, left_reap_s=5.0)
    net = Net(3, config=config)
    net.form()
    net.run(0.0, 1.0)
    n3_ident, n3_inc = net.node(3).ident, net.node(3).incarnation
    net.node(3).leave(1.0)
    net.run(1.0, 1.5)
    net.down.add(n3_ident.addr)
    net.run(1.5, 8.0)
    n1 = net.node(1)
    assert n1.table.get("n3") is None
    stale = PushPull("n2", False, True, (MemberRecord(n3_ident, n3_inc, _alive()),))
    n1.receive(stale, net.node(2).ident.addr, 8.0)
    assert n1.table.get("n3") is None
    assert n1.counters.ignored_ghost == 1


def _alive():
    from shoal.membership.member import MemberState

    return MemberState.ALIVE


def test_pings_for_someone_else_are_dropped_and_counted():
    """A ping that reaches a reused address is not answered for the wrong node."""
    node = SwimNode(ident(1), CONFIG, random.Random(1))
    node.start(0.0)
    node.drain()
    node.receive(Ping(5, "somebody-else", "n9"), ("10.0.0.9", 7946), 0.1)
    assert not [m for s in node.drain().send for m in s.messages if isinstance(m, Ack)]
    assert node.counters.misdirected_pings == 1


def test_join_uses_a_stream_and_reports_failure():
    """Joining an address where nobody answers reports the failure."""
    from shoal.membership.events import JoinCompleted

    node = SwimNode(ident(1), CONFIG, random.Random(1))
    node.start(0.0)
    node.join([("10.9.9.9", 7946)], 0.0)
    out = node.drain()
    assert any(s.channel is Channel.STREAM and s.to == ("10.9.9.9", 7946) for s in out.send)
    node.stream_failed(("10.9.9.9", 7946), 1.0)
    assert JoinCompleted(("10.9.9.9", 7946), False) in node.drain().events


def test_tags_change_reaches_others():
    """New tags are announced with a higher incarnation."""
    net = Net(2)
    net.form()
    net.node(2).set_tags((("role", "db"),), 0.5)
    net.run(0.5, 1.0)
    assert net.node(1).table.get("n2").ident.tags == (("role", "db"),)
    assert [e for _, e in net.of_type(MemberJoined)]


def test_configured_seeds_are_retried_until_a_member_is_known():
    """An agent started before its seed keeps trying, then stops once joined."""
    seed_addr = ("10.0.0.50", 7946)
    node = SwimNode(ident(1), CONFIG, random.Random(1))
    node.start(0.0)
    node.join([seed_addr], 0.0, retry=True)
    node.drain()
    node.stream_failed(seed_addr, 0.0)  # refused: the seed is not up yet
    attempts = []
    now = 0.0
    while now < 40.0 and len(attempts) < 4:
        now = round(now + 0.1, 3)
        node.tick(now)
        if [s for s in node.drain().send if s.to == seed_addr]:
            attempts.append(now)
            node.stream_failed(seed_addr, now)
    assert len(attempts) == 4
    gaps = [b - a for a, b in zip([0.0, *attempts], attempts)]
    assert gaps == sorted(gaps) and gaps[0] >= 1.0  # backing off
    node.receive(Alive(1, ident(2)), ("10.0.0.2", 7946), now)  # someone found us
    later = [s for t in range(1, 400) for s in _tick(node, now + t * 0.1) if s.to == seed_addr]
    assert later == []
    assert node.table.get("n2").state.label == "alive"


def _tick(node, now):
    """Tick, and answer every ping sent to n2 as a live n2 would."""
    node.tick(now)
    sends = node.drain().send
    for send in sends:
        for msg in send.messages:
            if isinstance(msg, Ping) and send.to == ("10.0.0.2", 7946):
                node.receive(Ack(msg.seq), send.to, now)
    return sends


def _streams(node):
    return [s.to for s in node.drain().send if s.channel is Channel.STREAM]


def test_a_ping_from_a_member_we_do_not_know_starts_a_sync_with_it():
    """A node that joined in the same instant as others may miss some of them;
    the first ping from one of those starts a full sync with the prober, at
    most one per probe interval, and none for pings from known members."""
    node = SwimNode(ident(1), CONFIG, random.Random(1))
    node.start(0.0)
    node.receive(Alive(1, ident(2)), ident(2).addr, 0.0)
    node.drain()
    node.receive(Ping(1, "n1", "n2"), ident(2).addr, 0.1)
    assert _streams(node) == []
    node.receive(Ping(2, "n1", "n3"), ident(3).addr, 0.2)
    assert _streams(node) == [ident(3).addr]
    node.receive(Ping(3, "n1", "n4"), ident(4).addr, 0.3)
    assert _streams(node) == []  # within the probe interval of the last one
    later = 0.2 + CONFIG.probe_interval_s
    node.receive(Ping(4, "n1", "n4"), ident(4).addr, later)
    assert _streams(node) == [ident(4).addr]
    assert node.counters.stranger_syncs == 2


def test_news_that_arrives_while_gossip_is_paced_goes_out_within_a_quarter_interval():
    """Fresh news does not wait out a whole gossip interval behind older news."""
    node = SwimNode(ident(1), CONFIG, random.Random(1))
    node.start(0.0)
    node.receive(Alive(1, ident(2)), ident(2).addr, 0.0)
    node.tick(0.0)
    node.drain()  # the news of n2 went out at once; the next tick is paced
    node.receive(Alive(1, ident(3)), ident(3).addr, 0.01)
    quarter = CONFIG.gossip_interval_s / 4
    sent_at = None
    now = 0.01
    while sent_at is None and now < CONFIG.gossip_interval_s:
        now = round(now + 0.005, 3)
        node.tick(now)
        out = [m for s in node.drain().send if s.channel is not Channel.STREAM for m in s.messages]
        if any(isinstance(m, Alive) and m.node.name == "n3" for m in out):
            sent_at = now
    assert sent_at is not None and sent_at <= quarter + 0.005


def _crash_and_time_suspicion(refused: bool) -> tuple[float, float, float]:
    """Crash n5 of a formed 5-node net at 2 s; the time of the first ping to
    it after the crash, of the first suspicion of it, and of its first death."""
    net = Net(5)
    net.form()
    net.run(0.0, 2.0)
    addr = net.node(5).ident.addr
    (net.refused if refused else net.down).add(addr)
    net.run(2.0, 40.0)
    after = [(t, who, x) for t, who, x in net.timed if t > 2.0]
    pinged = min(t for t, _, x in after if isinstance(x, tuple) and x[0] == addr
                 and isinstance(x[1], Ping))  # fmt: skip
    about_n5 = [(t, x) for t, _, x in after if getattr(x, "member", None) and x.member.name == "n5"]
    suspected = min(t for t, x in about_n5 if isinstance(x, MemberSuspected))
    died = min(t for t, x in about_n5 if isinstance(x, MemberDied))
    return pinged, suspected, died


def test_a_crashed_agent_whose_host_refuses_the_probe_is_suspected_without_waiting():
    """When the host of a crashed agent answers "port unreachable", the prober
    asks its relays at once, they are refused too and nack, and the member is
    suspected in the same instant; a silent member is suspected only at the
    end of the probe interval. The suspicion timeout is the same either way."""
    pinged, suspected, died = _crash_and_time_suspicion(refused=True)
    assert suspected == pinged
    # every other member confirms at once (checks): the floor applies
    assert died - suspected >= CONFIG.suspicion_floor_mult * CONFIG.probe_interval_s - 0.05
    pinged, suspected, _ = _crash_and_time_suspicion(refused=False)
    assert suspected - pinged >= CONFIG.probe_interval_s - 0.05


def test_a_probe_refused_on_one_path_only_is_answered_through_the_relays():
    """A refusal on our path alone (a host firewall) suspects nobody: the
    relays still reach the member and forward its ack."""
    net = Net(5)
    net.form()
    net.run(0.0, 2.0)
    net.refused.add((net.node(1).ident.addr, net.node(5).ident.addr))
    net.run(2.0, 30.0)
    assert net.node(1).counters.probes_refused >= 1
    assert not [e for _, e in net.of_type(MemberSuspected) if e.member.name == "n5"]
    assert net.state_of(1, 5) == "alive"


def test_a_relay_whose_ping_is_refused_nacks_at_once():
    """A relayed ping that the target's host refuses is nacked to the
    requester at once, not at the relay's timeout."""
    node = SwimNode(ident(1), CONFIG, random.Random(1))
    node.start(0.0)
    node.receive(Alive(1, ident(2)), ident(2).addr, 0.0)
    node.drain()
    node.receive(PingReq(7, "n9", ident(9).addr, True), ident(2).addr, 0.1)
    node.drain()
    node.unreachable(ident(9).addr, 0.1)
    sent = [(s.to, m) for s in node.drain().send for m in s.messages]
    assert (ident(2).addr, Nack(7)) in sent


def _next_probe(node: SwimNode, now: float) -> tuple[str, float]:
    """Tick `node` deadline by deadline until it sends a probe; its target and time
    (reconnect pings to lost members, numbered below COORD_SEQ_MIN, are not probes)."""
    while True:
        for send in node.drain().send:
            for m in send.messages:
                if isinstance(m, Ping) and m.seq >= COORD_SEQ_MIN:
                    return m.target, now
        now = node.next_deadline()
        assert now is not None
        node.tick(now)


def test_a_live_member_whose_host_refuses_a_datagram_is_probed_next():
    """A refusal for a member we are not probing moves it to the front of the
    probe order."""
    node = SwimNode(ident(1), CONFIG, random.Random(1))
    node.start(0.0)
    for i in range(2, 12):
        node.receive(Alive(1, ident(i)), ident(i).addr, 0.0)
    node.drain()
    targets = []
    now = 0.0
    for subject in (7, 3, 10):
        node.unreachable(ident(subject).addr, now)
        target, now = _next_probe(node, now)
        targets.append(target)
    assert targets == ["n7", "n3", "n10"]


def _direct(node: SwimNode) -> list[tuple[Address, object]]:
    return [(s.to, m) for s in node.drain().send if s.channel is not Channel.STREAM
            for m in s.messages]  # fmt: skip


def _answer_join(node: SwimNode, seed: int, members: range, now: float) -> None:
    """The seed's reply to `node`'s join: itself and `members`, all alive."""
    records = tuple(MemberRecord(ident(i), 1, MemberState.ALIVE) for i in (seed, *members))
    node.receive(PushPull(f"n{seed}", True, True, records), ident(seed).addr, now)


def test_a_node_whose_join_is_answered_tells_the_members_it_learned_directly():
    """Gossip alone reaches the last member late (or, now and then, not before
    the next push-pull); a joiner tells every member of its seed's table at once,
    except the seed, once per incarnation, and at most join_direct_max of them."""
    node = SwimNode(ident(1), msgspec.structs.replace(CONFIG, join_direct_max=5),
                    random.Random(1))  # fmt: skip
    node.start(0.0)
    node.join([ident(2).addr], 0.0)
    node.drain()
    _answer_join(node, 2, range(3, 6), 0.1)
    told = {to for to, m in _direct(node) if m == Alive(node.incarnation, node.ident)}
    assert told == {ident(i).addr for i in (3, 4, 5)}
    node.join([ident(3).addr], 0.2)
    node.drain()
    _answer_join(node, 3, range(2, 12), 0.3)  # six members it had not heard of
    told = [to for to, m in _direct(node) if m == Alive(node.incarnation, node.ident)]
    assert len(told) == 5 and set(told) <= {ident(i).addr for i in range(6, 12)}


def test_a_stale_suspicion_is_answered_with_the_refutation_we_hold():
    """Whoever spreads a suspicion older than the refutation gets the
    refutation back, directly: it missed it, and would otherwise declare a live
    member dead. Once per sender and member per probe interval."""
    node = SwimNode(ident(1), CONFIG, random.Random(1))
    node.start(0.0)
    for i in (2, 3):
        node.receive(Alive(4, ident(i)), ident(i).addr, 0.0)
    node.drain()
    node.receive(Suspect(3, "n2", "n3"), ident(3).addr, 0.1)
    node.receive(Suspect(3, "n2", "n3"), ident(3).addr, 0.1)
    node.receive(Dead(2, "n2", "n3"), ident(3).addr, 0.1)
    assert _direct(node) == [(ident(3).addr, Alive(4, ident(2)))]
    assert node.counters.corrections_sent == 1
    # about ourselves: our own newer incarnation
    node.receive(Suspect(node.incarnation - 1, "n1", "n3"), ident(3).addr, 0.2)
    assert _direct(node) == [(ident(3).addr, Alive(node.incarnation, node.ident))]
    # a current suspicion is not "stale": it is taken, not answered
    node.receive(Suspect(4, "n2", "n3"), ident(3).addr, 0.3)
    assert all(to != ident(3).addr or not isinstance(m, Alive) for to, m in _direct(node))
    assert node.table.get("n2").state is MemberState.SUSPECT


def test_corrections_are_answered_every_probe_interval_even_when_local_health_is_poor():
    """A member back from a cut has a poor local health score (rounds 8
    times as long) and many stale claims about itself to answer: after
    its 64 corrections of a probe interval it answers again the next one,
    not 8 s later, when its next probe round comes."""
    node = SwimNode(ident(1), CONFIG, random.Random(1))
    node.health.apply(CONFIG.awareness_max_multiplier)  # the worst score
    node.start(0.0)
    node.receive(Alive(4, ident(2)), ident(2).addr, 0.0)
    node.tick(2.0)  # its first probe round is over, the next one 8 s after it
    node.drain()
    senders = range(10, 10 + 64)
    for i in senders:
        node.receive(Suspect(3, "n2", f"n{i}"), ident(i).addr, 2.1)
    assert {to for to, m in _direct(node) if isinstance(m, Alive)} == {
        ident(i).addr for i in senders}  # fmt: skip
    node.receive(Suspect(3, "n2", "n80"), ident(80).addr, 2.2)
    assert not [m for _, m in _direct(node) if isinstance(m, Alive)]  # 64 this interval
    at = 2.1 + CONFIG.probe_interval_s
    node.tick(at)
    node.drain()
    node.receive(Suspect(3, "n2", "n80"), ident(80).addr, at)
    assert _direct(node) == [(ident(80).addr, Alive(4, ident(2)))]


def test_a_suspicion_at_a_newer_incarnation_starts_over_instead_of_confirming_ours():
    """We missed a member's refutation and still suspect its old incarnation;
    another member suspects it again, at the new one. That is a new suspicion
    with its own timeout, not a confirmation of ours: counted as one, it ended
    our long-standing suspicion at once and declared a live member dead."""
    node = SwimNode(ident(1), CONFIG, random.Random(1))
    node.start(0.0)
    for i in range(2, 6):
        node.receive(Alive(1, ident(i)), ident(i).addr, 0.0)
    node.receive(Suspect(1, "n2", "n3"), ident(3).addr, 0.0)
    (check,) = [m for _, m in _direct(node) if isinstance(m, Ping) and m.target == "n2"]
    node.receive(Ack(check.seq, 0), ident(2).addr, 0.01)  # n2 answers our check
    node.receive(Suspect(1, "n2", "n4"), ident(4).addr, 0.1)  # one confirmation
    node.drain()
    node.tick(6.0)  # 6 s: past the timeout of a fully confirmed suspicion
    node.receive(Suspect(2, "n2", "n5"), ident(5).addr, 6.0)
    node.tick(6.0)
    m = node.table.get("n2")
    assert (m.state, m.incarnation) == (MemberState.SUSPECT, 2)
    assert not [e for e in node.drain().events if isinstance(e, MemberDied)]


def test_our_own_suspicion_coming_back_in_a_push_pull_is_no_confirmation():
    """At a partition's heal we push our table (with a suspicion of ours) to a
    peer; its answer holds the same suspicion. A table does not say who
    suspects: taking it as the peer's confirmation shortened our timeout and
    declared a live member dead at once (issue 28's partition test)."""
    node = SwimNode(ident(1), CONFIG, random.Random(1))
    node.start(0.0)
    for i in range(2, 6):
        node.receive(Alive(1, ident(i)), ident(i).addr, 0.0)
    node.receive(Suspect(1, "n2", "n1"), ident(1).addr, 0.0)  # our own suspicion
    node.drain()
    deadline = node.claims.suspicions["n2"].deadline_at
    records = tuple(MemberRecord(ident(i), 1, MemberState.SUSPECT if i == 2 else MemberState.ALIVE)
                    for i in range(2, 6))  # fmt: skip
    node.receive(PushPull("n3", False, True, records), ident(3).addr, 3.0)
    assert node.claims.suspicions["n2"].deadline_at == deadline
    node.tick(3.0)
    assert not [e for e in node.drain().events if isinstance(e, MemberDied)]
