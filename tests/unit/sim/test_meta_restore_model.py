"""The metadata model's online restore (sim/restoremodel.py) on small
histories written by hand: the backup's keys at the restore's revision,
the others gone, a live session's key kept, a damaged backup refused and
changing nothing, a timed-out restore taking effect or not, and `prepare`
not mistaking a restored value for a timed-out put's."""

from shoal.sim.linearizability import Operation
from shoal.sim.metahistory import check_meta
from shoal.sim.metamodel import Conflict, Get, Put, Read, Txn, TxnDone, Written
from shoal.sim.restoremodel import Restore
from shoal.sim.sessionmodel import End

KEYS = ("a", "b", "eph")


def op(client, call_at, return_at, input, output):
    return Operation(client, call_at, return_at, input, output)


def restore(at, revision, rows=(("a", "r"),), intact=True, output=None):
    done = Written(revision) if output is None else output
    return op("ops", at, at + 0.5, Restore(rows, KEYS, intact), done)


def written():
    """a = 'x' at 1, b = 'y' at 2."""
    return [
        op(1, 0.0, 0.5, Put("a", "x"), Written(1)),
        op(2, 0.0, 0.5, Put("b", "y"), Written(2)),
    ]


def test_after_a_restore_reads_find_the_backup_at_its_revision_and_nothing_else():
    history = [
        *written(),
        restore(1.0, 5),
        op(1, 2.0, 2.5, Get("a"), Read("r", 5)),
        op(2, 2.0, 2.5, Get("b"), Read(None, 0)),
    ]
    assert check_meta(history).ok


def test_a_key_the_backup_lacks_still_read_after_the_restore_is_illegal():
    history = [*written(), restore(1.0, 5), op(2, 2.0, 2.5, Get("b"), Read("y", 2))]
    verdict = check_meta(history)
    assert not verdict.ok
    assert "restore(" in verdict.explanation


def test_the_old_value_read_after_the_restore_is_illegal():
    history = [*written(), restore(1.0, 5), op(1, 2.0, 2.5, Get("a"), Read("x", 1))]
    assert not check_meta(history).ok


def test_a_restore_is_ordered_by_revision_against_writes():
    """A put acknowledged at 7 after a restore at 5 wins; one at 4 that
    returned after the restore's call came before it."""
    later = [*written(), restore(1.0, 5), op(1, 1.2, 1.4, Put("a", "z"), Written(7))]
    assert check_meta([*later, op(2, 2.0, 2.5, Get("a"), Read("z", 7))]).ok
    assert not check_meta([*later, op(2, 2.0, 2.5, Get("a"), Read("r", 5))]).ok
    earlier = [*written(), restore(1.0, 5), op(1, 1.2, 1.4, Put("a", "z"), Written(4))]
    assert check_meta([*earlier, op(2, 2.0, 2.5, Get("a"), Read("r", 5))]).ok
    assert not check_meta([*earlier, op(2, 2.0, 2.5, Get("a"), Read("z", 4))]).ok


def test_a_live_sessions_key_is_kept_and_an_ended_sessions_is_not_restored():
    put = op(3, 0.0, 0.5, Put("eph", "s", session="S"), Written(3))
    kept = [put, restore(1.0, 5, rows=(("eph", "r"),))]
    assert check_meta([*kept, op(3, 2.0, 2.5, Get("eph"), Read("s", 3))]).ok
    assert not check_meta([*kept, op(3, 2.0, 2.5, Get("eph"), Read("r", 5))]).ok
    assert not check_meta([*kept, op(3, 2.0, 2.5, Get("eph"), Read(None, 0))]).ok
    ended = [put, op("log", 0.6, 0.8, End("S", 4, ("eph",)), Written(4)), kept[1]]
    assert check_meta([*ended, op(3, 2.0, 2.5, Get("eph"), Read("r", 5))]).ok


def test_a_damaged_backup_is_refused_and_changes_nothing():
    refused = [*written(), restore(1.0, 0, intact=False, output=Conflict(0))]
    assert check_meta([*refused, op(1, 2.0, 2.5, Get("a"), Read("x", 1))]).ok
    assert not check_meta([*refused, op(1, 2.0, 2.5, Get("a"), Read("r", 5))]).ok
    applied = [*written(), restore(1.0, 5, intact=False)]
    assert not check_meta(applied).ok


def test_a_timed_out_restore_took_effect_or_not():
    timed_out = op("ops", 1.0, None, Restore((("a", "r"),), KEYS), None)
    for seen in (Read("x", 1), Read("r", 9)):
        assert check_meta([*written(), timed_out, op(1, 2.0, 2.5, Get("a"), seen)]).ok, seen
    both = [
        *written(),
        timed_out,
        op(1, 2.0, 2.5, Get("a"), Read("r", 9)),
        op(1, 3.0, 3.5, Get("a"), Read("x", 1)),
    ]
    assert not check_meta(both).ok


def test_the_keys_transactions_join_take_a_restore_together():
    both = Txn((), (Put("a", "t"), Put("b", "t")))
    history = [
        op(1, 0.0, 0.5, both, TxnDone(True, 3, (None, None))),
        restore(1.0, 5, rows=(("a", "r"), ("b", "r"))),
    ]
    read = Txn((), (Get("a"), Get("b")))
    seen = TxnDone(True, 6, (Read("r", 5), Read("r", 5)))
    assert check_meta([*history, op(2, 2.0, 2.5, read, seen)]).ok
    half = TxnDone(True, 6, (Read("r", 5), Read("t", 3)))
    assert not check_meta([*history, op(2, 2.0, 2.5, read, half)]).ok


def test_a_restored_value_is_not_taken_for_a_timed_out_puts():
    """A put of 'r' that timed out, called after a restore of 'r' was
    read: the read saw the restore, not the put, which may never have
    taken effect (a later read of the restore's revision is legal)."""
    history = [
        *written(),
        restore(1.0, 5),
        op(1, 2.0, 2.5, Get("a"), Read("r", 5)),
        op(3, 3.0, None, Put("a", "r"), None),
        op(1, 4.0, 4.5, Get("a"), Read("r", 5)),
    ]
    assert check_meta(history).ok
