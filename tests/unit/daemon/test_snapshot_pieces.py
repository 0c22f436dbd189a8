"""Snapshots stored in pieces by their own thread (daemon/disk/snapshots.py),
with a real RocksDB: what the thread staged is named the latest by one
small write, survives a reopen, and older or never-named pieces go; a
missing piece is a clear error; a failure comes back as None."""

from __future__ import annotations

import asyncio

import pytest

from shoal.daemon.disk.datadir import DataDir
from shoal.daemon.disk.snapshots import PIECE_BYTES, SnapshotTaker
from shoal.kernel.errors import DataDirError
from shoal.metalog.snapshot import PersistSnapshot, Snapshot, encode_view, take, view_of
from shoal.metalog.state import MetaPut, MetaState


def _state(n: int, salt: bytes = b"") -> MetaState:
    state = MetaState()
    for i in range(1, n + 1):
        state.apply(i, MetaPut(b"key/%05d" % i, salt + bytes(1024)), "node-a", i)
    return state


def _take_on_thread(data: DataDir, state: MetaState) -> Snapshot | None:
    """One snapshot through the taker's thread, as the agent does it."""

    async def run() -> Snapshot | None:
        loop = asyncio.get_running_loop()
        done: asyncio.Future[Snapshot | None] = loop.create_future()
        taker = SnapshotTaker(loop, data.stage_snapshot, done.set_result)
        taker.take(view_of(state, state.revision, 1))
        got = await asyncio.wait_for(done, 60)
        taker.stop()
        return got

    return asyncio.run(run())


def _pieces(data: DataDir) -> list[bytes]:
    return [name for name, _ in data.engine.local_scan(b"meta/snapdata/")]


def test_a_snapshot_the_thread_staged_is_named_by_one_write_and_survives_a_reopen(tmp_path):
    """2,900 keys of 1 KiB (3 MB: several pieces) staged on the thread; the
    loop's save names it without writing its bytes again; reopened, it is
    loaded whole; the next one's save deletes the older pieces."""
    data = DataDir(tmp_path, 4, "prod")
    state = _state(2900)
    snapshot = _take_on_thread(data, state)
    assert snapshot == encode_view(view_of(state, 2900, 1))
    assert len(_pieces(data)) == -(-len(snapshot.data) // PIECE_BYTES) > 2
    assert data.load_snapshot() is None  # staged, not yet named
    calls = []
    real = data.engine.local_batch
    data.engine.local_batch = lambda *a: calls.append(a) or real(*a)
    data.save_snapshot(PersistSnapshot(snapshot, 0))
    data.engine.local_batch = real
    assert len(calls) == 1  # the name and the deletes, not the bytes again
    data.engine.sync()
    data.close()
    again = DataDir(tmp_path, 4, "prod")
    assert again.load_snapshot() == snapshot
    newer = take(_state(3100, b"x"), 1)
    again.save_snapshot(PersistSnapshot(newer, 0))  # an install: its bytes written here
    assert all(name[14:22] == newer.index.to_bytes(8, "big") for name in _pieces(again))
    assert again.load_snapshot() == newer
    again.close()


def test_pieces_never_named_go_with_the_next_snapshot(tmp_path):
    """The thread staged a snapshot the core then dropped (an install
    overtook it): its pieces are deleted by the next one's write."""
    data = DataDir(tmp_path, 4, "prod")
    dropped = _take_on_thread(data, _state(1500))
    assert dropped is not None and len(_pieces(data)) == -(-len(dropped.data) // PIECE_BYTES)
    installed = take(_state(1800, b"y"), 1)
    data.save_snapshot(PersistSnapshot(installed, 0))
    assert len(_pieces(data)) == -(-len(installed.data) // PIECE_BYTES)
    assert data.load_snapshot() == installed
    assert all(name[14:22] == installed.index.to_bytes(8, "big") for name in _pieces(data))
    data.close()


def test_a_missing_piece_is_a_clear_error(tmp_path):
    data = DataDir(tmp_path, 4, "prod")
    snapshot = take(_state(2500), 1)
    data.save_snapshot(PersistSnapshot(snapshot, 0))
    data.engine.local_batch([], [_pieces(data)[1]])
    with pytest.raises(DataDirError, match="snapshot .* is damaged"):
        data.load_snapshot()
    data.close()


def test_a_snapshot_that_cannot_be_stored_comes_back_as_none(tmp_path):
    """The directory closed under the thread (or a write failed): the core
    is told None (it asks again later), nothing is named."""
    data = DataDir(tmp_path, 4, "prod")
    data.close()
    assert _take_on_thread(data, _state(10)) is None
