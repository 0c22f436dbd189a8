"""BroadcastQueue sends each update a bounded number of times, newest first."""

from shoal.membership.broadcast import BroadcastQueue


def test_newer_update_replaces_older_about_the_same_member():
    """Stale news about a member is never sent once newer news exists."""
    q = BroadcastQueue()
    q.push("n1", "old", 10)
    q.push("n1", "new", 10)
    assert q.take(100, 5) == ["new"]


def test_each_update_is_sent_limit_times_then_dropped():
    """An update stops being gossiped after its retransmit limit."""
    q = BroadcastQueue()
    q.push("n1", "m", 10)
    sent = sum(len(q.take(100, 3)) for _ in range(10))
    assert sent == 3 and len(q) == 0


def test_least_sent_first_and_byte_budget_respected():
    """Fresh updates go before ones already sent, and a datagram is never overfilled."""
    q = BroadcastQueue()
    q.push("a", "a", 40)
    assert q.take(100, 5) == ["a"]
    q.push("b", "b", 40)
    q.push("c", "c", 40)
    assert q.take(100, 5) == ["c", "b"]
    q.push("d", "d", 40)
    assert q.take(50, 5) == ["d"]
    assert len(q.take(50, 5)) == 1


def test_small_updates_fill_the_gaps_left_by_big_ones():
    """Packing skips an update that does not fit and takes smaller ones behind it."""
    q = BroadcastQueue()
    q.push("small", "s", 10)
    q.push("big", "B", 95)
    q.push("big2", "C", 95)
    assert q.take(110, 5) == ["C", "s"]


def test_a_gap_is_filled_by_an_update_that_shrank():
    """Packing goes by the sizes queued now: a member's newer, smaller update
    still fills the room a big one leaves."""
    q = BroadcastQueue()
    q.push("a", "A-big", 90)
    q.push("a", "A", 10)
    q.push("b", "B", 95)
    assert q.take(110, 5) == ["B", "A"]
    assert sorted(q.take(110, 5)) == ["A", "B"]  # and again, both sent once
