"""The metadata model's transactions on small histories written by hand:
atomic across keys, one branch as its compares decide, one revision."""

from __future__ import annotations

from shoal.sim.linearizability import Operation, Verdict
from shoal.sim.metahistory import check_meta
from shoal.sim.metamodel import (
    Cmp,
    Get,
    MetaModel,
    Put,
    Read,
    Txn,
    TxnDone,
    Written,
)


def op(client: int, call_at: float, return_at: float | None, input: object,
       output: object | None) -> Operation:  # fmt: skip
    return Operation(client, call_at, return_at, input, output)


def transfer(ra: int, rb: int, a: str = "a1", b: str = "b1") -> Txn:
    """Both keys, only if neither changed since the revisions read."""
    return Txn((Cmp("a", "mod", "=", ra), Cmp("b", "mod", "=", rb)),
               (Put("a", a), Put("b", b)), (Get("a"), Get("b")))  # fmt: skip


SETUP = [op(0, 0, 1, Put("a", "a0"), Written(1)), op(0, 2, 3, Put("b", "b0"), Written(2))]


def verdict(history: list[Operation]) -> Verdict:
    return check_meta(history).verdict


def test_a_sequential_transfer_and_the_reads_after_it_are_linearizable():
    assert (
        verdict(
            [
                *SETUP,
                op(1, 4, 5, transfer(1, 2), TxnDone(True, 3, (None, None))),
                op(0, 6, 7, Get("a"), Read("a1", 3)),
                op(
                    1,
                    6,
                    7,
                    transfer(1, 2, "x", "y"),
                    TxnDone(False, 4, (Read("a1", 3), Read("b1", 3))),
                ),
                op(0, 8, 9, Get("b"), Read("b1", 3)),
            ]
        )
        is Verdict.OK
    )


def test_a_transaction_seen_on_one_key_and_not_on_the_other_is_illegal():
    """Per key each read has an instant for the transaction; together not:
    the keys a transaction spans are checked as one partition."""
    assert (
        verdict(
            [
                *SETUP,
                op(1, 4, 20, transfer(1, 2), TxnDone(True, 3, (None, None))),
                op(2, 5, 6, Get("a"), Read("a1", 3)),  # it took effect before 6
                op(2, 7, 8, Get("b"), Read("b0", 2)),  # but not before 7
            ]
        )
        is Verdict.ILLEGAL
    )


def test_a_success_whose_compare_failed_is_illegal():
    """The bug the swarm's mutation plants: the success branch ran though
    `b` had changed since revision 1."""
    assert (
        verdict(
            [
                *SETUP,
                op(1, 4, 5, transfer(1, 1), TxnDone(True, 3, (None, None))),
            ]
        )
        is Verdict.ILLEGAL
    )


def test_a_failure_whose_compares_held_is_illegal():
    assert (
        verdict(
            [
                *SETUP,
                op(1, 4, 5, transfer(1, 2), TxnDone(False, 3, (Read("a0", 1), Read("b0", 2)))),
            ]
        )
        is Verdict.ILLEGAL
    )


def test_a_failure_branch_get_must_read_the_state():
    assert (
        verdict(
            [
                *SETUP,
                op(1, 4, 5, transfer(1, 1), TxnDone(False, 3, (Read("a0", 1), Read("b0", 1)))),
            ]
        )
        is Verdict.ILLEGAL
    )


def test_a_get_after_a_put_in_one_transaction_sees_it():
    txn = Txn((Cmp("c", "create", "=", 0),), (Put("c", "new"), Get("c")), (Get("c"),))
    assert verdict([op(0, 0, 1, txn, TxnDone(True, 4, (None, Read("new", 4))))]) is Verdict.OK
    assert verdict([op(0, 0, 1, txn, TxnDone(True, 4, (None, Read(None, 0))))]) is Verdict.ILLEGAL


def test_a_timed_out_transaction_may_have_taken_effect_or_not():
    assert (
        verdict(
            [
                *SETUP,
                op(1, 4, None, transfer(1, 2), None),
                op(2, 5, 6, Get("a"), Read("a1", 7)),  # took effect, at a revision nobody was told
                op(2, 7, 8, Get("b"), Read("b1", 7)),
            ]
        )
        is Verdict.OK
    )
    assert (
        verdict(
            [
                *SETUP,
                op(1, 4, None, transfer(1, 2), None),
                op(2, 5, 6, Get("a"), Read("a0", 1)),  # or not
            ]
        )
        is Verdict.OK
    )


def test_a_timed_out_transaction_whose_compare_could_not_hold_did_nothing():
    assert (
        verdict(
            [
                *SETUP,
                op(1, 4, None, transfer(1, 1), None),  # b is at 2: the failure branch (reads only)
                op(2, 5, 6, Get("a"), Read("a1", 7)),
            ]
        )
        is Verdict.ILLEGAL
    )


def test_a_transaction_and_a_put_acknowledged_at_one_revision_are_illegal():
    result = check_meta(
        [
            *SETUP,
            op(1, 4, 5, transfer(1, 2), TxnDone(True, 3, (None, None))),
            op(0, 4, 5, Put("c", "c0"), Written(3)),
        ]
    )
    assert result.verdict is Verdict.ILLEGAL and "revision 3" in result.explanation


def test_keys_joined_by_transactions_share_a_partition():
    other = Txn((Cmp("b", "value", "=", "b0"),), (Put("c", "c1"),))
    model = MetaModel.for_history([op(0, 0, 1, transfer(1, 2), None), op(0, 0, 1, other, None),
                                   op(0, 0, 1, Get("d"), Read(None, 0))])  # fmt: skip
    parts = {model.split(Get(k), None)[0][0] for k in "abc"}
    assert len(parts) == 1 and model.split(Get("d"), None)[0][0] == "d"
