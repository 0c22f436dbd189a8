"""The checker against histories of a reference store: correct ones pass, broken ones are caught.

`shoal.sim.metaworkload` runs concurrent clients against a sequential store
on a virtual timeline, with timeouts (5 % of calls; a timed-out write takes
effect or not). A correct store's histories are linearizable by
construction, so the checker must answer OK on every seed; a store broken
on purpose (stale reads, acknowledged writes lost) must be caught on most.
"""

from __future__ import annotations

import random

import pytest

from shoal.sim.linearizability import Verdict
from shoal.sim.metahistory import check_meta
from shoal.sim.metaworkload import BUGS, random_history
from tests.sim.conftest import seeds

# Far more than any of these histories needs (a few thousand steps when
# correct): UNKNOWN here would be a finding of its own.
MAX_STEPS = 2_000_000


@pytest.mark.parametrize("seed", seeds())
def test_correct_store_is_linearizable(seed):
    """A correct store's history of 2,000 operations (5 keys, 5 clients, timeouts) checks OK."""
    history = random_history(random.Random(seed), operations=2000)
    result = check_meta(history, max_steps=MAX_STEPS)
    assert result.verdict is Verdict.OK, f"SHOAL_SIM_SEED={seed}: {result.explanation}"


def test_correct_store_over_many_seeds_and_shapes():
    """Over 60 seeds and shapes from 1 key and 1 client to 20 keys and 10 clients, a correct
    store is always linearizable."""
    for seed in range(60):
        rng = random.Random(seed)
        keys, clients = rng.choice([1, 2, 5, 20]), rng.choice([1, 3, 10])
        timeout_p = rng.choice([0.0, 0.05, 0.2])
        history = random_history(
            rng, operations=500, keys=keys, clients=clients, timeout_p=timeout_p
        )
        result = check_meta(history, max_steps=MAX_STEPS)
        assert result.verdict is Verdict.OK, (
            f"seed {seed} ({keys} keys, {clients} clients, timeouts {timeout_p}): "
            f"{result.explanation}"
        )


@pytest.mark.parametrize("bug", BUGS)
def test_broken_store_is_caught(bug):
    """A store that now and then serves a stale read, or loses an acknowledged write, is found
    ILLEGAL in at least 18 of 20 seeds, and never given OK wrongly for want of budget."""
    caught = 0
    for seed in range(20):
        history = random_history(random.Random(seed), operations=1000, bug=bug)
        result = check_meta(history, max_steps=MAX_STEPS)
        assert result.verdict is not Verdict.UNKNOWN, f"seed {seed}: {result.explanation}"
        caught += result.verdict is Verdict.ILLEGAL
    assert caught >= 18, f"{bug}: caught in {caught} of 20 seeds"
