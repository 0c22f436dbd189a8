"""Snapshots of the metadata log on real agents: a follower that was down
while many writes happened comes back, catches up by the controller's
snapshot (the entries it lacks are compacted away), and serves the same
values; the controller's own restart resumes from its snapshot."""

from __future__ import annotations

import pytest

from shoal.client import NotApplied
from shoal.client.errors import Compacted
from shoal.daemon.disk.datadir import DataDir
from shoal.storage.config import SyncConfig
from tests.conftest import poll_until
from tests.integration.metaagents import client_of, controller_name, three, writable

# Snapshots every 20 applied entries, 5 kept behind each: 300 writes leave
# a log of at most 25 entries on every agent.
CONFIG = """
[meta]
snapshot_every = 20
keep_entries = 5
"""


def stale(agent, key: str) -> tuple[bytes, int] | None:
    try:
        got = client_of(agent).meta.get(key, stale=True)
    except Exception:
        return None
    return got.value, got.mod_revision


def linearizable(agent, key: str) -> tuple[bytes, int]:
    """A linearizable read, retried while the agent answers 503 not applied
    (just restarted, it may not know the controller for a moment)."""
    got = None

    def served() -> bool:
        nonlocal got
        try:
            got = client_of(agent).meta.get(key)
        except NotApplied:
            return False
        return True

    poll_until(served, 30, interval_s=0.1)
    assert got is not None
    return got.value, got.mod_revision


def test_a_follower_down_during_many_writes_catches_up_by_snapshot(agents, tmp_path):
    """kill -9 of a follower, 300 writes through the others (snapshots and
    compaction meanwhile), a restart: it installs the controller's snapshot
    (160 KB, in chunks) and then serves, from its own state, every key's value and revision as
    the controller commits them; writes after it go on as usual. A watch
    from a compacted revision is a 410 naming the compacted revision."""
    config = tmp_path / "shoal.toml"
    config.write_text(CONFIG)
    started = three(agents, ["--config", str(config)])
    leader = controller_name(started[0])
    follower = next(a for a in started if a.name != leader)
    others = [a for a in started if a is not follower]
    follower.kill()
    written: dict[str, tuple[bytes, int]] = {}
    for i in range(300):
        # 4 KB values: a snapshot of 40 keys is several 64 KiB chunks, each on a stream.
        key, value = f"topics/t{i % 40:02d}", f"partitions={i};".encode() + bytes(4096)
        written[key] = (value, client_of(others[i % 2]).meta.put(key, value).revision)
    assert all(a.metric("shoal_meta_snapshots_taken_total") >= 10 for a in others)
    # A watch from before the compacted entries is told so (410), and one
    # from just after the compacted revision replays what is kept.
    with pytest.raises(Compacted) as gone:
        with client_of(others[0]).meta.watch("topics/", from_revision=1) as watch:
            next(watch)
    assert gone.value.revision >= 200
    with client_of(others[0]).meta.watch("topics/", from_revision=gone.value.revision + 1) as w:
        assert next(w).revision > gone.value.revision
    follower.start()  # its old log: far behind what the controller still holds
    last = max(rev for _, rev in written.values())
    # Its own state is eventually the controller's: every key as last written
    # (the last write, to topics/t19, comes after topics/t00's).
    poll_until(lambda: all(stale(follower, key) == expected for key, expected in written.items())
               and stale(follower, "probe") is not None, 60, interval_s=0.2)  # fmt: skip
    assert follower.metric("shoal_meta_snapshots_installed_total") >= 1
    assert sum(a.metric("shoal_meta_snapshot_chunks_sent_total") for a in others) >= 3
    for key, expected in written.items():
        assert stale(follower, key) == expected, key
    for key, expected in written.items():
        assert linearizable(follower, key) == expected, key
    after = client_of(follower).meta.put("topics/after", "x")
    assert after.revision > last
    poll_until(lambda: all(stale(a, "topics/after") == (b"x", after.revision)
                           for a in started), 30, interval_s=0.2)  # fmt: skip


def test_a_restarted_agent_resumes_from_its_snapshot(agents, tmp_path):
    """Every agent killed and started again after 100 writes: each data
    directory holds a snapshot and a short log, each agent loads them, and
    every value is read back at its revision."""
    config = tmp_path / "shoal.toml"
    config.write_text(CONFIG)
    started = three(agents, ["--config", str(config)])
    written = {}
    for i in range(100):
        key = f"k{i % 7}"
        written[key] = client_of(started[i % 3]).meta.put(key, f"v{i}").revision
    for agent in started:
        agent.kill()
    for agent in started:  # on disk: a snapshot, and no more than 25 entries
        data = DataDir(agent.data_dir, SyncConfig().tree_depth, "shoal")
        try:
            assert data.load_snapshot().index >= 80
            assert 0 < len(data.load_log()) <= 25
        finally:
            data.close()
        agent.start()
    poll_until(lambda: all(writable(a) for a in started), 60, interval_s=0.2)
    for agent in started:
        for key, revision in written.items():
            assert linearizable(agent, key)[1] == revision, (agent.name, key)
