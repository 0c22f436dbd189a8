"""HLC properties and last-writer-wins: what makes replicas agree."""

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shoal.kernel.errors import WriteRefused
from shoal.storage import hlc
from shoal.storage.hlc import HybridClock
from shoal.storage.records import Record
from shoal.storage.store import MemoryStore, Replica

WALL = 1_800_000_000_000
SKEW_MS = 60_000
GRACE_MS = 86_400_000


@given(st.lists(st.tuples(st.booleans(), st.integers(-5_000, 5_000)), max_size=200))
def test_hlc_never_goes_backwards_and_stays_within_the_skew_bound(steps):
    """Whatever the wall clock and peers do, timestamps only grow, and the
    clock runs at most `max_skew_ms` ahead of our wall clock."""
    clock = HybridClock(SKEW_MS)
    wall, last, max_wall = WALL, 0, WALL
    for is_remote, jump in steps:
        wall += jump  # the wall clock may step backwards
        max_wall = max(max_wall, wall)
        if is_remote:
            remote = hlc.pack(wall + jump * 20, 7)  # some far ahead of the bound
            accepted = clock.observe(remote, wall)
            assert accepted == (hlc.physical_ms(remote) <= wall + SKEW_MS)
            assert clock.last >= last
        else:
            stamp = clock.now(wall)
            assert stamp > last
            assert hlc.physical_ms(stamp) >= wall
        last = clock.last
        assert hlc.physical_ms(last) <= max_wall + SKEW_MS


def test_a_write_after_seeing_a_remote_record_orders_after_it():
    """Causality: our next write wins over what we just received, even when
    the sender's clock is ahead of ours."""
    clock = HybridClock(SKEW_MS)
    remote = hlc.pack(WALL + 30_000, 5)
    assert clock.observe(remote, WALL)
    assert clock.now(WALL) > remote


def _writes(draw_ops):
    """Records as writers make them: one writer never stamps two alike."""
    seen, out = set(), []
    for k, v, t, writer, delete in draw_ops:
        if (t, writer) not in seen:
            seen.add((t, writer))
            out.append(Record(f"k{k}".encode(), None if delete else bytes([v]),
                              hlc.pack(WALL + t, 0), bytes([writer]) * 16))  # fmt: skip
    return out


write_ops = st.lists(
    st.tuples(st.integers(0, 5), st.integers(0, 255), st.integers(0, 20), st.integers(1, 3),
              st.booleans()),  # fmt: skip
    min_size=1, max_size=40,
)  # fmt: skip


@settings(max_examples=150)
@given(write_ops, st.randoms(use_true_random=False))
def test_last_writer_wins_whatever_the_delivery_order(ops, rnd):
    """Two replicas that received the same writes in different orders (and
    some twice) hold the same records and the same Merkle root."""
    records = _writes(ops)
    a = Replica(MemoryStore(2), b"\xaa" * 16, SKEW_MS, GRACE_MS)
    b = Replica(MemoryStore(2), b"\xbb" * 16, SKEW_MS, GRACE_MS)
    for rec in records:
        a.merge([rec], WALL)
    shuffled = records + rnd.sample(records, len(records) // 2)
    rnd.shuffle(shuffled)
    b.merge(shuffled, WALL)
    keys = {r.key for r in records}
    assert {k: a.get(k) for k in keys} == {k: b.get(k) for k in keys}
    assert a.tree.node(0, 0) == b.tree.node(0, 0)
    for key in keys:
        newest = max((r for r in records if r.key == key), key=lambda r: r.version)
        assert a.get(key) == newest


def test_equal_versions_from_a_faulty_writer_still_settle_the_same_everywhere():
    one = Record(b"k", b"x", hlc.pack(WALL), b"\x01" * 16)
    two = Record(b"k", b"y", hlc.pack(WALL), b"\x01" * 16)
    assert two.newer_than(one) and not one.newer_than(two)
    assert one.newer_than(Record(b"k", None, hlc.pack(WALL), b"\x01" * 16))


def test_a_record_from_a_clock_far_ahead_is_refused_and_counted():
    """One machine with its clock in 2099 cannot make its writes win forever."""
    rep = Replica(MemoryStore(2), b"\xaa" * 16, SKEW_MS, GRACE_MS)
    future = Record(b"k", b"v", hlc.pack(WALL + SKEW_MS + 1), b"\x01" * 16)
    assert rep.merge([future], WALL) == []
    assert rep.get(b"k") is None
    assert rep.counters.skew_refused == 1


def test_tombstones_are_collected_after_the_grace_period_and_not_taken_back():
    """A delete is remembered for the grace period, then dropped everywhere;
    an expired tombstone arriving late is not stored again."""
    rep = Replica(MemoryStore(2), b"\xaa" * 16, SKEW_MS, grace_ms := 10_000)
    rep.write(b"gone", b"v", WALL)
    tomb = rep.write(b"gone", None, WALL + 1)
    rep.write(b"kept", b"v", WALL + 2)
    assert rep.collect_tombstones(WALL + grace_ms - 1) == 0
    assert rep.get(b"gone") == tomb
    assert rep.collect_tombstones(WALL + grace_ms + 5) == 1
    assert rep.get(b"gone") is None and rep.get(b"kept") is not None
    assert rep.tree.count == 1
    assert rep.merge([tomb], WALL + grace_ms + 5) == []
    assert rep.counters.expired_tombstones_refused == 1


def test_restarted_replica_rebuilds_its_tree_and_clock_from_the_store():
    store = MemoryStore(3)
    rep = Replica(store, b"\xaa" * 16, SKEW_MS, GRACE_MS)
    rng = random.Random(3)
    for i in range(500):
        rep.write(f"key{rng.randrange(200)}".encode(), rng.randbytes(8), WALL + i)
    again = Replica(store, b"\xaa" * 16, SKEW_MS, GRACE_MS)
    assert again.tree.levels == rep.tree.levels
    assert again.clock.last == rep.clock.last


def test_no_acknowledged_write_loses_to_a_version_refused_as_too_far_ahead():
    """Issue 28, case 1: B's clock +70 s writes W1; A refuses it. A write on A
    now would be stamped below W1 and lose to it once W1 is accepted, after
    A acknowledged it: A refuses the write instead, until W1 has been taken
    in or A's clock has passed its stamp; then A's write wins everywhere."""
    now = 1_800_000_000_000
    a = Replica(MemoryStore(2), b"\xaa" * 16, SKEW_MS, GRACE_MS)
    b = Replica(MemoryStore(2), b"\xbb" * 16, SKEW_MS, GRACE_MS)
    w1 = b.write(b"k", b"W1", now + 70_000)
    assert a.merge([w1], now) == [] and a.counters.skew_refused == 1
    with pytest.raises(WriteRefused, match="ahead of this agent's clock"):
        a.write(b"k", b"W2", now + 1_000)
    assert a.write(b"other", b"x", now + 1_000)  # other keys are not held up
    assert a.merge([w1], now + 15_000) == [w1]  # re-offered, within the bound now
    w2 = a.write(b"k", b"W2", now + 15_001)  # acknowledged: it must win
    assert w2.newer_than(w1) and a.counters.writes_refused_ahead == 1
    b.merge([w2], now + 70_000)
    assert b.get(b"k") == a.get(b"k") == w2


def test_a_slow_node_takes_fresh_records_judged_by_the_clusters_clock():
    """Issue 28, mirror case: a node 70 s slow that knows it (its measured
    offset) takes its peers' fresh writes instead of refusing them all."""
    now = 1_800_000_000_000
    slow = Replica(MemoryStore(2), b"\xcc" * 16, SKEW_MS, GRACE_MS)
    fresh = Record(b"k", b"v", hlc.pack(now), b"\xaa" * 16)
    assert slow.merge([fresh], now - 70_000) == []  # judged by its own clock: refused
    assert slow.merge([fresh], now - 70_000, clock_offset_ms=-70_000) == [fresh]
