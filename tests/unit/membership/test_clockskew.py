"""This node's clock offset from its peers, from probe round trips."""

from shoal.membership.clockskew import MAX_RTT_S, ClockOffsets

WALL = 1_800_000_000_000


def test_one_round_trip_gives_the_offset_within_half_the_rtt():
    offsets = ClockOffsets()
    # Sent at 10.000, answered at 10.010 (our clock); the peer stamped its
    # answer 70 s behind our midpoint: we are 70 s ahead.
    offsets.sample("b", 10.0, 10.010, WALL + 10_010, WALL + 10_005 - 70_000)
    assert offsets.estimate_ms(10.010) == 70_000


def test_the_median_over_peers_names_this_nodes_own_error_not_a_peers():
    """One peer with a wrong clock moves the estimate by nothing; this node's
    own wrong clock shows against every peer."""
    right = ClockOffsets()
    for peer, off in (("b", 0), ("c", -70_000), ("d", 0)):  # c is 70 s fast
        right.sample(peer, 1.0, 1.002, WALL, WALL - 1 - off)
    assert right.estimate_ms(1.002) == 0
    wrong = ClockOffsets()
    for peer in ("a", "b", "d"):
        wrong.sample(peer, 1.0, 1.002, WALL + 70_000, WALL - 1)
    assert wrong.estimate_ms(1.002) == 70_000
    two = ClockOffsets()  # even count: the middle value nearer zero
    two.sample("a", 1.0, 1.002, WALL, WALL - 1)
    two.sample("c", 1.0, 1.002, WALL, WALL - 1 + 70_000)
    assert two.estimate_ms(1.002) == 0


def test_slow_round_trips_and_old_samples_are_not_taken():
    offsets = ClockOffsets()
    offsets.sample("b", 1.0, 1.0 + MAX_RTT_S + 0.01, WALL, WALL - 5_000)
    assert offsets.estimate_ms(2.0) is None
    offsets.sample("b", 1.0, 1.001, WALL, WALL - 5_000)
    assert offsets.estimate_ms(2.0) == 5_000
    assert offsets.estimate_ms(1_000.0) is None  # five minutes on: too old
