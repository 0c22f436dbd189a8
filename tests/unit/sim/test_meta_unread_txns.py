"""Timed-out transactions' unread values (sim/metahistory.py, `prepare`):
many timed-out transactions and a timed-out restore on one group of keys
are decided, in a few thousand steps where the search without the rule
ran out of 2 million (the swarm's seed 7 with sessions and restores, in
small); and a value a read returns, a compare names or a compare orders
is kept, so the histories that need it stay linearizable."""

import pytest

import shoal.sim.metahistory as metahistory
from shoal.sim.linearizability import Operation, Verdict
from shoal.sim.metahistory import check_meta
from shoal.sim.metamodel import Cmp, Delete, Get, Put, Read, Txn, TxnDone
from shoal.sim.restoremodel import Restore

BUDGET = 50_000


def transfer(i, revision):
    """The swarm's transfer: both keys at `revision`, then both written."""
    return Txn((Cmp("a", "mod", "=", revision), Cmp("b", "mod", "=", revision)),
               (Put("a", f"a{i}"), Put("b", f"b{i}")), (Get("a"), Get("b")))  # fmt: skip


def create(i):
    """The swarm's create-if-absent: its failure branch deletes b."""
    return Txn((Cmp("b", "create", "=", 0),), (Put("b", f"b{i}"), Put("a", f"a{i}")),
               (Delete("b"), Get("a")))  # fmt: skip


def timed_out(winner, read_b=None):
    """Transfers and creates timing out around a timed-out restore, and a
    read finding `winner`'s transfer (b: `read_b`'s value) at revision 20."""
    history = [Operation(0, 0.0, 0.1, transfer(0, 0), TxnDone(True, 10, (None, None)))]
    for i in range(1, 41):
        txn = create(i) if i % 3 == 0 else transfer(i, 10)
        history.append(Operation(i % 5, 1.0 + i * 0.01, None, txn, None))
    rows = (("a", "ra"), ("b", "rb"))
    history.append(Operation("ops", 1.2, None, Restore(rows, ("a", "b")), None))
    reads = (Read(f"a{winner}", 20), Read(f"b{read_b or winner}", 20))
    history.append(Operation(9, 5.0, 5.1, Txn((), (Get("a"), Get("b"))), TxnDone(True, 21, reads)))
    return history


def test_many_timed_out_transactions_and_a_restore_are_decided(monkeypatch):
    verdict = check_meta(timed_out(winner=40), max_steps=BUDGET)
    assert verdict.ok, verdict.explanation
    monkeypatch.setattr(metahistory, "_unread_txns", lambda ops: ops)
    assert check_meta(timed_out(winner=40), max_steps=BUDGET).verdict is Verdict.UNKNOWN


def test_reads_of_two_timed_out_transactions_at_once_are_illegal():
    verdict = check_meta(timed_out(winner=40, read_b=38), max_steps=BUDGET)
    assert verdict.verdict is Verdict.ILLEGAL, verdict.explanation


@pytest.mark.parametrize(("op", "operand", "succeeded"), [("=", "seen", True), (">", "m", True),
                                                          ("<", "m", False)])  # fmt: skip
def test_a_value_a_compare_names_or_orders_is_kept(op, operand, succeeded):
    """A timed-out put of "seen" (> "m", as "a" is not) is what the compare found."""
    history = [
        Operation(0, 0.0, 0.1, Txn((), (Put("a", "a"),)), TxnDone(True, 1, (None,))),
        Operation(1, 1.0, None, Txn((), (Put("a", "seen"),)), None),
        Operation(2, 2.0, 2.1, Txn((Cmp("a", "value", op, operand),), (Put("b", "x"),)),
                  TxnDone(succeeded, 5, (None,) if succeeded else ())),  # fmt: skip
    ]
    assert check_meta(history, max_steps=BUDGET).ok


def test_a_value_a_transaction_read_is_kept():
    history = [
        Operation(1, 1.0, None, Txn((), (Put("a", "seen"), Put("b", "y"))), None),
        Operation(2, 2.0, 2.1, Txn((), (Get("a"),)), TxnDone(True, 5, (Read("seen", 4),))),
    ]
    assert check_meta(history, max_steps=BUDGET).ok
