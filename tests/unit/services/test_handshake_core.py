"""The first-contact handshake's pure core (services/handshake.py), told the
time: what it sends, holds, releases and refuses, with no sockets."""

from shoal.kernel.contract import Send
from shoal.kernel.sealing import UNBOUND, Envelope, Hello, ReplayWindows, Welcome, binding
from shoal.kernel.versions import THIS_BUILD, TWO_AHEAD_STANDIN
from shoal.services.handshake import (
    HELD_FOR_S,
    HELLO_RETRY_S,
    REPLY_GAP_S,
    Handshake,
    Refused,
    Released,
)

A_TAG, B_TAG = b"A" * 8, b"B" * 8
B_ADDR = ("10.0.0.2", 7946)


def core(versions=THIS_BUILD) -> tuple[Handshake, ReplayWindows]:
    sessions = ReplayWindows(A_TAG, 1)
    return Handshake(sessions, versions), sessions


def heard(sessions: ReplayWindows, tag: bytes = B_TAG, run: int = 5, counter: int = 1) -> None:
    """B's envelope passed the `ReplayWindows` (as the wire checks before the core)."""
    sessions.check(Envelope(tag, run, UNBOUND, counter))


def test_a_send_to_an_unknown_address_waits_for_the_welcome_then_leaves_bound():
    hs, sessions = core()
    note = Send(B_ADDR, ("note",))
    assert hs.to(B_ADDR) is None
    hs.hold(note, 0.0)
    out = hs.drain()
    [hello] = out.send
    assert hello.to == B_ADDR and hello.binding == UNBOUND and type(hello.message) is Hello
    assert not out.events
    heard(sessions)
    assert hs.receive(B_TAG, (Welcome(hello.message.ref, THIS_BUILD),), B_ADDR, 0.01)
    [released] = hs.drain().events
    assert released == Released(B_ADDR, binding(B_TAG, 5), (note,))
    assert hs.to(B_ADDR) == binding(B_TAG, 5)
    assert hs.pending() == 0


def test_a_lost_hello_is_said_again_and_what_waited_too_long_is_dropped():
    hs, _ = core()
    hs.hold(Send(B_ADDR, ("old",)), 0.0)
    assert len(hs.drain().send) == 1
    assert hs.next_deadline() == HELLO_RETRY_S
    hs.tick(HELLO_RETRY_S)
    assert [type(s.message) for s in hs.drain().send] == [Hello]
    t = HELLO_RETRY_S
    while hs.next_deadline() is not None:
        t = hs.next_deadline()
        hs.tick(t)
        hs.drain()
    assert HELD_FOR_S <= t <= HELD_FOR_S + HELLO_RETRY_S
    assert hs.counters["held_dropped"] == 1 and hs.pending() == 0
    assert hs.counters["hellos_out"] == int(HELD_FOR_S / HELLO_RETRY_S) + 1


def test_a_hello_is_welcomed_bound_to_the_run_it_claims_and_teaches_the_address():
    hs, sessions = core()
    heard(sessions, run=9)
    assert hs.receive(B_TAG, (Hello(7, THIS_BUILD),), B_ADDR, 1.0)
    [welcome] = hs.drain().send
    assert welcome.binding == binding(B_TAG, 9) and welcome.message == Welcome(7, THIS_BUILD)
    assert hs.to(B_ADDR) == binding(B_TAG, 9)


def test_a_replayed_hello_changes_nothing_but_earns_one_welcome():
    hs, sessions = core()
    heard(sessions, run=9)
    hs.receive(B_TAG, (Hello(7, THIS_BUILD),), B_ADDR, 1.0)
    hs.drain()
    before = hs.to(B_ADDR)
    hs.receive(B_TAG, (Hello(7, THIS_BUILD),), B_ADDR, 2.0)  # the same, again
    out = hs.drain()
    assert len(out.send) == 1 and not out.events
    assert hs.to(B_ADDR) == before and hs.next_deadline() is None


def test_a_peer_without_a_common_version_is_refused_yet_welcomed_and_nothing_is_released():
    hs, sessions = core()
    hs.hold(Send(B_ADDR, ("note",)), 0.0)
    [hello] = hs.drain().send
    heard(sessions)
    hs.receive(B_TAG, (Welcome(hello.message.ref, TWO_AHEAD_STANDIN),), B_ADDR, 0.1)
    [refused] = hs.drain().events
    assert type(refused) is Refused and refused.first and refused.protocols == ("membership",)
    hs.receive(B_TAG, (Hello(3, TWO_AHEAD_STANDIN),), B_ADDR, 0.2)
    out = hs.drain()
    assert [type(s.message) for s in out.send] == [Welcome]  # it learns why
    assert [type(e) for e in out.events] == [Refused] and not out.events[0].first
    assert hs.counters["contact_refused_version"] == 2 and hs.pending() == 1


def test_a_misdirected_packet_earns_a_hello_at_most_once_per_gap():
    hs, _ = core()
    for t in (0.0, 0.1, REPLY_GAP_S / 2):
        hs.misdirected(B_ADDR, t)
    assert len(hs.drain().send) == 1
    hs.misdirected(B_ADDR, REPLY_GAP_S)
    assert len(hs.drain().send) == 1


def test_a_waiter_keeps_the_hello_going_until_it_gives_up():
    hs, _ = core()
    hs.want(B_ADDR, 0.0)
    hs.drain()
    hs.tick(10 * HELLO_RETRY_S)
    assert len(hs.drain().send) == 1  # still wanted: said again
    hs.unwant(B_ADDR)
    assert hs.pending() == 0


def test_without_encryption_every_packet_is_unbound_and_nothing_is_said():
    hs = Handshake(ReplayWindows(A_TAG, 1), THIS_BUILD, sealing=False)
    assert hs.to(B_ADDR) == UNBOUND
    hs.misdirected(B_ADDR, 0.0)
    assert not hs.drain()


C_TAG, C_ADDR = b"C" * 8, ("10.0.0.3", 7946)


def test_an_answer_from_another_address_counts_only_if_the_address_stays_silent():
    """A member listening on several addresses answers from its own: the
    welcome binds the address the hello went to once that address has let
    two more hellos go unanswered."""
    hs, sessions = core()
    note = Send(B_ADDR, ("note",))
    hs.hold(note, 0.0)
    [hello] = hs.drain().send
    heard(sessions, C_TAG, run=4)
    hs.receive(C_TAG, (Welcome(hello.message.ref, THIS_BUILD),), C_ADDR, 0.01)
    assert not hs.drain().events and hs.to(B_ADDR) is None
    t, released = 0.0, []
    while not released:
        t = hs.next_deadline()
        hs.tick(t)
        released = [e for e in hs.drain().events if type(e) is Released]
    assert released == [Released(B_ADDR, binding(C_TAG, 4), (note,))]
    assert t == 3 * HELLO_RETRY_S and hs.counters["contact_other_address"] == 1


def test_a_welcome_earned_by_a_copy_of_our_hello_loses_to_the_member_at_the_address():
    """A replayer copies our hello to member C, whose true welcome comes
    first; the member at the address answers too, and the address is bound
    to it, not to C."""
    hs, sessions = core()
    hs.hold(Send(B_ADDR, ("note",)), 0.0)
    [hello] = hs.drain().send
    heard(sessions, C_TAG, run=4)
    hs.receive(C_TAG, (Welcome(hello.message.ref, THIS_BUILD),), C_ADDR, 0.01)
    heard(sessions, B_TAG, run=5)
    hs.receive(B_TAG, (Welcome(hello.message.ref, THIS_BUILD),), B_ADDR, 0.02)
    [released] = hs.drain().events
    assert released.binding == binding(B_TAG, 5)
    hs.tick(10.0)
    assert hs.to(B_ADDR) == binding(B_TAG, 5) and not hs.drain().events
