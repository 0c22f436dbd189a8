"""Two anti-entropy cores, wired back to back through the real codec."""

import random

import pytest

from shoal.kernel import codec
from shoal.storage.antientropy import AntiEntropy
from shoal.storage.config import SESSION_BUDGET_BYTES, SyncConfig
from shoal.storage.messages import RecordPush, SyncTree
from shoal.storage.store import MemoryStore, Replica
from shoal.storage.syncstate import SyncCompleted

WALL = 1_800_000_000_000
TAG = codec.cluster_tag("test")


class Pair:
    """Nodes A and B; every message crosses the codec and is counted."""

    def __init__(self, config: SyncConfig | None = None) -> None:
        self.config = config or SyncConfig()
        self.nodes = {("a", 1): self._core(1), ("b", 1): self._core(2)}
        self.a, self.b = self.nodes[("a", 1)], self.nodes[("b", 1)]
        self.bytes = 0
        self.events: list[SyncCompleted] = []

    def _core(self, i: int) -> AntiEntropy:
        rep = Replica(MemoryStore(self.config.tree_depth), bytes([i]) * 16,
                      self.config.max_skew_ms, 86_400_000)  # fmt: skip
        return AntiEntropy(rep, self.config, random.Random(i), lambda rng, k: [],
                           wall_offset_ms=WALL)  # fmt: skip

    def sync(self, initiator=("a", 1), peer=("b", 1)) -> SyncCompleted:
        src = self.nodes[initiator]
        assert src.sync_with(peer, 0.0)
        self.deliver(initiator)
        return self.events[-1]

    def deliver(self, initiator) -> None:
        """Carry what `initiator` has to send, and every answer, until quiet."""
        queue = [(initiator, s) for s in self.nodes[initiator].drain().send]
        while queue:
            sender, send = queue.pop(0)
            frame = codec.encode_frame(send.messages, TAG)
            self.bytes += len(frame)
            dst = self.nodes[send.to]
            for msg in codec.decode_datagram(frame[4:], TAG):
                dst.receive(msg, sender, 0.0)
            out = dst.drain()
            queue += [(send.to, s) for s in out.send]
            self.events += out.events
        for core in self.nodes.values():  # the follow-up session, if any
            self.events += core.drain().events

    def same(self) -> bool:
        a = {r.key: r for r in self.a.replica.store.all()}
        b = {r.key: r for r in self.b.replica.store.all()}
        return a == b and self.a.replica.tree.levels == self.b.replica.tree.levels


def full_copy_bytes(core: AntiEntropy) -> int:
    return len(codec.encode_frame([RecordPush(tuple(core.replica.store.all()))], TAG))


def test_100k_replicas_differing_in_100_keys_sync_with_under_2_percent_of_a_full_copy():
    """The headline: bytes follow the difference, not the data."""
    pair = Pair()
    rng = random.Random(7)
    for k in range(100_000):
        rec = pair.a.replica.write(b"key/%08d" % k, rng.randbytes(16), WALL)
        pair.b.replica.merge([rec], WALL)
    changed = rng.sample(range(100_000), 100)
    for k in changed[:50]:  # newer on A
        pair.a.replica.write(b"key/%08d" % k, b"from-a", WALL + 5)
    for k in changed[50:]:  # newer on B
        pair.b.replica.write(b"key/%08d" % k, b"from-b", WALL + 5)
    done = pair.sync()
    assert done.ok and done.sent == 50 and done.received == 50
    assert pair.same()
    ratio = pair.bytes / full_copy_bytes(pair.a)
    assert ratio <= 0.02, f"sent {pair.bytes} bytes, {ratio:.2%} of a full copy"


def test_equal_replicas_cost_one_round_trip():
    pair = Pair()
    for k in range(1000):
        rec = pair.a.replica.write(b"%d" % k, b"v", WALL)
        pair.b.replica.merge([rec], WALL)
    done = pair.sync()
    assert done.ok and done.rounds == 1 and done.sent == done.received == 0
    assert pair.bytes < 100


def test_deletes_and_empty_sides_reconcile_both_ways():
    pair = Pair()
    for k in range(300):
        pair.a.replica.write(b"a%d" % k, b"v", WALL)
    pair.b.replica.write(b"b-only", b"v", WALL)
    pair.sync()
    assert pair.same()
    pair.b.replica.write(b"a7", None, WALL + 10)
    pair.sync(("b", 1), ("a", 1))
    assert pair.a.replica.get(b"a7").value is None and pair.same()


def test_a_large_catch_up_runs_in_budgeted_sessions_until_done():
    """A new node fetching more than one session's budget gets it all, in
    frames far below the frame limit, without being asked again."""
    pair = Pair()
    value = b"x" * 4096
    n = 2 * SESSION_BUDGET_BYTES // len(value) + 100
    for k in range(n):
        pair.b.replica.write(b"big/%06d" % k, value, WALL)
    sessions = 0
    while not pair.same():
        pair.sync()
        sessions += 1
        assert sessions < 10
    assert sessions >= 3  # the budget really split it
    assert all(e.ok for e in pair.events)


def test_a_peer_with_another_tree_depth_is_counted_not_answered():
    pair = Pair()
    pair.b.receive(SyncTree(1, 3, 0, (), ((0, 5),)), ("a", 1), 0.0)
    assert not pair.b.drain() and pair.b.counters.depth_mismatch == 1


def test_a_failed_stream_ends_the_session_and_the_next_can_start():
    pair = Pair()
    pair.a.sync_with(("b", 1), 0.0)
    pair.a.drain()
    assert not pair.a.sync_with(("b", 1), 0.1)
    pair.a.stream_failed(("b", 1), 0.2)
    assert pair.a.drain().events == (SyncCompleted(("b", 1), False, 0, 0, 0),)
    assert pair.a.sync_with(("b", 1), 0.3)


@pytest.mark.parametrize("size,channel", [(10, "packet"), (5000, "stream")])
def test_writes_are_pushed_to_every_member_of_a_small_cluster_in_a_datagram_when_they_fit(
    size, channel
):
    peers = [("p", i) for i in range(10)]
    rep = Replica(MemoryStore(4), b"\x01" * 16, 60_000, 86_400_000)
    core = AntiEntropy(rep, SyncConfig(push_fanout=3), random.Random(1),
                       lambda rng, k: rng.sample(peers, min(k, len(peers))), WALL)  # fmt: skip
    core.write(b"k", b"v" * size, 0.0)
    sends = core.drain().send
    assert {s.to for s in sends} == set(peers)
    assert {s.channel.value for s in sends} == {channel}


def test_in_a_large_cluster_a_write_goes_to_the_fanout_who_forward_what_is_news_once():
    peers = [("p", i) for i in range(200)]
    sample = lambda rng, k: rng.sample(peers, min(k, len(peers)))  # noqa: E731
    config = SyncConfig(push_fanout=3, push_all_max=64)
    writer = AntiEntropy(Replica(MemoryStore(4), b"\x01" * 16, 60_000, 86_400_000), config,
                         random.Random(1), sample, WALL)  # fmt: skip
    writer.write(b"k", b"v", 0.0)
    (first, *_) = sends = writer.drain().send
    assert len({s.to for s in sends}) == 3
    relay = AntiEntropy(Replica(MemoryStore(4), b"\x02" * 16, 60_000, 86_400_000), config,
                        random.Random(2), sample, WALL)  # fmt: skip
    relay.receive(first.messages[0], ("p", 0), 0.0)
    forwarded = relay.drain().send
    assert len(forwarded) == 3 and ("p", 0) not in {s.to for s in forwarded}
    relay.receive(first.messages[0], ("p", 1), 0.0)  # old news now: not forwarded again
    assert not relay.drain().send


def test_a_quiet_store_syncs_less_often_and_a_write_brings_the_pace_back():
    """Sessions that find equal replicas double the interval, up to 4x; a
    write brings the next session within about a second (it carries the
    write to whoever its push missed) and the pace back to sync_interval_s."""
    pair = Pair()
    rep = pair.a.replica
    pair.a = pair.nodes[("a", 1)] = AntiEntropy(
        rep, pair.config, random.Random(1), lambda rng, k: [("b", 1)], wall_offset_ms=WALL
    )
    a, base = pair.a, pair.config.sync_interval_s
    a.start(0.0)
    starts: list[float] = []
    while len(starts) < 8:
        now = a.next_deadline()
        before = a.counters.sessions_started
        a.tick(now)  # a session's start also draws the delay to the next one
        pair.deliver(("a", 1))
        if a.counters.sessions_started > before:
            starts.append(now)
            if len(starts) == 4:
                a.write(b"k", b"v", now)  # (pushed to b, which then holds it too)
    gaps = [round(t1 - t0, 2) for t0, t1 in zip(starts, starts[1:])]
    factors = [g / base for g in gaps]
    # Nominal gaps, each drawn from 0.8-1.2 of it: a first retry after 1 s,
    # then 2x, 4x; the write, and a session 1 s later; 1x, and the push
    # made that session find the replicas equal: 2x, 4x.
    nominal = [1 / base, 2, 4, 1 / base, 1, 2, 4]
    assert all(0.8 * n <= f <= 1.2 * n for f, n in zip(factors, nominal)), gaps


def lone_core(peers: list, config: SyncConfig | None = None) -> AntiEntropy:
    """A core whose sampler draws from `peers` (a list the test may change)."""
    cfg = config or SyncConfig()
    rep = Replica(MemoryStore(cfg.tree_depth), b"\x01" * 16, cfg.max_skew_ms, 86_400_000)
    return AntiEntropy(rep, cfg, random.Random(1),
                       lambda rng, k: rng.sample(peers, min(k, len(peers))), WALL)  # fmt: skip


def session_peers(core: AntiEntropy) -> list:
    """Where the sessions that `core` opened since the last drain go."""
    return [s.to for s in core.drain().send if isinstance(s.messages[0], SyncTree)]


def test_a_returning_member_gets_a_session_at_once_and_others_queue_behind_it():
    """A member back from dead or suspect is synced with at once, however
    long the quiet interval; returns during a session run right after it."""
    pair = Pair()
    a = pair.a
    a.start(0.0)
    a.peer_returned(("b", 1), 30.0)
    assert session_peers(a) == [("b", 1)]
    a.peer_returned(("c", 1), 30.0)
    a.peer_returned(("c", 1), 30.0)  # once is enough
    a.peer_returned(("b", 1), 30.0)  # already running
    assert session_peers(a) == []
    a.stream_failed(("b", 1), 30.1)
    a.tick(30.1)
    assert session_peers(a) == [("c", 1)]
    assert a.counters.sessions_on_return == 2


def test_an_unanswered_session_frees_the_slot_in_seconds_and_the_peer_is_skipped():
    """A session to a peer that never answers (cut off, not yet suspected)
    ends after 1 s, not the 10 s session timeout; another peer is tried at
    once, and pushes and sessions leave the silent one out until it returns."""
    peers = [("cut", 1), ("ok", 1)]
    core = lone_core(peers)
    assert core.sync_with(("cut", 1), 0.0)
    core.drain()
    assert core.next_deadline() == 1.0
    core.tick(1.0)
    out = core.drain()
    assert SyncCompleted(("cut", 1), False, 0, 0, 0) in out.events
    assert [s.to for s in out.send] == [("ok", 1)]  # the retry, at once
    assert core.counters.sessions_unanswered == 1
    sends = []
    for n in range(20):
        core.write(b"k%d" % n, b"v", 3.0)
        sends += [s.to for s in core.drain().send if isinstance(s.messages[0], RecordPush)]
    assert sends and ("cut", 1) not in sends
    core.peer_returned(("cut", 1), 4.0)  # membership saw it come back
    assert session_peers(core) == []  # behind the running session
    core.stream_failed(("ok", 1), 4.1)
    core.tick(4.1)
    assert session_peers(core) == [("cut", 1)]
    core.write(b"again", b"v", 4.2)
    assert ("cut", 1) in {s.to for s in core.drain().send}


def test_a_peer_that_answered_keeps_the_whole_session_timeout():
    """Only the first answer is due within 1 s: later rounds may scan a
    large store, and a session that has heard from its peer is not cut."""
    pair = Pair()
    for k in range(300):
        pair.b.replica.write(b"k%d" % k, b"v", WALL)
    pair.a.replica.write(b"mine", b"v", WALL)
    a, b = pair.a, pair.b
    assert a.sync_with(("b", 1), 0.0)
    (tree,) = a.drain().send
    b.receive(tree.messages[0], ("a", 1), 0.1)
    (diff,) = b.drain().send
    a.receive(diff.messages[0], ("b", 1), 0.2)  # answered: now a digest round
    a.drain()
    a.tick(5.0)  # past the first-answer timeout, within session_timeout_s
    assert not a.drain().events and not a.sync_with(("b", 1), 5.0)
    a.tick(10.0)
    assert a.drain().events == (SyncCompleted(("b", 1), False, 0, 0, 1),)
    assert a.counters.sessions_unanswered == 0


def test_a_write_brings_the_next_session_within_about_a_second():
    """A push is one datagram to a few members; a session about a second
    after a write carries it to a member the push missed."""
    pair = Pair()
    pair.a = pair.nodes[("a", 1)] = a = AntiEntropy(
        pair.a.replica, pair.config, random.Random(1), lambda rng, k: [("b", 1)], WALL
    )
    a.start(0.0)
    while a.counters.sessions_in_sync < 2:  # a first session, and one ~1 s later
        first = a.next_deadline()
        a.tick(first)
        pair.deliver(("a", 1))
    a.write(b"k", b"v", first + 0.5)
    a.drain()
    while not session_peers(a):  # (past the stale timeouts of the sessions)
        now = a.next_deadline()
        a.tick(now)
    assert first + 1.3 <= now <= first + 1.7  # not the periodic one, 4-6 s on
