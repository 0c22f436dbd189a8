"""When a large share of the cluster dies at once, discovery announces and asks
again in bounded rounds (daemon/network/rediscovery.py)."""

import random

from shoal.daemon.network.rediscovery import GIVE_UP_S, MAX_GAP_S, Rediscovery


def rounds_at(r: Rediscovery, up: set[str], dead: dict[str, float], until: float,
              step: float = 0.5, start: float = 0.0) -> list[float]:  # fmt: skip
    out = []
    t = start
    while t <= until:
        if r.due(t, up, dead):
            out.append(t)
        t = round(t + step, 6)
    return out


def test_a_cut_of_a_third_starts_rounds_that_back_off_to_30_s():
    """Two of six others die together: a round at once, then after 1, 2, 4 s
    and so on, never more than one per 33 s (30 s and its jitter) later on."""
    r = Rediscovery(random.Random(1))
    up = {"a", "b", "c", "d"}
    times = rounds_at(r, up, {"e": 0.0, "f": 0.0}, 300.0)
    assert times[0] == 0.0
    gaps = [b - a for a, b in zip(times, times[1:], strict=False)]
    assert 1.0 <= gaps[0] <= 1.5 and 2.0 <= gaps[1] <= 2.5
    assert all(later >= earlier for earlier, later in zip(gaps, gaps[1:4], strict=False))
    assert max(gaps) <= MAX_GAP_S * 1.1 + 0.5 and min(gaps[5:]) >= MAX_GAP_S
    assert len(times) <= 5 + 300 / MAX_GAP_S


def test_rounds_stop_when_the_burst_is_back_and_after_give_up():
    r = Rediscovery(random.Random(2))
    dead = {"e": 10.0, "f": 10.0}
    assert r.due(10.0, {"a", "b"}, dead)
    # Back: both up again, no more rounds.
    assert not rounds_at(r, {"a", "b", "e", "f"}, {}, 100.0, start=11.0)
    # Another burst that never comes back ends at the give-up time.
    r = Rediscovery(random.Random(3))
    times = rounds_at(r, {"a"}, {"e": 0.0, "f": 0.0}, GIVE_UP_S + 200, step=1.0)
    assert times[-1] < GIVE_UP_S
    assert len(times) <= 30


def test_one_death_or_a_small_share_or_a_leave_starts_nothing():
    r = Rediscovery(random.Random(4))
    up = {f"n{i}" for i in range(9)}
    assert not rounds_at(r, up, {"x": 0.0}, 20.0)  # one death of ten
    assert not rounds_at(r, up, {"x": 0.0, "y": 0.0}, 20.0)  # two of eleven: under a third
    # Deaths older than the window are not a burst.
    assert not rounds_at(r, {"a"}, {"x": 0.0, "y": 0.0}, 40.0, start=20.0)


def test_the_last_other_member_dying_is_a_burst():
    """A cluster of two cut in two: each side lost everyone it knew."""
    r = Rediscovery(random.Random(5))
    assert r.due(3.0, set(), {"other": 2.0})
