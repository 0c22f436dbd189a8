"""Seeds for simulation tests: fixed ones, plus one from SHOAL_SIM_SEED.

A failing test prints `SHOAL_SIM_SEED=<n>`; setting that variable replays it.
"""

from __future__ import annotations

import os

import pytest

FIXED_SEEDS = [1, 2, 3]


def seeds() -> list[int]:
    extra = os.environ.get("SHOAL_SIM_SEED")
    return FIXED_SEEDS + ([int(extra)] if extra else [])


@pytest.fixture(autouse=True)
def _print_seed_on_failure(request):
    yield
    rep = getattr(request.node, "rep_call", None)
    if rep is not None and rep.failed:
        callspec = getattr(request.node, "callspec", None)
        seed = callspec.params.get("seed") if callspec else None
        print(f"\nreplay with SHOAL_SIM_SEED={seed} ({request.node.name})")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    setattr(item, "rep_" + rep.when, rep)
