"""MemberTable applies SWIM's precedence rules and guards identities."""

from shoal.membership.member import MemberState
from shoal.membership.table import Ignored, MemberTable, Transition
from tests.unit.membership.helpers import ident

ME = ident(1)


def table_with(i: int, inc: int = 1) -> MemberTable:
    t = MemberTable(ME, 1, 0.0)
    assert t.apply_alive(ident(i), inc, 0.0) is Transition.JOINED
    return t


def test_alive_needs_a_higher_incarnation_to_override():
    """Old news about a member never changes what we believe."""
    t = table_with(2, inc=5)
    assert t.apply_alive(ident(2), 5, 1.0) is Ignored.STALE
    assert t.apply_alive(ident(2), 4, 1.0) is Ignored.STALE
    assert t.apply_alive(ident(2), 6, 1.0) is Transition.RENEWED


def test_suspect_overrides_alive_at_equal_incarnation_and_alive_refutes_with_higher():
    """A suspicion at the current incarnation sticks until the member refutes it."""
    t = table_with(2, inc=3)
    assert t.apply_suspect("n2", 3, 1.0) is Transition.SUSPECTED
    assert t.apply_alive(ident(2), 3, 1.0) is Ignored.STALE
    assert t.apply_alive(ident(2), 4, 1.0) is Transition.REFUTED
    assert t.get("n2").state is MemberState.ALIVE


def test_dead_then_left_and_never_back_with_an_old_incarnation():
    """A dead member stays dead until it speaks with a higher incarnation."""
    t = table_with(2, inc=3)
    assert t.apply_dead("n2", 3, 1.0, left=False) is Transition.DIED
    assert t.apply_suspect("n2", 3, 1.0) is Ignored.STALE
    assert t.apply_dead("n2", 3, 1.0, left=False) is Ignored.ALREADY
    assert t.apply_alive(ident(2), 3, 1.0) is Ignored.STALE
    assert t.apply_alive(ident(2), 4, 2.0) is Transition.JOINED
    assert t.apply_dead("n2", 4, 3.0, left=True) is Transition.LEFT
    assert t.apply_dead("n2", 4, 3.0, left=False) is Ignored.ALREADY
    assert "n2" not in t.live


def test_a_second_node_with_a_live_members_name_is_refused():
    """Two machines with one name are never merged into one member."""
    t = table_with(2)
    impostor = ident(2, node_id=b"\xee" * 16)
    assert t.apply_alive(impostor, 9, 1.0) is Ignored.NAME_CONFLICT
    assert t.get("n2").ident.node_id == bytes([2]) * 16


def test_a_new_machine_may_take_the_name_of_a_dead_member():
    """Reinstalling a machine under its old name works once the old one is dead."""
    t = table_with(2)
    t.apply_dead("n2", 1, 1.0, left=False)
    newcomer = ident(2, node_id=b"\xee" * 16)
    assert t.apply_alive(newcomer, 1, 2.0) is Transition.JOINED
    assert t.get("n2").ident.node_id == b"\xee" * 16


def test_a_reaped_member_is_not_resurrected_by_stale_state():
    """A removed node does not come back as a ghost from someone's old view."""
    t = table_with(2, inc=7)
    t.apply_dead("n2", 7, 1.0, left=True)
    assert t.reap("n2") is not None
    assert t.apply_alive(ident(2), 7, 2.0) is Ignored.GHOST
    assert t.get("n2") is None
    assert t.apply_alive(ident(2), 8, 3.0) is Transition.JOINED


def test_live_sampling_is_uniform_enough_and_excludes():
    """Random picks never return excluded names or duplicates."""
    import random

    t = MemberTable(ME, 1, 0.0)
    for i in range(2, 40):
        t.apply_alive(ident(i), 1, 0.0)
    rng = random.Random(3)
    for k in (1, 3, 20, 100):
        picks = t.live.sample(rng, k, exclude=("n5",))
        assert len(picks) == min(k, 37) and "n5" not in picks and len(set(picks)) == len(picks)


def test_the_live_list_holds_each_live_member_once_through_death_and_return():
    """Probing and gossip pick from the live list: a member that dies, comes
    back, is suspected and refutes appears exactly once, and never self."""
    t = table_with(2, inc=1)
    t.apply_alive(ident(3), 1, 0.0)
    t.apply_dead("n2", 1, 1.0, left=False)
    assert sorted(t.live.items()) == ["n3"]
    t.apply_alive(ident(2), 2, 2.0)
    t.apply_suspect("n2", 2, 3.0)
    t.apply_alive(ident(2), 3, 4.0)
    assert t.apply_dead("n3", 1, 5.0, left=True) is Transition.LEFT
    assert t.reap("n3") is not None
    assert t.live.items() == ["n2"] and len(t.live) == 1
    assert "n2" in t.live and "n3" not in t.live and ME.name not in t.live
