"""The metadata log's snapshot in the data directory (daemon/disk/datadir.py):
a restarted agent finds its latest snapshot and the entries after it, and
the entries behind it are gone from the database."""

from __future__ import annotations

import cbor2
import pytest

from shoal.daemon.disk.datadir import DataDir
from shoal.kernel.errors import DataDirError
from shoal.metalog.log import PersistLog, resume
from shoal.metalog.messages import Entry
from shoal.metalog.snapshot import PersistSnapshot, take
from shoal.metalog.state import MetaPut, MetaState


def _entries(first: int, n: int) -> tuple[Entry, ...]:
    return tuple(Entry(1, i, MetaPut(b"k%d" % (i % 3), b"v%d" % i), "node-a", i)
                 for i in range(first, first + n))  # fmt: skip


def _state_at(entries: tuple[Entry, ...], revision: int) -> MetaState:
    state = MetaState()
    for e in entries[:revision]:
        state.apply(e.index, e.op, e.origin, e.pid)
    return state


def test_a_snapshot_drops_the_entries_behind_it_and_a_restart_resumes_from_it(tmp_path):
    """30 entries, a snapshot at 20 keeping 5 behind it: the database holds
    entries 16-30 and the snapshot; the resumed state at 30 is the state
    that applying all 30 gives."""
    data = DataDir(tmp_path, 4, "prod")
    log = _entries(1, 30)
    data.save_log(PersistLog(1, log))
    snapshot = take(_state_at(log, 20), 1)
    data.save_snapshot(PersistSnapshot(snapshot, 15))
    data.engine.sync()
    data.close()
    again = DataDir(tmp_path, 4, "prod")
    assert [e.index for e in again.load_log()] == list(range(16, 31))
    assert len(again.engine.local_scan(b"meta/log/")) == 15
    assert again.load_snapshot() == snapshot
    resumed, state = resume(again.load_snapshot(), again.load_log())
    assert (resumed.offset, resumed.last_index, state.revision) == (20, 30, 20)
    for e in resumed.entries:
        state.apply(e.index, e.op, e.origin, e.pid)
    assert state.keys == _state_at(log, 30).keys
    again.save_log(PersistLog(31, _entries(31, 1)))  # appends go on after it
    again.close()


def test_an_installed_snapshot_replaces_the_whole_log(tmp_path):
    """A snapshot received from the controller past the log's end: every
    entry is deleted, and the next append follows the snapshot."""
    data = DataDir(tmp_path, 4, "prod")
    data.save_log(PersistLog(1, _entries(1, 10)))
    snapshot = take(_state_at(_entries(1, 40), 40), 1)
    data.save_snapshot(PersistSnapshot(snapshot, 40))
    assert data.load_log() == ()
    data.save_log(PersistLog(41, _entries(41, 3)))
    data.engine.sync()
    data.close()
    again = DataDir(tmp_path, 4, "prod")
    assert [e.index for e in again.load_log()] == [41, 42, 43]
    again.close()


def test_a_damaged_snapshot_is_a_clear_error(tmp_path):
    """A snapshot whose bytes do not match its checksum makes the start fail
    with one line, instead of serving a wrong state."""
    data = DataDir(tmp_path, 4, "prod")
    snapshot = take(_state_at(_entries(1, 5), 5), 1)
    bad = [snapshot.index, snapshot.epoch, snapshot.data[:-1] + b"\x00", snapshot.digest]
    data.engine.local_put(b"meta/snapshot", cbor2.dumps(bad))
    with pytest.raises(DataDirError, match="snapshot .* is damaged"):
        data.load_snapshot()
    data.close()


def test_entries_that_do_not_reach_the_snapshot_are_a_gap(tmp_path):
    """Entries starting after the snapshot's index + 1: refused, not guessed."""
    data = DataDir(tmp_path, 4, "prod")
    data.save_log(PersistLog(1, _entries(1, 10)))
    data.save_snapshot(PersistSnapshot(take(_state_at(_entries(1, 3), 3), 1), 5))
    with pytest.raises(DataDirError, match="has a gap"):
        data.load_log()
    data.close()


def test_the_answer_to_an_installed_snapshot_leaves_only_once_it_is_synced(tmp_path):
    """The agent's persister writes a snapshot unsynced and holds what it
    releases (the follower's acknowledgement) until the group commit's
    fsync has made it durable."""
    import asyncio
    from collections import Counter

    from shoal.daemon.disk.commit import GroupCommit
    from shoal.daemon.disk.persister import Persister
    from shoal.kernel.contract import Persist, Send

    data = DataDir(tmp_path, 4, "prod")
    snapshot = take(_state_at(_entries(1, 12), 12), 1)
    ack = Send(("10.0.0.1", 7946), ("ack",))

    async def run() -> list[Send]:
        commits = GroupCommit(asyncio.get_running_loop(), data.engine.sync)
        sent: list[Send] = []
        persister = Persister(data, commits, sent.append, lambda: True, Counter())
        persister.write([Persist(PersistSnapshot(snapshot, 12), (ack,))])
        assert sent == []  # not yet durable
        await commits.wait()
        await asyncio.sleep(0)
        await commits.close()
        return sent

    assert asyncio.run(run()) == [ack]
    data.close()
    again = DataDir(tmp_path, 4, "prod")
    assert again.load_snapshot() == snapshot
    again.close()
