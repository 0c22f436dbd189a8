"""Query rounds (services/queries.py) in the simulator (sim/queries.py):
under loss, with members crashing mid-query, the outcome names who did not
answer, and counts each answer once."""

import pytest

from shoal.sim.queries import query_run
from tests.sim.conftest import seeds

NOT_ANSWERED = {"silent", "failed", "left"}


@pytest.mark.parametrize("seed", seeds() + list(range(4, 13)))
def test_a_query_names_who_did_not_answer(seed):
    """Every expected member is named; exactly those whose answer arrived
    are `answered`; a member that crashed before answering never is."""
    run = query_run(seed, timeout_s=4.0, crash_within_s=0.5)
    assert set(run.outcome["members"]) == run.expected and len(run.expected) == 16
    answered = {m for m in run.expected if run.status(m) == "answered"}
    assert answered == run.answered_by
    assert all(run.status(m) in NOT_ANSWERED for m in run.expected - run.answered_by)
    assert run.outcome["answered"] == len(run.answered_by)
    assert run.outcome["complete"] == (run.answered_by == run.expected)
    assert run.outcome["duration_s"] <= 4.0 + 1e-9
    gone = {m for m in run.crashed if m not in run.answered_by}
    assert all(run.status(m) != "answered" for m in gone)


def test_a_member_crashed_mid_query_is_failed_once_membership_has_seen_it():
    """With a timeout longer than SWIM's detection, a member that crashed
    without answering is reported `failed`, not `silent`; with a short one
    it is `silent` (the querier cannot know yet)."""
    failed = silent = 0
    for seed in range(1, 7):
        long = query_run(seed, timeout_s=20.0)
        short = query_run(seed, timeout_s=1.5, crash_within_s=1.0)
        for m in long.crashed:
            if m not in long.answered_by:
                assert long.status(m) == "failed", (seed, m)
                failed += 1
        for m in short.crashed:
            if m not in short.answered_by:
                assert short.status(m) == "silent", (seed, m)
                silent += 1
    assert failed >= 3 and silent >= 3


def test_a_duplicated_answer_is_counted_once():
    """Answers delivered twice (a stream retried) count once per member."""
    run = query_run(5, duplicate=0.5, crashes=0, stream_loss=0.0)
    assert run.answers_sent > len(run.answered_by) == len(run.expected)
    assert run.outcome["answered"] == len(run.expected) and run.outcome["complete"]
