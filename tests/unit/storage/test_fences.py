"""Fenced and ephemeral records (issue 21): order, refusals, hiding, and
their stored and wire forms."""

import random

import pytest

from shoal.kernel import codec
from shoal.kernel.errors import FenceRefused
from shoal.storage import hlc
from shoal.storage.engine import Engine
from shoal.storage.messages import RecordPush, SyncDigests
from shoal.storage.records import Record, decode_value, encode_value
from shoal.storage.store import OWNER_FAILED, MemoryStore, Replica

WALL = 1_800_000_000_000
A, B, OWNER = b"\xaa" * 16, b"\xbb" * 16, b"\x0e" * 16
TAG = codec.cluster_tag("test")


def replica(node: bytes = A) -> Replica:
    return Replica(MemoryStore(2), node, 500, 86_400_000)


def test_a_write_under_a_higher_epoch_beats_a_later_one_under_a_lower_epoch_everywhere():
    """A deposed controller's late write, stamped an hour later, still loses."""
    new = Record(b"k", b"successor", hlc.pack(WALL), B, epoch=7)
    late = Record(b"k", b"deposed", hlc.pack(WALL + 3_600_000), A, epoch=6)
    for order in ([new, late], [late, new]):
        r = replica(b"\x01" * 16)
        for rec in order:
            r.merge([rec], WALL + 3_600_000)
        assert r.get(b"k") == new
    x, y = replica(b"\x02" * 16), replica(b"\x03" * 16)
    x.merge([new, late], WALL + 3_600_000)
    y.merge([late, new], WALL + 3_600_000)
    assert x.tree.node(0, 0) == y.tree.node(0, 0)


def test_a_local_write_under_a_lower_epoch_or_without_a_fence_is_refused_and_changes_nothing():
    r = replica()
    r.write(b"k", b"v7", WALL, epoch=7)
    for epoch, words in ((6, "under fence 6"), (0, "without a fence")):
        with pytest.raises(FenceRefused, match=words) as err:
            r.write(b"k", b"late", WALL + 10, epoch=epoch)
        assert (err.value.fence, err.value.epoch) == (epoch, 7)
    assert r.get(b"k").value == b"v7" and r.counters.fence_refused == 2
    assert r.write(b"k", b"v8", WALL + 20, epoch=8).epoch == 8
    assert r.write(b"other", b"free", WALL + 30).epoch == 0  # unfenced keys stay unfenced


def test_an_ephemeral_key_is_hidden_once_its_owner_is_gone_and_stays_hidden_after_it_returns():
    r = replica()
    r.changes = []
    rec = Record(b"brokers/1", b"up", hlc.pack(WALL), OWNER, owner=OWNER)
    r.merge([rec], WALL)
    assert r.visible(rec) and [x.key for x in r.owned_by(OWNER)] == [b"brokers/1"]
    hidden = r.owner_gone(OWNER, WALL + 100, OWNER_FAILED)
    assert hidden == [rec] and not r.visible(rec)
    assert r.changes[-1] == (rec, True, OWNER_FAILED)
    r.owner_back(OWNER)
    assert not r.visible(rec)  # written before it was declared gone
    again = Record(b"brokers/1", b"again", hlc.pack(WALL + 200), OWNER, owner=OWNER)
    r.merge([again], WALL + 200)
    assert r.visible(again)  # written again after it came back
    plain = Record(b"plain", b"v", hlc.pack(WALL), OWNER)
    r.merge([plain], WALL)
    r.owner_gone(OWNER, WALL + 300, OWNER_FAILED)
    assert r.visible(plain)  # only ephemeral records belong to their owner


def test_a_tombstone_takes_an_ephemeral_key_out_of_its_owners_index():
    r = replica()
    r.write(b"e", b"v", WALL, owner=A)
    assert r.owned_by(A)
    r.write(b"e", None, WALL + 1)
    assert r.owned_by(A) == []


@pytest.mark.parametrize("rec", [
    Record(b"k", b"v", 5, A),
    Record(b"k", b"v", 5, A, epoch=2**40),
    Record(b"k", b"v", 5, A, owner=OWNER),
    Record(b"k", None, 5, A, epoch=3, owner=OWNER),
    Record(b"k", b"", 5, A, epoch=1),
])  # fmt: skip
def test_stored_and_wire_forms_keep_epoch_and_owner(rec, tmp_path):
    assert decode_value(rec.key, encode_value(rec)) == rec
    frame = codec.encode_frame([RecordPush((rec,))], TAG)
    (msg,) = codec.decode_datagram(frame[4:], TAG)
    assert msg == RecordPush((rec,))
    engine = Engine(tmp_path / "db", 2)
    engine.records.apply([rec], [])
    assert engine.records.get(rec.key) == rec


def test_a_plain_record_costs_the_bytes_it_did_before_fences():
    """Old and new agents exchange unfenced records alike."""
    rec = Record(b"k", b"v", 5, A)
    assert encode_value(rec) == encode_value(Record(b"k", b"v", 5, A, 0, b""))
    assert len(encode_value(rec)) == 8 + 1 + 16 + 1


def test_digests_compare_epochs_first():
    msg = SyncDigests(1, ((0, 0),), ((b"k", 5, A, 0), (b"j", 9, B, 4)))
    frame = codec.encode_frame([msg], TAG)
    (back,) = codec.decode_datagram(frame[4:], TAG)
    assert back == msg


def test_random_fenced_writes_settle_the_same_on_every_replica():
    rnd = random.Random(7)
    recs = [Record(b"k%d" % rnd.randrange(3), b"%d" % i, hlc.pack(WALL + rnd.randrange(1000)),
                   bytes([rnd.randrange(1, 4)]) * 16, epoch=rnd.randrange(4))
            for i in range(200)]  # fmt: skip
    roots = set()
    for _ in range(5):
        r = replica(b"\x09" * 16)
        shuffled = recs[:]
        rnd.shuffle(shuffled)
        r.merge(shuffled, WALL + 1000)
        roots.add(r.tree.node(0, 0))
    assert len(roots) == 1
