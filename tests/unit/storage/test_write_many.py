"""A batch of local writes (`AntiEntropy.write_many`, a backup's restore)
on real RocksDB: stamped, refused and stored as the same writes one by one,
its Merkle tree what a rebuild from the disk gives, its pushes a few
streams that leave every peer with the same records."""

import random
from pathlib import Path

from shoal.kernel import codec
from shoal.kernel.contract import Channel
from shoal.storage import hlc
from shoal.storage.antientropy import PUSH_BATCH_BYTES, AntiEntropy
from shoal.storage.config import SyncConfig
from shoal.storage.engine import Engine
from shoal.storage.messages import RecordPush
from shoal.storage.records import Record
from shoal.storage.store import Replica

WALL = 1_800_000_000_000
TAG = codec.cluster_tag("test")
A, B = b"\x01" * 16, b"\x02" * 16
PEERS = [("b", 1), ("c", 1)]


def core(path: Path, node_id: bytes = A) -> tuple[Engine, AntiEntropy]:
    """A node's anti-entropy core on its own database; every member alive."""
    engine = Engine(path, SyncConfig().tree_depth)
    replica = Replica(engine.records, node_id, 60_000, 86_400_000)
    return engine, AntiEntropy(replica, SyncConfig(), random.Random(1),
                               lambda rng, k: PEERS[:k], wall_offset_ms=WALL)  # fmt: skip


def seed(sync: AntiEntropy) -> None:
    """The same history on any replica: own writes, a fenced key, a record
    from a peer stamped ahead of our clock, one refused as too far ahead."""
    rep = sync.replica
    for i in range(0, 3000, 7):
        rep.write(b"r/%05d" % i, b"old", WALL - 5000)
    rep.write(b"fenced", b"f", WALL - 5000, epoch=5)
    rep.merge([Record(b"r/00001", b"peer", hlc.pack(WALL + 2000), B)], WALL)
    rep.merge([Record(b"ahead", b"far", hlc.pack(WALL + 600_000), B)], WALL)


def batch() -> list[tuple[bytes, bytes | None, int]]:
    out: list[tuple[bytes, bytes | None, int]] = [
        (b"r/%05d" % i, b"v%05d" % i * 80, 0) for i in range(3000)
    ]
    out += [(b"r/00014", None, 0), (b"fenced", b"unfenced", 0), (b"fenced", b"under 5", 5),
            (b"ahead", b"mine", 0)]  # fmt: skip
    return out


def test_a_batch_is_stamped_refused_and_stored_as_the_same_writes_one_by_one(tmp_path):
    """The same writes, batched on one replica and made one by one on its
    twin: the same records (value, stamp, writer, epoch), the same refusals
    (an unfenced write to a fenced key, a key with a version refused as too
    far ahead), the same Merkle tree; and after a reopen the tree rebuilt
    from the disk is the one the batch kept up incrementally."""
    engine, batched = core(tmp_path / "a")
    twin_engine, twin = core(tmp_path / "twin")
    for sync in (batched, twin):
        seed(sync)
    written, refused = batched.write_many(batch(), 0.0)
    one_by_one, twin_refused = [], 0
    for key, value, epoch in batch():
        try:
            one_by_one.append(twin.write(key, value, 0.0, epoch))
        except Exception:
            twin_refused += 1
    assert written == one_by_one and refused == twin_refused == 2
    assert batched.replica.counters.fence_refused == 1
    assert batched.replica.counters.writes_refused_ahead == 1
    assert [r.hlc for r in written] == sorted({r.hlc for r in written})  # each its own stamp
    assert written[1].key == b"r/00001" and written[1].hlc > hlc.pack(WALL + 2000)  # wins
    assert batched.replica.get(b"fenced") == Record(b"fenced", b"under 5", written[-1].hlc, A, 5)
    assert batched.replica.tree.levels == twin.replica.tree.levels
    engine.sync()
    root = batched.replica.tree.node(0, 0)
    engine.close()
    twin_engine.close()
    engine = Engine(tmp_path / "a", SyncConfig().tree_depth)
    reopened = Replica(engine.records, A, 60_000, 86_400_000)
    assert reopened.tree.node(0, 0) == root
    assert reopened.get(b"r/02999") == written[2999]
    assert reopened.get(b"r/00014") == Record(b"r/00014", None, written[3000].hlc, A)
    engine.close()


def test_a_batch_goes_to_every_peer_in_a_few_streams_and_leaves_them_equal(tmp_path):
    """3,000 records of 480 bytes go to each of two peers as streams
    of about a MiB (not 3,000 datagrams); the peer that merges them holds
    exactly the writer's records and tree. A write after the batch wins
    over the batch's version of its key, one stamped before it loses."""
    engine, writer = core(tmp_path / "a")
    peer_engine, peer = core(tmp_path / "b", B)
    writer.drain()
    written, refused = writer.write_many(batch()[:3001], 0.0)
    assert refused == 0 and len(written) == 3001
    sends = writer.drain().send
    assert {s.to for s in sends} == set(PEERS)
    assert all(s.channel is Channel.STREAM for s in sends)
    to_b = [s for s in sends if s.to == ("b", 1)]
    assert 1 < len(to_b) <= 3
    pushed = [r for s in to_b for m in s.messages for r in m.records]
    assert pushed == written
    for send in to_b:
        frame = codec.encode_frame(send.messages, TAG)
        assert len(frame) < 2 * PUSH_BATCH_BYTES
        for msg in codec.decode_datagram(frame[4:], TAG):
            assert isinstance(msg, RecordPush)
            peer.receive(msg, ("a", 1), 0.0)
    assert list(peer.replica.store.all()) == list(writer.replica.store.all())
    assert peer.replica.tree.levels == writer.replica.tree.levels
    before = Record(b"r/00002", b"stamped before", written[0].hlc - 1, B)
    assert peer.replica.merge([before], WALL) == []  # loses to the batch
    after = peer.write(b"r/00003", b"after", 0.0)
    assert after.hlc > written[-1].hlc
    assert writer.replica.merge([after], WALL) == [after]  # wins over it
    engine.close()
    peer_engine.close()


def test_a_batch_is_pushed_to_a_peer_that_did_not_answer_a_session_a_write_skips(tmp_path):
    """A peer that did not answer a session in time (busy merging the last
    batch, say) is skipped by a single write's push for a while, but a
    batch still goes to it: its stream arrives once that peer's loop is free."""
    engine, writer = core(tmp_path / "a")
    writer.drain()
    assert writer.sync_with(("c", 1), 0.0)
    writer.tick(5.0)  # no first answer within a second: ("c", 1) is skipped for a while
    assert writer.counters.sessions_unanswered == 1
    writer.drain()
    writer.write(b"one", b"1", 5.0)
    assert {s.to for s in writer.drain().send if isinstance(s.messages[0], RecordPush)} == {
        ("b", 1)
    }
    writer.write_many([(b"two", b"2", 0), (b"three", b"3", 0)], 5.0)
    assert {s.to for s in writer.drain().send if isinstance(s.messages[0], RecordPush)} == set(
        PEERS
    )
    engine.close()
