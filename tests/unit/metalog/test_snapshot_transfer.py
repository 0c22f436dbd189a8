"""Snapshots of the metadata log's state and their transfer
(metalog/snapshot.py): deterministic bytes, chunks checked one by one and
the whole by its sha256, installed only whole, durably before the answer,
and never from a deposed controller."""

from __future__ import annotations

import random

import pytest

from shoal.kernel import codec
from shoal.kernel.codec import DecodeError
from shoal.metalog.core import MetaConfig, MetaLog
from shoal.metalog.messages import AppendAck
from shoal.metalog.snapshot import (
    PersistSnapshot,
    Receiver,
    Snapshot,
    SnapshotAck,
    chunk_of,
    digest,
    encode_state,
    restore,
    take,
)
from shoal.metalog.state import MetaPut, MetaState

LEADER = ("10.0.0.1", 7946)


def _state(order: list[int]) -> MetaState:
    state = MetaState()
    for i, k in enumerate(order, start=1):
        state.apply(i, MetaPut(b"key-%d" % k, b"value-%d" % (i * 37)), f"node-{k % 2}", 100 + i)
    return state


def _follower(highest: int = 3) -> MetaLog:
    return MetaLog("node-b", ("10.0.0.2", 7946), MetaConfig(chunk_bytes=100),
                   random.Random(1), (), leading_epoch=lambda: None,
                   highest_epoch=lambda: highest, saw_epoch=lambda e: None,
                   voters=lambda: (("node-a", "node-b", "node-c"),),
                   controller=lambda: None, addr_of=lambda n: None)  # fmt: skip


def test_a_snapshot_is_the_same_bytes_whatever_order_the_keys_came_in():
    """Two states with the same keys, built in another order, encode alike
    (sorted), and a restored state equals the one snapshotted."""
    a, b = _state([1, 2, 3, 4]), _state([1, 2, 3, 4])
    b.keys = dict(reversed(list(b.keys.items())))
    assert list(a.keys) != list(b.keys) and encode_state(a) == encode_state(b)
    snapshot = take(a, 2)
    back = restore(snapshot)
    assert back.keys == a.keys and back.revision == 4
    assert encode_state(back) == encode_state(a)  # the dedup memory too
    assert back.apply(5, MetaPut(b"key-9", b"x"), "node-1", 103).__class__.__name__ == "Duplicate"


def test_chunks_travel_through_the_codec_and_a_malformed_one_is_refused():
    snapshot = take(_state([1, 2, 3]), 2)
    chunk = chunk_of(snapshot, 5, "node-a", 0, 64)
    ack = SnapshotAck(5, "node-b", snapshot.index, 64)
    assert codec.decode_payload(codec.encode_payload([chunk, ack])) == [chunk, ack]
    bad = codec.encode_payload([chunk]).replace(snapshot.digest, b"\x00" * 31 + b"")
    with pytest.raises(DecodeError):
        codec.decode_payload(bad)


def test_a_damaged_chunk_is_refused_and_taken_when_sent_again():
    """A chunk whose crc does not match is not kept (the follower answers
    with what it holds, so the leader sends it again); a whole whose sha256
    does not match is never installed."""
    snapshot = take(_state([1, 2, 3, 4, 5]), 2)
    size = len(snapshot.data)
    chunks = [chunk_of(snapshot, 5, "node-a", off, 40) for off in range(0, size, 40)]
    receiver = Receiver()
    assert receiver.take(chunks[0]) == (40, None)
    damaged = chunks[1].__class__(**{**_fields(chunks[1]), "data": b"\x00" * 40})
    assert receiver.take(damaged) == (40, None) and receiver.refused == 1
    done = None
    for chunk in chunks[1:]:
        _, done = receiver.take(chunk)
    assert done is not None and done[0] == snapshot and done[1].keys == _state([1, 2, 3, 4, 5]).keys
    lying = [c.__class__(**{**_fields(c), "digest": b"\x01" * 32}) for c in chunks]
    for chunk in lying:
        assert receiver.take(chunk)[1] is None
    assert receiver.refused == 2


def _fields(chunk):
    return {f: getattr(chunk, f) for f in chunk.__struct_fields__}


def test_an_install_is_answered_only_once_durable_and_a_deposed_leader_is_refused():
    """The follower's acknowledgement of an installed snapshot rides on the
    snapshot's write; chunks from a controller of an epoch below the
    highest the follower knows are refused as its appends would be."""
    snapshot = take(_state([1, 2, 3, 4, 5, 6]), 2)
    follower = _follower(highest=3)
    follower.receive(chunk_of(snapshot, 2, "node-a", 0, 10_000), LEADER, 1.0)
    out = follower.drain()
    assert [type(s.messages[0]) for s in out.send] == [AppendAck]
    assert out.send[0].messages[0].ok is False and follower.state.revision == 0
    follower.receive(chunk_of(snapshot, 3, "node-a", 0, 10_000), LEADER, 1.0)
    out = follower.drain()
    assert out.send == ()
    (item,) = out.persist
    assert item.write == PersistSnapshot(snapshot, 6)
    (ack,) = item.releases[0].messages
    assert ack == AppendAck(3, "node-b", True, 6)
    assert follower.state.keys == _state([1, 2, 3, 4, 5, 6]).keys
    assert follower.log.held_from() == 7 and follower.counters.snapshots_installed == 1


def test_a_snapshot_whose_digest_matches_but_is_not_a_state_is_refused():
    """Bytes that pass the checksum but do not decode (a leader's bug) are
    counted and dropped, not raised: remote input never crashes the core."""
    bogus = Snapshot(9, 2, b"\x93\x01", digest(b"\x93\x01"))
    follower = _follower(highest=2)
    follower.receive(chunk_of(bogus, 2, "node-a", 0, 100), LEADER, 1.0)
    assert follower.state.revision == 0 and follower.counters.snapshot_chunks_refused == 1
    (send,) = follower.drain().send
    assert send.messages[0] == SnapshotAck(2, "node-b", 9, 0)


def test_a_state_a_transaction_left_is_restored_whole():
    """A snapshot holds keys however an op left them: after a transaction,
    the restored state equals the state applied entry by entry."""
    from shoal.metalog.state import CMP_EQUAL, TARGET_MOD, Compare, MetaDelete, MetaTxn

    state = _state([1, 2])
    txn = MetaTxn((Compare(b"key-1", TARGET_MOD, CMP_EQUAL, 1),),
                  (MetaPut(b"key-3", b"t"), MetaDelete(b"key-2")))  # fmt: skip
    assert state.apply(3, txn, "node-0", 200).succeeded  # type: ignore[union-attr]
    back = restore(take(state, 2))
    assert back.keys == state.keys and set(back.keys) == {b"key-1", b"key-3"}
    assert encode_state(back) == encode_state(state)
