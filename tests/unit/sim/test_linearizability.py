"""The linearizability checker on small histories of the metadata model, written by hand."""

from __future__ import annotations

import itertools
import random

import pytest

from shoal.sim.linearizability import CheckResult, HistoryRecorder, Operation, Verdict, check
from shoal.sim.metahistory import check_meta, check_revisions, prepare
from shoal.sim.metamodel import (
    UNREAD,
    Conflict,
    Delete,
    Get,
    MetaModel,
    NotApplied,
    Put,
    Read,
    Written,
)
from shoal.sim.metaworkload import random_history

K = "topic/a"


def op(
    client: int, call_at: float, return_at: float | None, input: object, output: object | None
) -> Operation:
    """One operation; `return_at` None is a timeout (the output must be None)."""
    return Operation(client, call_at, return_at, input, output)


def verdicts(history: list[Operation]) -> tuple[Verdict, Verdict]:
    """The verdict with and without `prepare` (both must agree on these histories)."""
    return check(history, MetaModel()).verdict, check_meta(history).verdict


def assert_ok(history: list[Operation]) -> None:
    """The history is linearizable, prepared or not."""
    assert verdicts(history) == (Verdict.OK, Verdict.OK)


def assert_illegal(history: list[Operation]) -> CheckResult:
    """The history is not linearizable, prepared or not; the result, explained."""
    assert verdicts(history) == (Verdict.ILLEGAL, Verdict.ILLEGAL)
    return check(history, MetaModel())


def test_sequential_history_is_linearizable() -> None:
    """Puts, a CAS, a conflict, reads and a delete one after another check OK."""
    assert_ok(
        [
            op(0, 0, 1, Get(K), Read(None, 0)),
            op(0, 2, 3, Put(K, "a", cas=0), Written(5)),
            op(1, 4, 5, Get(K), Read("a", 5)),
            op(1, 6, 7, Put(K, "b", cas=5), Written(9)),
            op(0, 8, 9, Put(K, "c", cas=5), Conflict(9)),
            op(0, 10, 11, Delete(K), Written(12)),
            op(1, 12, 13, Get(K), Read(None, 0)),
            op(1, 14, 15, Put(K, "d", cas=0), Written(13)),
        ]
    )


def test_stale_read_after_acknowledged_write_is_illegal() -> None:
    """A read that starts after a write was acknowledged and returns the older value is caught."""
    result = assert_illegal(
        [
            op(0, 0, 1, Put(K, "a"), Written(3)),
            op(0, 2, 3, Put(K, "b"), Written(4)),
            op(1, 4, 5, Get(K), Read("a", 3)),
        ]
    )
    assert result.key == K
    assert result.stuck == op(1, 4, 5, Get(K), Read("a", 3))
    assert [o.input for o in result.linearized] == [Put(K, "a"), Put(K, "b")]
    assert "'b' at revision 4" in result.explanation


def test_concurrent_read_may_see_either_value() -> None:
    """A read concurrent with a write may return the value before it or after it."""
    for seen in (Read("a", 3), Read("b", 4)):
        assert_ok(
            [
                op(0, 0, 1, Put(K, "a"), Written(3)),
                op(0, 2, 5, Put(K, "b"), Written(4)),
                op(1, 3, 4, Get(K), seen),
            ]
        )


def test_two_cas_on_one_revision_both_succeeding_is_illegal() -> None:
    """Two CAS naming the same mod revision cannot both succeed, even concurrently."""
    assert_illegal(
        [
            op(0, 0, 1, Put(K, "a"), Written(3)),
            op(1, 2, 6, Put(K, "b", cas=3), Written(5)),
            op(2, 2, 6, Put(K, "c", cas=3), Written(6)),
        ]
    )
    assert_ok(
        [
            op(0, 0, 1, Put(K, "a"), Written(3)),
            op(1, 2, 6, Put(K, "b", cas=3), Written(5)),
            op(2, 2, 6, Put(K, "c", cas=3), Conflict(5)),
        ]
    )


def test_lost_acknowledged_write_is_illegal() -> None:
    """A write acknowledged before a read began, then missing from that read, is caught."""
    assert_illegal(
        [
            op(0, 0, 1, Put(K, "a", cas=0), Written(7)),
            op(1, 2, 3, Get(K), Read(None, 0)),
        ]
    )


def test_overwritten_value_reappearing_is_illegal() -> None:
    """A value read back after a later write overwrote it (and was read) is caught."""
    assert_illegal(
        [
            op(0, 0, 1, Put(K, "a"), Written(3)),
            op(0, 2, 3, Put(K, "b"), Written(8)),
            op(1, 4, 5, Get(K), Read("b", 8)),
            op(2, 6, 7, Get(K), Read("a", 3)),
        ]
    )


def test_write_revision_must_grow() -> None:
    """A write acknowledged at a revision not above the key's mod revision is caught."""
    assert_illegal(
        [
            op(0, 0, 1, Put(K, "a"), Written(8)),
            op(0, 2, 3, Put(K, "b"), Written(8)),
        ]
    )


def test_read_must_return_the_writes_revision() -> None:
    """A read that returns the right value at a wrong mod revision is caught."""
    assert_illegal(
        [
            op(0, 0, 1, Put(K, "a"), Written(8)),
            op(1, 2, 3, Get(K), Read("a", 9)),
        ]
    )


def test_timed_out_write_observed_later_is_linearizable() -> None:
    """A timed-out write a later read sees, at a revision nobody was told, checks OK."""
    assert_ok(
        [
            op(0, 0, 1, Put(K, "a"), Written(3)),
            op(0, 2, None, Put(K, "b", cas=3), None),
            op(1, 10, 11, Get(K), Read("a", 3)),
            op(1, 12, 13, Get(K), Read("b", 17)),
            op(2, 14, 15, Put(K, "c", cas=17), Written(20)),
        ]
    )


def test_timed_out_write_never_observed_is_linearizable() -> None:
    """A timed-out write nobody ever sees checks OK: it may never have taken effect."""
    assert_ok(
        [
            op(0, 0, 1, Put(K, "a"), Written(3)),
            op(0, 2, None, Put(K, "b"), None),
            op(1, 10, 11, Get(K), Read("a", 3)),
            op(1, 12, 13, Put(K, "c", cas=3), Written(9)),
        ]
    )


def test_timed_out_write_cannot_be_seen_before_its_call() -> None:
    """A read that ends before a timed-out write was called cannot see it."""
    assert_illegal(
        [
            op(0, 0, 1, Put(K, "a"), Written(3)),
            op(1, 2, 3, Get(K), Read("b", 5)),
            op(0, 4, None, Put(K, "b"), None),
        ]
    )


def test_timed_out_write_revision_is_bounded_below() -> None:
    """A timed-out write seen at a revision not above the one it overwrote is caught."""
    assert_illegal(
        [
            op(0, 0, 1, Put(K, "a"), Written(3)),
            op(0, 2, None, Put(K, "b"), None),
            op(1, 10, 11, Get(K), Read("b", 3)),
        ]
    )


def test_timed_out_write_revealed_by_a_conflict() -> None:
    """A conflict may report the revision of a timed-out write nobody read; a CAS naming that
    revision then succeeds."""
    assert_ok(
        [
            op(0, 0, 1, Put(K, "a"), Written(3)),
            op(0, 2, None, Put(K, "b"), None),
            op(1, 10, 11, Put(K, "c", cas=3), Conflict(6)),
            op(1, 12, 13, Put(K, "c", cas=6), Written(7)),
            op(2, 14, 15, Get(K), Read("c", 7)),
        ]
    )


def test_timed_out_delete_then_create() -> None:
    """A timed-out delete a create-if-absent reveals checks OK; without it, it is caught."""
    history = [
        op(0, 0, 1, Put(K, "a"), Written(3)),
        op(0, 2, None, Delete(K), None),
        op(1, 10, 11, Put(K, "b", cas=0), Written(9)),
    ]
    assert_ok(history)
    assert_illegal([history[0], history[2]])


def test_not_applied_and_timed_out_reads_constrain_nothing() -> None:
    """Writes that certainly did not apply and reads that timed out never make a history
    illegal."""
    assert_ok(
        [
            op(0, 0, 1, Put(K, "a"), Written(3)),
            op(1, 2, 3, Put(K, "x"), NotApplied()),
            op(2, 2, None, Get(K), None),
            op(1, 4, 5, Get(K), Read("a", 3)),
        ]
    )


def test_delete_of_an_absent_key_changes_nothing() -> None:
    """Deleting an absent key succeeds without a revision of its own; a CAS on it conflicts."""
    assert_ok(
        [
            op(0, 0, 1, Delete(K), Written(4)),
            op(0, 2, 3, Delete(K, cas=5), Conflict(0)),
            op(0, 4, 5, Put(K, "a", cas=0), Written(2)),
        ]
    )
    assert_illegal([op(0, 0, 1, Delete(K, cas=0), Conflict(0))])


def test_keys_are_checked_apart() -> None:
    """Each key is its own partition; the illegal one is named."""
    other = "topic/b"
    history = [
        op(0, 0, 1, Put(K, "a"), Written(3)),
        op(0, 2, 3, Put(other, "z"), Written(4)),
        op(1, 4, 5, Get(other), Read(None, 0)),
        op(1, 6, 7, Get(K), Read("a", 3)),
    ]
    result = check(history, MetaModel())
    assert (result.verdict, result.key, result.partitions) == (Verdict.ILLEGAL, other, 2)


def test_step_budget_gives_unknown() -> None:
    """A search cut short by its step budget answers UNKNOWN, never OK."""
    history = _concurrent_puts(12)
    assert check(history, MetaModel(), max_steps=50).verdict is Verdict.UNKNOWN
    assert check(history, MetaModel()).verdict is Verdict.OK


def test_time_budget_uses_the_injected_clock() -> None:
    """A wall-time budget is measured on the clock given, and runs out as it says."""
    ticks = itertools.count()
    result = check(_concurrent_puts(14), MetaModel(), clock=lambda: next(ticks), timeout_s=0.5)
    assert result.verdict is Verdict.UNKNOWN


def _concurrent_puts(n: int) -> list[Operation]:
    """n concurrent puts whose revisions run against the order the search tries them in."""
    puts = [op(i, 0, 10, Put(K, f"v{i}"), Written(n - i)) for i in range(n)]
    return [*puts, op(0, 11, 12, Get(K), Read("v0", n))]


def test_recorder_builds_the_history() -> None:
    """Calls, returns and timeouts recorded by clients become operations; an open call is
    indeterminate."""
    recorder = HistoryRecorder()
    first = recorder.call(0, Put(K, "a"), at=0.0)
    second = recorder.call(1, Get(K), at=0.5)
    recorder.returned(first, Written(3), at=1.0)
    third = recorder.call(0, Put(K, "b"), at=1.5)
    recorder.unknown(third)
    recorder.call(2, Delete(K), at=2.0)
    recorder.returned(second, Read("a", 3), at=2.5)
    assert len(recorder) == 4
    assert recorder.history() == [
        op(0, 0.0, 1.0, Put(K, "a"), Written(3)),
        op(1, 0.5, 2.5, Get(K), Read("a", 3)),
        op(0, 1.5, None, Put(K, "b"), None),
        op(2, 2.0, None, Delete(K), None),
    ]
    assert check_meta(recorder.history()).ok


def test_recorder_refuses_a_second_outcome() -> None:
    """Recording two outcomes for one call is a bug in the client, and raises."""
    recorder = HistoryRecorder()
    op_id = recorder.call(0, Get(K), at=0.0)
    recorder.returned(op_id, Read(None, 0), at=1.0)
    with pytest.raises(AssertionError):
        recorder.unknown(op_id)


def test_prepare_drops_unseen_timeouts_and_settles_seen_ones() -> None:
    """prepare drops a timed-out put nobody saw and ends a seen one at the read that saw it."""
    unseen = op(0, 2, None, Put(K, "x"), None)
    seen = op(1, 3, None, Put(K, "y"), None)
    read = op(2, 10, 11, Get(K), Read("y", 9))
    prepared = prepare([op(0, 0, 1, Put(K, "a"), Written(3)), unseen, seen, read])
    assert unseen not in prepared
    assert op(1, 3, 11, Put(K, "y"), None) in prepared


def test_prepare_keeps_timeouts_when_a_revision_is_unexplained() -> None:
    """A conflict reporting a revision no acknowledged write returned keeps the timed-out puts
    called before it (one of them may have had that revision), their values replaced by UNREAD."""
    history = [
        op(0, 0, 1, Put(K, "a"), Written(3)),
        op(0, 2, None, Put(K, "b"), None),
        op(1, 10, 11, Put(K, "c", cas=3), Conflict(6)),
    ]
    assert prepare(history) == [history[0], op(0, 2, None, Put(K, UNREAD), None), history[2]]


def _brute_force(history: list[Operation]) -> bool:
    """Linearizable by trying every order: an operation may go next if no other left returned
    before its call; one that never returns may also never go."""
    model = MetaModel()

    def search(state: object, left: frozenset[int]) -> bool:
        if all(history[i].indeterminate for i in left):
            return True
        for i in left:
            earlier = (history[j] for j in left if j != i)
            if any(o.return_at is not None and o.return_at < history[i].call_at for o in earlier):
                continue
            after = model.step(state, history[i].input, history[i].output)  # type: ignore[arg-type]
            if after is not None and search(after, left - {i}):
                return True
        return False

    return search(model.init(), frozenset(range(len(history))))


def _scrambled(history: list[Operation], rng: random.Random) -> list[Operation]:
    """The history with one output changed at random: a revision, a value or a CAS outcome."""
    i = rng.randrange(len(history))
    o = history[i]
    match o.output:
        case Read(value, revision):
            output: object = rng.choice(
                [Read(value, revision + 1), Read(None, 0), Read("w", revision)]
            )
        case Written(revision):
            output = rng.choice([Written(max(0, revision - 2)), Conflict(revision)])
        case Conflict(revision):
            output = rng.choice([Written(revision + 1), Conflict(max(0, revision - 1))])
        case _:
            return history
    return [
        *history[:i],
        Operation(o.client, o.call_at, o.return_at, o.input, output),
        *history[i + 1 :],
    ]


def test_search_agrees_with_brute_force() -> None:
    """On 400 small random histories of one key (with timeouts, CAS, deletes, one output in two
    scrambled), the checker and brute force give the same verdict, with and without prepare."""
    illegal = 0
    for seed in range(400):
        rng = random.Random(seed)
        history = random_history(rng, operations=7, keys=1, clients=3, timeout_p=0.3)
        if seed % 2:
            history = _scrambled(history, rng)
        expected = Verdict.OK if _brute_force(history) else Verdict.ILLEGAL
        illegal += expected is Verdict.ILLEGAL
        assert verdicts(history) == (expected, expected), (seed, history)
    assert illegal > 50


def test_revisions_across_keys() -> None:
    """Two keys' puts acknowledged at one revision, or in an order their calls contradict, are
    caught, though each key alone is linearizable."""
    other = "topic/b"
    first = op(0, 0, 1, Put(K, "a"), Written(5))
    assert check_revisions([first, op(1, 0, 1, Put(other, "z"), Written(5))])
    inverted = [first, op(1, 2, 3, Put(other, "z"), Written(4))]
    assert check(inverted, MetaModel()).ok
    result = check_meta(inverted)
    assert result.verdict is Verdict.ILLEGAL
    assert "returned before" in result.explanation
    assert not check_revisions([first, op(1, 0.5, 3, Put(other, "z"), Written(4))])
