"""Lifeguard's suspicion timeout matches memberlist's."""

import pytest

from shoal.membership.suspicion import SuspicionTimer, suspicion_timeout_s


@pytest.mark.parametrize(
    ("n", "expected_s"),
    # memberlist suspicion_test.go TestSuspicion_remainingSuspicionTime
    # (k=3, min 2 s, max 30 s), as total timeouts.
    [(0, 30.0), (1, 16.0), (2, 7.81), (3, 2.0), (4, 2.0)],
)
def test_timeout_shrinks_with_confirmations_like_memberlist(n, expected_s):
    """Each independent confirmation brings a suspect's death closer."""
    assert suspicion_timeout_s(n, 3, 2.0, 30.0) == pytest.approx(expected_s, abs=0.001)


def test_confirmations_count_once_per_source_and_stop_at_k():
    """The same node suspecting twice, or more than k nodes, changes nothing."""
    timer = SuspicionTimer(10.0, 2, 5.0, 30.0, "a")
    assert timer.deadline_at == 40.0
    assert not timer.confirm("a")
    assert timer.confirm("b")
    assert not timer.confirm("b")
    assert timer.confirm("c")
    assert not timer.confirm("d")
    assert timer.deadline_at == 15.0


def test_no_expected_confirmations_means_the_minimum():
    """In a cluster too small to confirm, the minimum timeout applies."""
    assert suspicion_timeout_s(0, 0, 3.0, 18.0) == 3.0
