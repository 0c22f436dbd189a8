"""Backups and restores on real agents: `shoal snapshot save | inspect | restore`
as an operator runs them (docs/operations.md, "Backups" and "Restoring").

- A backup saved from a follower under a steady write load holds every
  acknowledged write up to its revision and none after; seeded offline
  into a new data directory it starts a new cluster that two empty agents
  join, serving those keys key for key, and the kv records.
- Restored into the running cluster: a watcher is told (410: list again)
  and the listing is the backup's; the kv records merged or replaced.
- Refused, each with one line and exit 2, changing nothing: a flipped byte,
  a cut file, another cluster's, a newer format (into the running cluster:
  its metadata and kv listings hashed before and after, as its data
  directories change by themselves while it runs: leases, incarnations);
  an offline restore into a non-empty directory (its files hashed).
"""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
import threading
from pathlib import Path
from typing import Any

import pytest

from shoal.client import NotApplied
from shoal.client.errors import Compacted
from shoal.daemon.backup import build_backup
from shoal.metalog import snapshot as snap
from shoal.metalog.state import MetaPut, MetaState
from tests.conftest import poll_until
from tests.integration.agents import AgentProcess, api_request
from tests.integration.metaagents import META, client_of, shoal_cli, three, writable


def api(agent: AgentProcess) -> str:
    return f"{agent.ip}:7947"


class Writer:
    """Sequential puts of new keys through the agents in turn until stopped:
    the acknowledged ones (200) with their revisions."""

    def __init__(self, members: list[AgentProcess]) -> None:
        self.members = members
        self.acked: dict[str, tuple[str, int]] = {}  # key -> (value, revision)
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        i = 0
        while not self.stopped.is_set():
            agent = self.members[i % len(self.members)]
            key, value = f"load/{i:06}", f"v{i}"
            try:
                status, body = api_request(agent, "PUT", f"/v1/meta/{key}", value.encode(), 5.0)
            except OSError:
                status, body = 0, None
            if status == 200:
                self.acked[key] = (value, body["revision"])
            i += 1

    def stop(self) -> None:
        self.stopped.set()
        self.thread.join(30)


def listing(agent: AgentProcess, prefix: str) -> dict[str, tuple[bytes, int]]:
    """The keys under `prefix` (read through the controller), retried while
    not served: key -> (value, mod revision)."""
    got: Any = None

    def served() -> bool:
        nonlocal got
        try:
            got = client_of(agent).meta.list(prefix)
        except NotApplied:
            return False
        return True

    poll_until(served, 60, interval_s=0.2)
    return {item.key: (item.value, item.mod_revision) for item in got.items}


def kv_of(agent: AgentProcess) -> dict[str, str]:
    status, body = api_request(agent, "GET", "/v1/kv/?prefix=")
    assert status == 200
    return {item["key"]: item["value"] for item in body["items"]}


def rewrap(data: bytes, **manifest: Any) -> bytes:
    """The backup `data` with its manifest changed and its sums made to
    match: what a file of another cluster or a newer build looks like."""
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        files = {m.name: tar.extractfile(m).read() for m in tar}  # type: ignore[union-attr]
    files["manifest.json"] = json.dumps({**json.loads(files["manifest.json"]),
                                         **manifest}).encode()  # fmt: skip
    files["SHA256SUMS"] = "".join(
        f"{hashlib.sha256(files[n]).hexdigest()}  {n}\n"
        for n in ("manifest.json", "meta.snap", "kv.msgpack")
    ).encode()
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for name in ("manifest.json", "meta.snap", "kv.msgpack", "SHA256SUMS"):
            info = tarfile.TarInfo(name)
            info.size = len(files[name])
            tar.addfile(info, io.BytesIO(files[name]))
    return out.getvalue()


def tree_digest(root: Path) -> str:
    """sha256 over every file's path and bytes under `root`."""
    h = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        h.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes())
    return h.hexdigest()


def test_a_backup_under_load_seeds_a_new_cluster_with_every_acknowledged_write(agents, tmp_path):
    started = three(agents)
    for i in range(20):
        assert api_request(started[0], "PUT", f"/v1/kv/cfg/{i}", f"c{i}".encode())[0] == 200
    writer = Writer(started)
    poll_until(lambda: len(writer.acked) > 100, 60)
    follower = started[1]
    file = tmp_path / "backup.tar"
    saved = shoal_cli("snapshot", "save", str(file), "--api", api(follower))
    assert saved.returncode == 0, saved.stderr
    acked_at_save = len(writer.acked)
    poll_until(lambda: len(writer.acked) > acked_at_save + 50, 60)  # writes after it
    writer.stop()
    inspected = shoal_cli("snapshot", "inspect", str(file))
    assert inspected.returncode == 0, inspected.stderr
    manifest = dict(line.split(None, 1) for line in inspected.stdout.decode().splitlines())
    revision = int(manifest["revision"])
    assert manifest["checksums"].startswith("ok")
    assert int(manifest["kv_records"]) == 20
    before = {k: v for k, (v, rev) in writer.acked.items() if rev <= revision}
    after = {k for k, (_, rev) in writer.acked.items() if rev > revision}
    assert len(before) > 100 and after
    for agent in started:
        agent.kill()

    seeded = AgentProcess("restored-0", tmp_path, [], META)
    out = shoal_cli("snapshot", "restore", str(file), "--offline", "--data-dir",
                    str(seeded.data_dir), "--node-name", seeded.name)  # fmt: skip
    assert out.returncode == 0, out.stderr
    agents.agents.append(seeded.start())
    poll_until(lambda: writable(seeded, "seeded"), 60, interval_s=0.2)
    for name in ("restored-1", "restored-2"):
        agents.add(name, join=[seeded.gossip], extra=META)
    new = agents.agents[-3:]
    agents.wait_all_see([a.name for a in new], "alive", new)

    def voters() -> bool:
        members = seeded.api.get("/v1/members")["members"]
        return sum(1 for m in members if m.get("voter") == "voter") == 3

    poll_until(voters, 90, interval_s=0.5)
    for agent in new:
        keys = listing(agent, "load/")
        assert {k: v.decode() for k, (v, _) in keys.items()} == before  # key for key
        assert not after & set(keys)
    poll_until(lambda: len(kv_of(new[2])) >= 20, 30)
    assert {k: v for k, v in kv_of(new[2]).items() if k.startswith("cfg/")} == {
        f"cfg/{i}": f"c{i}" for i in range(20)
    }


def test_a_restore_into_the_running_cluster_tells_watchers_and_replaces_the_state(agents, tmp_path):
    started = three(agents)
    meta = client_of(started[0]).meta
    for i in range(5):
        meta.put(f"a/{i}", f"good {i}")
    for key in ("k1", "k2"):
        assert api_request(started[0], "PUT", f"/v1/kv/{key}", b"kept")[0] == 200
    epoch = client_of(started[0]).controller().epoch
    assert api_request(started[0], "PUT", f"/v1/kv/f?fence={epoch}", b"fenced")[0] == 200
    file = tmp_path / "good.tar"
    assert shoal_cli("snapshot", "save", str(file), "--api", api(started[2])).returncode == 0
    meta.delete("a/1")  # the mistakes
    meta.put("a/2", "bad")
    meta.put("a/9", "new")
    api_request(started[0], "DELETE", "/v1/kv/k1")
    api_request(started[0], "PUT", "/v1/kv/k3", b"added later")
    api_request(started[0], "PUT", f"/v1/kv/f?fence={epoch}", b"fenced, wrong")

    watched = started[1]
    seen = meta.put("a/3", "seen by the watch").revision
    watch = client_of(watched, timeout=5.0).meta.watch("a/", from_revision=seen)
    assert next(iter(watch)).key == "a/3"
    out = shoal_cli("snapshot", "restore", str(file), "--kv", "replace", "--api", api(watched))
    assert out.returncode == 0, out.stderr
    assert "Restored" in out.stdout.decode()
    with pytest.raises(Compacted):  # the watcher is told: list again
        for _ in range(100):
            next(iter(watch))
    watch.close()
    keys = listing(watched, "a/")
    assert {k: v for k, (v, _) in keys.items()} == {f"a/{i}": f"good {i}".encode()
                                                    for i in range(5)}  # fmt: skip
    assert len({rev for _, rev in keys.values()}) == 1  # one revision: the restore's
    restored_at = next(iter(keys.values()))[1]
    with client_of(started[0]).meta.watch("a/", from_revision=restored_at + 1) as after:
        meta.put("a/7", "after")  # the watch from the listing on follows as usual
        assert next(iter(after)).key == "a/7"

    def kv_restored() -> bool:
        want = {"k1": "kept", "k2": "kept", "f": "fenced"}  # a fenced key too
        return all(kv_of(a) == want for a in started)

    poll_until(kv_restored, 30, interval_s=0.2)


def test_damaged_truncated_foreign_and_newer_backups_are_refused_changing_nothing(agents, tmp_path):
    started = three(agents, ["--cluster", "prod"])
    client_of(started[0]).meta.put("x/1", "one")
    api_request(started[0], "PUT", "/v1/kv/y", b"why")
    good = tmp_path / "good.tar"
    assert shoal_cli("snapshot", "save", str(good), "--api", api(started[0])).returncode == 0
    data = good.read_bytes()
    flipped = bytearray(data)
    flipped[len(data) // 3] ^= 0x01
    bad = {
        "flipped": bytes(flipped),
        "truncated": data[: len(data) - 700],
        "foreign": rewrap(data, cluster="staging"),
        "newer": rewrap(data, format=2, shoal_version="9.0.0"),
    }
    why = {"flipped": "damaged|checksum mismatch", "truncated": "truncated",
           "foreign": "cluster 'staging'", "newer": "backup format 2"}  # fmt: skip

    def state() -> str:
        meta = {k: v for k, v in listing(started[1], "").items()}
        return hashlib.sha256(repr((sorted(meta.items()), sorted(kv_of(started[1]).items())))
                              .encode()).hexdigest()  # fmt: skip

    before = state()
    for name, content in bad.items():
        path = tmp_path / f"{name}.tar"
        path.write_bytes(content)
        inspect = shoal_cli("snapshot", "inspect", str(path))
        restore = shoal_cli("snapshot", "restore", str(path), "--api", api(started[1]))
        # Sent as they are (the CLI refuses them before sending): the agent refuses too.
        status, body = api_request(started[1], "POST", "/v1/snapshot/restore", content, 30.0)
        if name == "foreign":
            assert inspect.returncode == 0  # a sound file, of another cluster
            assert status == 409
        else:
            assert inspect.returncode == 2
            assert len(inspect.stderr.decode().strip().splitlines()) == 1
            assert status == 400
        assert restore.returncode == 2, (name, restore.stderr)
        assert len(restore.stderr.decode().strip().splitlines()) == 1
        assert any(w in restore.stderr.decode() for w in why[name].split("|")), restore.stderr
        assert "error" in body
    assert state() == before

    target = tmp_path / "occupied"
    target.mkdir()
    (target / "keep.txt").write_text("an operator's file")
    digest = tree_digest(target)
    out = shoal_cli("snapshot", "restore", str(good), "--offline", "--data-dir", str(target),
                    "--node-name", "n1")  # fmt: skip
    assert out.returncode == 2 and "is not empty" in out.stderr.decode()
    assert tree_digest(target) == digest
    empty = tmp_path / "empty"
    for name in bad:
        if name == "foreign":
            continue  # offline, another cluster's backup seeds a new cluster: its purpose
        path = tmp_path / f"{name}.tar"
        out = shoal_cli("snapshot", "restore", str(path), "--offline", "--data-dir", str(empty),
                        "--node-name", "n1")  # fmt: skip
        assert out.returncode == 2, (name, out.stderr)
        assert not empty.exists()  # nothing made


def backup_of(keys: int, value_bytes: int, cluster: str = "shoal") -> bytes:
    """A backup made here of a state of `keys` keys (a state as large as
    a test cannot load through the log in seconds)."""
    state = MetaState()
    value = b"v" * value_bytes
    for i in range(keys):
        state.apply(i + 1, MetaPut(f"big/{i:06}".encode(), value))
    return build_backup({"cluster": cluster, "meta_keys": keys}, snap.take(state, 1), [])


def test_a_large_state_is_restored_online_and_one_over_the_cap_is_refused(agents, tmp_path):
    """12 MB of state (over the 8 MiB the API takes in other bodies) goes
    through the log as one entry to every agent; 50 MB (over the 48 MiB an
    online restore carries) is refused with 413, pointing at the offline
    restore, and changes nothing. The agents' answer timeout is 0.1 s, which
    such an entry outlasts: the outcome, unknown to the log, is settled by
    the agent reading its state back."""
    config = tmp_path / "shoal.toml"
    config.write_text("[meta]\nanswer_timeout_s = 0.1\n")
    started = three(agents, ["--config", str(config)])
    poll_until(lambda: writable(started[0], "small/1"), 30, interval_s=0.1)
    file = tmp_path / "large.tar"
    file.write_bytes(backup_of(12_000, 1000))
    out = shoal_cli("snapshot", "restore", str(file), "--api", api(started[1]))
    assert out.returncode == 0, out.stderr
    assert "restore settled by reading it back" in started[1].log()
    for agent in started:
        keys = listing(agent, "")
        assert len(keys) == 12_000 and "small/1" not in keys
        assert keys["big/011999"][0] == b"v" * 1000
    revision = client_of(started[0]).meta.list("").revision
    huge = tmp_path / "huge.tar"
    huge.write_bytes(backup_of(50_000, 1000))
    out = shoal_cli("snapshot", "restore", str(huge), "--api", api(started[1]))
    assert out.returncode == 2 and "--offline" in out.stderr.decode(), out.stderr
    assert "over the" in out.stderr.decode()
    assert client_of(started[0]).meta.list("").revision == revision  # no entry
