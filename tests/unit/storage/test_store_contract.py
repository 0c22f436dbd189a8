"""MemoryStore (simulator) and RocksStore (agent) keep the same contract."""

import random

import pytest

from shoal.storage import hlc
from shoal.storage.engine import Engine
from shoal.storage.merkle import MerkleTree, leaf_of
from shoal.storage.records import Record, digest
from shoal.storage.store import MemoryStore

DEPTH = 2


@pytest.fixture(params=["memory", "rocksdb"])
def store(request, tmp_path):
    if request.param == "memory":
        yield MemoryStore(DEPTH)
        return
    engine = Engine(tmp_path / "db", DEPTH)
    yield engine.records
    engine.close()


def rec(key: bytes, value: bytes | None = b"v", stamp: int = 1) -> Record:
    return Record(key, value, hlc.pack(stamp), b"\x01" * 16)


def test_get_apply_delete(store):
    assert store.get(b"a") is None
    store.apply([rec(b"a"), rec(b"b", None)], [])
    assert store.get(b"a") == rec(b"a")
    assert store.get(b"b").value is None
    store.apply([rec(b"a", b"new", 2)], [b"b"])
    assert store.get(b"a").value == b"new" and store.get(b"b") is None


def test_scan_is_ordered_prefixed_paged(store):
    store.apply([rec(k) for k in (b"app/2", b"app/1", b"apq", b"ap", b"app/3")], [])
    assert [r.key for r in store.scan(b"app/", b"", 10)] == [b"app/1", b"app/2", b"app/3"]
    assert [r.key for r in store.scan(b"app/", b"app/1", 1)] == [b"app/2"]
    assert [r.key for r in store.scan(b"", b"", 100)][0] == b"ap"


def test_in_leaves_returns_exactly_the_records_of_those_leaves(store):
    rng = random.Random(1)
    keys = [rng.randbytes(6) for _ in range(300)]
    store.apply([rec(k) for k in keys], keys[:50])
    live = set(keys[50:])
    leaves = 16**DEPTH
    got = [r.key for r in store.in_leaves(0, leaves)]
    assert set(got) == live and len(got) == len(live)
    part = {r.key for r in store.in_leaves(16, 48)}
    assert part == {k for k in live if 16 <= leaf_of(k, DEPTH) < 48}
    assert [leaf_of(k, DEPTH) for k in got] == sorted(leaf_of(k, DEPTH) for k in got)


def test_all_lists_every_record(store):
    store.apply([rec(bytes([i])) for i in range(1, 60)], [])
    assert sorted(r.key for r in store.all()) == [bytes([i]) for i in range(1, 60)]


def test_incremental_tree_equals_a_tree_built_from_scratch():
    """O(depth) updates leave the same sums as a full rebuild."""
    rng = random.Random(2)
    tree = MerkleTree(3)
    current: dict[bytes, Record] = {}
    for i in range(2000):
        key = f"k{rng.randrange(300)}".encode()
        new = rec(key, rng.randbytes(4), i)
        old = current.get(key)
        if old is None:
            tree.add(tree.leaf_of(key), digest(new))
        elif rng.random() < 0.1:
            tree.remove(tree.leaf_of(key), digest(old))
            del current[key]
            continue
        else:
            tree.replace(tree.leaf_of(key), digest(old), digest(new))
        current[key] = new
    fresh = MerkleTree(3)
    for r in current.values():
        fresh.add(fresh.leaf_of(r.key), digest(r))
    assert tree.levels == fresh.levels
    assert tree.count == len(current)
