"""The RocksDB engine and the data directory, on a real disk."""

import asyncio
import os
import signal
import subprocess
import sys
import textwrap

import pytest

from shoal.daemon.disk.commit import GroupCommit
from shoal.daemon.disk.datadir import DataDir
from shoal.kernel.errors import DataDirError
from shoal.storage.store import Replica

WRITER = textwrap.dedent("""
    import sys
    from shoal.storage.engine import Engine
    from shoal.storage.store import Replica
    engine = Engine(__import__("pathlib").Path(sys.argv[1]), 4)
    replica = Replica(engine.records, b"\\x01" * 16, 60_000, 86_400_000)
    i = 0
    while True:
        for _ in range(10):
            replica.write(b"key/%08d" % i, b"value-%d" % i, 1_800_000_000_000 + i)
            i += 1
        engine.sync()
        print(i, flush=True)  # acknowledged: everything below i is durable
""")


def test_acknowledged_writes_survive_kill_9_and_reopen_is_clean(tmp_path):
    """The writer is killed mid-stream; every write it acknowledged is there."""
    db = tmp_path / "db"
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(db)], stdout=subprocess.PIPE,
                            text=True, cwd=os.getcwd())  # fmt: skip
    assert proc.stdout is not None
    acked = 0
    while acked < 3000:
        line = proc.stdout.readline()
        assert line, "writer died"
        acked = int(line)
    proc.send_signal(signal.SIGKILL)
    proc.wait(10)
    proc.stdout.close()
    from shoal.storage.engine import Engine

    engine = Engine(db, 4)
    replica = Replica(engine.records, b"\x02" * 16, 60_000, 86_400_000)
    missing = [i for i in range(acked) if replica.get(b"key/%08d" % i) is None]
    assert missing == []
    assert replica.get(b"key/%08d" % 5).value == b"value-5"
    assert replica.tree.count >= acked
    engine.close()


def test_data_dir_in_use_is_refused_and_identity_is_kept(tmp_path):
    """Two agents can never share one data directory; a restart keeps the id."""
    first = DataDir(tmp_path, 4, "shoal")
    ident = first.load_identity()
    first.save_incarnation(41)
    with pytest.raises(DataDirError, match="in use"):
        DataDir(tmp_path, 4, "shoal")
    first.close()
    again = DataDir(tmp_path, 4, "shoal")
    assert again.load_identity() == type(ident)(ident.node_id, 41)
    again.close()


def test_group_commit_makes_concurrent_writers_share_syncs(tmp_path):
    """32 writers waiting together need far fewer fsyncs than writes, and
    each is durable when its wait returns (the agent's wiring: the thread
    writes the staged records, then fsyncs)."""
    data = DataDir(tmp_path, 4, "shoal")
    engine = data.engine
    replica = Replica(engine.records, b"\x01" * 16, 60_000, 86_400_000)
    synced_upto: list[int] = []

    async def writer(commits: GroupCommit, w: int) -> None:
        for i in range(50):
            replica.write(b"w%d/%d" % (w, i), b"v", 1_800_000_000_000)
            await commits.wait()
            synced_upto.append(i)

    async def main() -> GroupCommit:
        loop = asyncio.get_running_loop()
        commits = GroupCommit(loop, engine.sync)
        await asyncio.gather(*(writer(commits, w) for w in range(32)))
        await commits.close()
        return commits

    commits = asyncio.run(main())
    assert len(synced_upto) == 32 * 50
    assert commits.waits == 1600
    assert commits.syncs < commits.waits / 4, (commits.syncs, commits.waits)
    data.close()
    data = DataDir(tmp_path, 4, "shoal")
    again = Replica(data.engine.records, b"\x01" * 16, 60_000, 86_400_000)
    assert all(again.get(b"w%d/%d" % (w, i)) for w in range(32) for i in range(50))
    data.close()


def test_a_failing_sync_fails_the_waiting_writes():
    calls = []

    def broken() -> None:
        calls.append(1)
        raise OSError(28, "No space left on device")

    async def main() -> None:
        commits = GroupCommit(asyncio.get_running_loop(), broken)
        with pytest.raises(OSError, match="No space"):
            await commits.wait()
        await commits.close()

    asyncio.run(main())
    assert calls == [1]


def test_after_sync_calls_run_in_the_pass_that_learns_the_sync_ended():
    """`after_sync` calls run with the group's future done, before any done
    callback of that future (which waits for the next pass); the hand-over
    hook runs before the thread syncs, and its failure fails the group."""
    order: list[str] = []
    synced: list[int] = []

    async def main() -> None:
        commits = GroupCommit(asyncio.get_running_loop(), lambda: synced.append(1))
        commits.before_hand_over = lambda: order.append("hand-over")
        fut = commits.waiter()
        fut.add_done_callback(lambda f: order.append("done callback"))
        commits.after_sync(fut, lambda f: order.append(f"after sync, done={f.done()}"))
        await asyncio.shield(fut)
        await asyncio.sleep(0)
        assert order == ["hand-over", "after sync, done=True", "done callback"]
        assert synced == [1]

        def broken() -> None:
            raise OSError("disk gone")

        commits.before_hand_over = broken
        failed = commits.waiter()
        commits.after_sync(failed, lambda f: order.append(f"failed: {f.exception()}"))
        with pytest.raises(OSError, match="disk gone"):
            await asyncio.shield(failed)
        assert order[-1] == "failed: disk gone" and synced == [1]
        await commits.close()

    asyncio.run(main())


def test_a_local_write_is_read_back_at_once_and_a_newer_merge_wins_on_disk(tmp_path):
    """A put is readable (get, scan) before its group's sync; a newer version
    merged from a peer meanwhile is what the database holds after the sync
    and after a reopen, not the older local one."""
    from shoal.storage.engine import Engine

    engine = Engine(tmp_path / "db", 4)
    replica = Replica(engine.records, b"\x01" * 16, 60_000, 86_400_000)
    mine = replica.write(b"k", b"local", 1_800_000_000_000)
    replica.write(b"other", b"x", 1_800_000_000_000)
    assert replica.get(b"k") == mine
    assert [r.key for r in engine.records.scan(b"", b"", 10)] == [b"k", b"other"]
    newer = type(mine)(b"k", b"remote", mine.hlc + 1, b"\x02" * 16)
    assert replica.merge([newer], 1_800_000_000_000) == [newer]
    replica.write(b"late", b"y", 1_800_000_000_000)
    engine.sync()
    engine.close()
    engine = Engine(tmp_path / "db", 4)
    again = Replica(engine.records, b"\x01" * 16, 60_000, 86_400_000)
    assert again.get(b"k").value == b"remote"
    assert again.get(b"late").value == b"y"
    assert again.tree.node(0, 0) == replica.tree.node(0, 0)
    engine.close()


def test_a_failing_batch_write_fails_its_group_and_the_next_group_commits():
    """When writing a group's records fails (rocksdict raises a plain
    Exception), its writers get an OSError (their writes are not
    acknowledged) and later writes still commit."""
    failures = [RuntimeError("IO error: No space left on device")]

    def sync() -> None:
        if failures:
            raise failures.pop()

    async def main() -> None:
        commits = GroupCommit(asyncio.get_running_loop(), sync)
        with pytest.raises(OSError, match="No space left"):
            await commits.wait()
        await commits.wait()
        await commits.close()

    asyncio.run(main())
