"""Timed-out transactions' unread values (sim/metahistory.py, `prepare`):
many timed-out transactions and a timed-out restore on one group of keys
are decided, in a few thousand steps where the search without the rule
ran out of 2 million (the swarm's seed 7 with sessions and restores, in
small); and a value a read returns, a compare names or a compare orders
is kept, so the histories that need it stay linearizable."""

import random

import pytest

import shoal.sim.metahistory as metahistory
from shoal.sim.linearizability import Operation, Verdict, check
from shoal.sim.metahistory import check_meta, prepare
from shoal.sim.metamodel import Cmp, Delete, Get, Put, Read, Txn, TxnDone
from shoal.sim.metaworkload import random_history
from shoal.sim.restoremodel import Restore, RestoreModel

BUDGET = 50_000
KEYS = ("k0", "k1")


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
    compared = Txn((Cmp("a", "value", op, operand),), (Put("b", "x"),))
    history = [
        Operation(0, 0.0, 0.1, Txn((), (Put("a", "a"),)), TxnDone(True, 1, (None,))),
        Operation(1, 1.0, None, Txn((), (Put("a", "seen"),)), None),
        Operation(2, 2.0, 2.1, compared, TxnDone(succeeded, 5, (None,) if succeeded else ())),
    ]
    assert check_meta(history, max_steps=BUDGET).ok


def test_a_value_a_transaction_read_is_kept():
    history = [
        Operation(1, 1.0, None, Txn((), (Put("a", "seen"), Put("b", "y"))), None),
        Operation(2, 2.0, 2.1, Txn((), (Get("a"),)), TxnDone(True, 5, (Read("seen", 4),))),
    ]
    assert check_meta(history, max_steps=BUDGET).ok


def _brute_force(history):
    """Linearizable by trying every order, all keys one partition: an
    operation may go next if no other left returned before its call; one
    that never returns may also never go."""
    model = RestoreModel({key: "all" for key in KEYS})

    def search(state, left):
        if all(history[i].indeterminate for i in left):
            return True
        for i in left:
            if any(history[j].return_at is not None and history[j].return_at < history[i].call_at
                   for j in left if j != i):  # fmt: skip
                continue
            after = model.step(state, history[i].input, history[i].output)
            if after is not None and search(after, left - {i}):
                return True
        return False

    return search(model.init(), frozenset(range(len(history))))


def _scrambled(history, rng):
    """One transaction's answer changed: a read's value or revision, or its branch."""
    done = [i for i, o in enumerate(history) if isinstance(o.output, TxnDone)]
    if not done:
        return history
    i = rng.choice(done)
    o = history[i]
    results = list(o.output.results)
    reads = [j for j, r in enumerate(results) if isinstance(r, Read)]
    if reads and rng.random() < 0.7:
        j = rng.choice(reads)
        value, revision = results[j].value, results[j].mod_revision
        results[j] = rng.choice([Read(value, revision + 1), Read(None, 0), Read("w", revision)])
        output = TxnDone(o.output.succeeded, o.output.revision, tuple(results))
    else:
        branch = o.input.failure if o.output.succeeded else o.input.success
        results = [Read(None, 0) if isinstance(x, Get) else None for x in branch]
        output = TxnDone(not o.output.succeeded, o.output.revision, tuple(results))
    return [*history[:i], Operation(o.client, o.call_at, o.return_at, o.input, output),
            *history[i + 1 :]]  # fmt: skip


def test_relabelled_histories_agree_with_brute_force():
    """On 600 small random histories of transactions and single-key calls
    over two keys, many timed out, one answer in two scrambled: the
    relabelled history is linearizable exactly when the history is (brute
    force, both), and the search says the same on it and on the prepared
    one."""
    illegal = relabelled = 0
    for seed in range(600):
        rng = random.Random(seed)
        history = random_history(rng, operations=7, keys=2, clients=3, timeout_p=0.4, txn_p=0.5)
        if seed % 2:
            history = _scrambled(history, rng)
        expected = _brute_force(history)
        changed = metahistory._unread_txns(history)
        relabelled += changed != history
        assert _brute_force(changed) == expected, (seed, history)
        want = Verdict.OK if expected else Verdict.ILLEGAL
        for checked in (history, prepare(history)):
            verdict = check(checked, RestoreModel.for_history(checked)).verdict
            assert verdict is want, (seed, checked is history, history)
        illegal += not expected
    assert illegal > 100 and relabelled > 100, (illegal, relabelled)
