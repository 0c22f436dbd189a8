"""Taking a snapshot off the core, and the cap on one coming in
(metalog/snapshot.py, metalog/core.py): the core hands the driver a view
and compacts only once the snapshot comes back; the bytes are those of
msgpack in one call, however the keys came; a follower refuses and counts
chunks of a snapshot over `max_snapshot_bytes` or at odds with what was
declared, and holds nothing of them."""

from __future__ import annotations

import random

import msgspec
import pytest

from shoal.metalog.core import MetaConfig, MetaLog
from shoal.metalog.messages import Append, AppendAck, Entry
from shoal.metalog.snapshot import (
    PersistSnapshot,
    Receiver,
    SnapshotAck,
    TakeSnapshot,
    chunk_of,
    encode_state,
    encode_view,
    restore,
    take,
    view_of,
)
from shoal.metalog.state import MetaPut, MetaState

LEADER = ("10.0.0.1", 7946)


def _one_call(state: MetaState) -> bytes:
    """The snapshot format as one msgpack call makes it (the reference)."""
    keys = [[k, s.value, s.create_revision, s.mod_revision, s.version, s.session]
            for k, s in sorted(state.keys.items())]  # fmt: skip
    seen = [[o, list(p)] for o, p in sorted(state._seen.items())]
    sessions = [[i.id, i.ttl_ms, i.name, i.node, list(i.checks), i.revision]
                for _, i in sorted(state.sessions.items())]  # fmt: skip
    return msgspec.msgpack.encode([2, keys, seen, sessions])


def _state(n: int, seed: int = 1) -> MetaState:
    rng = random.Random(seed)
    state = MetaState()
    for i in range(1, n + 1):
        key = b"k/%06d" % (i * 7919 % (2 * n)) if i % 5 else b"k/%06d" % rng.randrange(2 * n)
        state.apply(i, MetaPut(key, rng.randbytes(rng.randrange(40))), f"o{i % 3}", i)
    return state


@pytest.mark.parametrize("n", [0, 1, 15, 16, 600, 80_000])
def test_the_bytes_in_pieces_are_the_bytes_of_one_call(n):
    """Around every header size (15 and 16 keys, over 65,535: the long
    header), past a piece of rows and a sort run."""
    state = _state(n)
    assert n < 80_000 or len(state.keys) > 65_535
    assert encode_state(state) == _one_call(state)
    snapshot = take(state, 3)
    assert restore(snapshot).keys == state.keys and snapshot.index == n


def test_a_view_does_not_change_with_the_state():
    """What the driver encodes is the state at the view's index, whatever
    is applied after the view was taken."""
    state = _state(50)
    before = _one_call(state)
    view = view_of(state, 50, 2)
    state.apply(51, MetaPut(b"k/000001", b"later"), "o1", 999)
    assert encode_view(view).data == before


def _follower(**config) -> MetaLog:
    return MetaLog("node-b", ("10.0.0.2", 7946), MetaConfig(**config), random.Random(1), (),
                   leading_epoch=lambda: None, highest_epoch=lambda: 1,
                   saw_epoch=lambda e: None, voters=lambda: (("node-a", "node-b", "node-c"),),
                   controller=lambda: None, addr_of=lambda n: None)  # fmt: skip


def _entries(first: int, n: int) -> tuple[Entry, ...]:
    return tuple(Entry(1, i, MetaPut(b"k%d" % (i % 4), b"v%d" % i), "node-a", i)
                 for i in range(first, first + n))  # fmt: skip


def _append(meta: MetaLog, first: int, n: int, commit: int) -> list:
    meta.receive(Append(1, "node-a", first - 1, 0 if first == 1 else 1, _entries(first, n),
                        commit), LEADER, 1.0)  # fmt: skip
    return [item.write for item in meta.drain().persist]


def test_the_core_compacts_only_once_the_driver_hands_the_snapshot_back():
    """Every 10 entries a view goes to the driver, one at a time; the log is
    compacted (and PersistSnapshot emitted) when the snapshot comes back."""
    meta = _follower(snapshot_every=10, keep_entries=2)
    writes = _append(meta, 1, 25, 12)
    (view,) = [w for w in writes if type(w) is TakeSnapshot]
    assert (view.index, view.epoch) == (12, 1) and meta.log.held_from() == 1
    # 13 more applied while it is encoded: no second view meanwhile.
    assert not [w for w in _append(meta, 26, 0, 25) if type(w) is TakeSnapshot]
    snapshot = encode_view(view)
    meta.snapshot_taken(snapshot, 2.0)
    (persist,) = [item.write for item in meta.drain().persist]
    assert persist == PersistSnapshot(snapshot, 10)
    assert meta.snapshot == snapshot and meta.log.held_from() == 11
    assert meta.counters.snapshots_taken == 1
    # The next is due at once (25 - 12 >= 10): asked on the next entry applied.
    writes = _append(meta, 26, 1, 26)
    assert [w.index for w in writes if type(w) is TakeSnapshot] == [26]
    meta.snapshot_taken(None, 3.0)  # the driver failed: asked again
    assert [w.index for w in _append(meta, 27, 1, 27) if type(w) is TakeSnapshot] == [27]


def test_a_snapshot_an_install_overtook_is_dropped():
    """The leader's snapshot installed while ours was encoded: ours (older)
    is not taken as the latest, nothing is compacted or written for it."""
    meta = _follower(snapshot_every=10, keep_entries=2)
    (view,) = [w for w in _append(meta, 1, 10, 10) if type(w) is TakeSnapshot]
    theirs = take(_state_for(_entries(1, 40)), 1)
    meta.receive(chunk_of(theirs, 1, "node-a", 0, 1 << 20), LEADER, 2.0)
    assert [type(i.write) for i in meta.drain().persist] == [PersistSnapshot]
    meta.snapshot_taken(encode_view(view), 3.0)
    assert meta.drain().persist == () and meta.snapshot == theirs
    assert meta.counters.snapshots_taken == 0 and meta.counters.snapshots_installed == 1


def _state_for(entries: tuple[Entry, ...]) -> MetaState:
    state = MetaState()
    for e in entries:
        state.apply(e.index, e.op, e.origin, e.pid)
    return state


def test_chunks_of_a_snapshot_over_the_cap_are_refused_and_nothing_is_held():
    snapshot = take(_state(300), 2)
    size = len(snapshot.data)
    capped = Receiver(max_bytes=size - 1)
    for offset in range(0, size, 1000):
        assert capped.take(chunk_of(snapshot, 2, "node-a", offset, 1000)) == (0, None)
    assert capped.too_large == -(-size // 1000) and capped.incoming is None
    exact = Receiver(max_bytes=size)
    done = None
    for offset in range(0, size, 1000):
        _, done = exact.take(chunk_of(snapshot, 2, "node-a", offset, 1000))
    assert done is not None and done[0] == snapshot and exact.too_large == 0


def test_chunks_at_odds_with_what_was_declared_are_refused_and_counted():
    """Data past the declared size, an empty chunk, or another snapshot
    under the index being received: counted, never buffered past the size."""
    snapshot = take(_state(100), 2)
    size = len(snapshot.data)
    receiver = Receiver(max_bytes=1 << 20)
    first = chunk_of(snapshot, 2, "node-a", 0, 500)
    assert receiver.take(first) == (500, None)
    past = msgspec.structs.replace(chunk_of(snapshot, 2, "node-a", 500, 500), size=600)
    empty = msgspec.structs.replace(chunk_of(snapshot, 2, "node-a", 500, 500), data=b"", crc=0)
    assert receiver.take(past) == (0, None) and receiver.take(empty) == (500, None)
    assert receiver.inconsistent == 2
    other = msgspec.structs.replace(chunk_of(snapshot, 2, "node-a", 500, 500), digest=b"\x07" * 32)
    assert receiver.take(other) == (0, None) and receiver.inconsistent == 3
    assert len(receiver.incoming.buf) == 500  # type: ignore[union-attr]
    done = None
    for offset in range(500, size, 500):
        _, done = receiver.take(chunk_of(snapshot, 2, "node-a", offset, 500))
    assert done is not None and done[0] == snapshot


def test_the_follower_answers_a_chunk_over_its_cap_with_nothing_held():
    """The core counts it (meta_snapshot_chunks_too_large in /v1/self), does
    not install, and tells the leader it holds 0 bytes."""
    snapshot = take(_state(200), 2)
    meta = _follower(max_snapshot_bytes=len(snapshot.data) - 1)
    meta.receive(chunk_of(snapshot, 1, "node-a", 0, 1 << 20), LEADER, 1.0)
    out = meta.drain()
    assert out.persist == () and meta.state.revision == 0
    assert [s.messages for s in out.send] == [(SnapshotAck(1, "node-b", snapshot.index, 0),)]
    assert meta.counters.snapshot_chunks_too_large == 1
    assert AppendAck not in [type(m) for s in out.send for m in s.messages]
