"""Lifeguard's suspicion timeout matches memberlist's."""

import pytest

from shoal.membership.profiles import SwimConfig
from shoal.membership.suspicion import (
    SuspicionTimer,
    remaining_suspicion_s,
    suspicion_min_s,
    suspicion_timeout_s,
)

CONFIG = SwimConfig()  # memberlist LAN: SuspicionMult 4, max 6x, probe 1 s


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


@pytest.mark.parametrize(
    ("n", "elapsed_s", "expected_s"),
    # memberlist suspicion_test.go TestSuspicion_remainingSuspicionTime, verbatim.
    [
        (0, 0.0, 30.0),
        (1, 2.0, 14.0),
        (2, 3.0, 4.81),
        (3, 4.0, -2.0),
        (4, 5.0, -3.0),
        (5, 10.0, -8.0),
    ],
)
def test_remaining_time_is_memberlists(n, elapsed_s, expected_s):
    """What is left of a suspicion matches memberlist, elapsed time included."""
    got = remaining_suspicion_s(n, 3, elapsed_s, 2.0, 30.0)
    assert got == pytest.approx(expected_s, abs=0.001)


def test_a_timer_computes_its_own_k_and_bounds_from_the_cluster_size():
    """A suspicion in a 100-member LAN cluster lasts 8 s to 48 s and wants 2
    confirmations; in a 3-member cluster nobody can confirm, so 4 s applies."""
    big = SuspicionTimer.begin(5.0, "a", CONFIG, 100)
    assert (big.k, big.min_s, big.max_s) == (2, 8.0, 48.0)
    assert big.deadline_at == 53.0
    small = SuspicionTimer.begin(5.0, "a", CONFIG, 3)
    assert small.k == 0 and small.deadline_at == 9.0
    assert suspicion_min_s(CONFIG, 3) == 4.0


def test_confirmations_beyond_k_shorten_the_timeout_down_to_the_floor():
    """At 20 members (k = 2, minimum 5.2 s) four more confirmations bring a
    suspicion down in equal steps to one probe interval; more change nothing."""
    timer = SuspicionTimer.begin(0.0, "a", CONFIG, 20)
    min_s = suspicion_min_s(CONFIG, 20)
    assert (timer.k, timer.cap, timer.floor_s) == (2, 6, 1.0)
    deadlines = []
    for source in "bcdefgh":
        timer.confirm(source)
        deadlines.append(timer.deadline_at)
    step = (min_s - 1.0) / 4
    expected = [None, min_s, min_s - step, min_s - 2 * step, min_s - 3 * step, 1.0, 1.0]
    assert deadlines[1:] == pytest.approx(expected[1:])
    assert deadlines[0] > min_s  # one confirmation: memberlist's curve
    assert timer.confirmations == 6


def test_no_more_confirmations_count_than_members_who_could_confirm():
    """At 5 members only the 3 besides the suspect and its first suspector
    can confirm: the third is the floor."""
    timer = SuspicionTimer.begin(0.0, "a", CONFIG, 5)
    assert (timer.k, timer.cap) == (2, 3)
    for source in "bcd":
        timer.confirm(source)
    assert timer.deadline_at == 1.0
    assert not timer.confirm("e")


def test_a_floor_as_long_as_the_minimum_keeps_memberlists_timing():
    """`suspicion_floor_mult` at or above 4 × log10(N) probe intervals: more
    confirmations than k never end a suspicion before memberlist would."""
    slow = SwimConfig(suspicion_floor_mult=100.0)
    timer = SuspicionTimer.begin(0.0, "a", slow, 20)
    for source in "bcdefg":
        timer.confirm(source)
    assert timer.deadline_at == pytest.approx(suspicion_min_s(slow, 20))
