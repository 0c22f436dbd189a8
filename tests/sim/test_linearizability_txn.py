"""The checker on histories with transactions, of a reference store:
correct ones pass, one whose transactions ignore their compares is caught.

`random_history(..., txn_p=0.2)`: a fifth of the calls are transactions
over two keys (sim/metaworkload.py), so most histories join every key into
one partition (sim/metamodel.py). Timeouts are kept rare: the timed-out
operations on the keys of transactions are not pruned (metahistory.prepare),
and many of them exhaust the budget (UNKNOWN, never a wrong verdict).
"""

from __future__ import annotations

import random

from shoal.sim.linearizability import Verdict
from shoal.sim.metahistory import check_meta
from shoal.sim.metaworkload import random_history

MAX_STEPS = 1_000_000


def test_correct_store_with_transactions_is_linearizable():
    """Over 30 seeds and shapes (1 to 20 keys, 1 to 10 clients, up to 2 %
    timed out), a correct store's histories with transactions check OK."""
    for seed in range(30):
        rng = random.Random(seed)
        keys, clients = rng.choice([1, 2, 5, 20]), rng.choice([1, 3, 10])
        timeout_p = rng.choice([0.0, 0.02])
        history = random_history(rng, operations=300, keys=keys, clients=clients,
                                 timeout_p=timeout_p, txn_p=0.2)  # fmt: skip
        result = check_meta(history, max_steps=MAX_STEPS)
        assert result.verdict is Verdict.OK, (
            f"seed {seed} ({keys} keys, {clients} clients, timeouts {timeout_p}): "
            f"{result.explanation}")  # fmt: skip


def test_transactions_that_ignore_their_compares_are_caught():
    """A store that now and then runs a transaction's success branch though
    a compare failed is found ILLEGAL on at least 18 of 20 seeds."""
    caught = 0
    for seed in range(20):
        history = random_history(random.Random(seed), operations=300, txn_p=0.2, timeout_p=0.02,
                                 bug="txn-ignores-compares")  # fmt: skip
        result = check_meta(history, max_steps=MAX_STEPS)
        assert result.verdict is not Verdict.UNKNOWN, f"seed {seed}: {result.explanation}"
        caught += result.verdict is Verdict.ILLEGAL
    assert caught >= 18, f"caught in {caught} of 20 seeds"
