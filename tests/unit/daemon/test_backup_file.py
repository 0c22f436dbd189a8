"""The backup file (daemon/backup.py): what it holds, and every damage refused.

Also the offline seed (daemon/disk/seed.py) on a real RocksDB directory, and
the metadata state's replacement through the log (metalog/restore.py)."""

from __future__ import annotations

import hashlib
import io
import json
import random
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from shoal.daemon.api.access import ApiAccess
from shoal.daemon.backup import (
    FORMAT_VERSION,
    KV,
    MANIFEST,
    META,
    SUMS,
    BackupError,
    build_backup,
    describe,
    read_backup,
)
from shoal.daemon.disk.datadir import DataDir
from shoal.daemon.disk.seed import seed_data_dir
from shoal.metalog import snapshot as snap
from shoal.metalog.messages import Entry, entry_from_wire, entry_to_wire
from shoal.metalog.restore import MAX_RESTORE_BYTES
from shoal.metalog.state import (
    Applied,
    Conflict,
    MetaPut,
    MetaRestore,
    MetaState,
    SessionEnd,
    SessionOpen,
)
from shoal.storage.records import Record

WRITER = bytes(range(16))


def _state(n: int = 50) -> MetaState:
    state = MetaState()
    for i in range(n):
        state.apply(i + 1, MetaPut(f"k{i:03}".encode(), f"v{i}".encode()), "origin", i)
    return state


def _records(n: int = 20) -> list[Record]:
    return [Record(f"kv{i:03}".encode(), f"value {i}".encode(), 1000 + i, WRITER, i % 3)
            for i in range(n)]  # fmt: skip


def _backup(cluster: str = "prod") -> bytes:
    state = _state()
    return build_backup({"cluster": cluster, "meta_keys": len(state.keys)}, snap.take(state, 7),
                        _records())  # fmt: skip


def test_a_backup_holds_the_state_the_records_and_its_manifest() -> None:
    data = _backup()
    backup = read_backup(data)
    m = backup.manifest
    assert (m["format"], m["cluster"], m["revision"], m["epoch"]) == (FORMAT_VERSION, "prod", 50, 7)
    assert (m["meta_keys"], m["kv_records"]) == (50, 20)
    assert snap.restore(backup.snapshot).keys == _state().keys
    assert list(backup.records) == _records()
    assert build_backup(m, backup.snapshot, list(backup.records)) == data  # deterministic
    assert any(line.startswith("revision") and line.endswith("50") for line in describe(m))


def test_its_sums_are_what_sha256sum_checks() -> None:
    with tarfile.open(fileobj=io.BytesIO(_backup())) as tar:
        files = {m.name: tar.extractfile(m).read() for m in tar}  # type: ignore[union-attr]
    assert sorted(files) == sorted([MANIFEST, META, KV, SUMS])
    for line in files[SUMS].decode().splitlines():
        digest, name = line.split("  ")
        assert hashlib.sha256(files[name]).hexdigest() == digest


def test_every_flipped_byte_is_refused() -> None:
    data = _backup()
    rng = random.Random(5)
    for at in range(len(data)):
        damaged = bytearray(data)
        damaged[at] ^= rng.choice((0x01, 0x10, 0x80, 0xFF))
        with pytest.raises(BackupError):
            read_backup(bytes(damaged))


def test_a_truncated_or_extended_file_is_refused() -> None:
    data = _backup()
    for length in (0, 100, 512, 1500, len(data) // 2, len(data) - 512, len(data) - 1):
        with pytest.raises(BackupError, match="truncated|not a shoal backup"):
            read_backup(data[:length])
    with pytest.raises(BackupError):
        read_backup(data + bytes(512))
    with pytest.raises(BackupError, match="not a shoal backup"):
        read_backup(b"not a tar at all" * 100)


def _rebuilt(manifest_change: dict[str, object]) -> bytes:
    """A backup whose manifest was changed, its sums made to match."""
    with tarfile.open(fileobj=io.BytesIO(_backup())) as tar:
        files = {m.name: tar.extractfile(m).read() for m in tar}  # type: ignore[union-attr]
    manifest = {**json.loads(files[MANIFEST]), **manifest_change}
    files[MANIFEST] = json.dumps(manifest).encode()
    files[SUMS] = "".join(f"{hashlib.sha256(files[n]).hexdigest()}  {n}\n"
                          for n in (MANIFEST, META, KV)).encode()  # fmt: skip
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for name in (MANIFEST, META, KV, SUMS):
            info = tarfile.TarInfo(name)
            info.size = len(files[name])
            tar.addfile(info, io.BytesIO(files[name]))
    return out.getvalue()


def test_a_newer_format_is_refused_naming_it() -> None:
    with pytest.raises(BackupError, match="backup format 2, written by shoal 9.9.*newer shoal"):
        read_backup(_rebuilt({"format": 2, "shoal_version": "9.9"}))
    read_backup(_rebuilt({"source_node": "elsewhere"}))  # the same, resummed: accepted


def test_a_manifest_at_odds_with_its_state_is_refused() -> None:
    with pytest.raises(BackupError, match="revision 50, its manifest says 49"):
        read_backup(_rebuilt({"revision": 49}))
    with pytest.raises(BackupError, match="20 kv records, its manifest says 21"):
        read_backup(_rebuilt({"kv_records": 21}))


def test_the_offline_seed_writes_a_one_voter_data_directory(tmp_path: Path) -> None:
    backup = read_backup(_backup())
    target = tmp_path / "new"
    seeded = seed_data_dir(backup, target, "n1", "prod")
    data_dir = DataDir(target, 4, "prod")
    try:
        epoch, voters = data_dir.load_election()
        node_id = data_dir.load_identity().node_id
        assert (epoch, voters.voters, voters.ids) == (7, ("n1",), (node_id,))
        assert voters.lineage.hex() == seeded.lineage
        assert snap.restore(data_dir.load_snapshot()).keys == _state().keys
        assert data_dir.load_log() == ()
        assert data_dir.engine.records.scan(b"", b"", 100) == _records()
    finally:
        data_dir.close()
    again = seed_data_dir(backup, tmp_path / "other", "n1", "prod")
    assert (again.lineage, again.node_id) != (seeded.lineage, seeded.node_id)  # new ids


def test_the_offline_seed_refuses_a_non_empty_directory(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(BackupError, match="is not empty"):
        seed_data_dir(read_backup(_backup()), tmp_path, "n1", "prod")
    assert [p.name for p in tmp_path.iterdir()] == ["notes.txt"]


def test_a_restore_entry_replaces_every_key_at_its_revision() -> None:
    backup = snap.take(_state(5), 3)
    live = MetaState()
    live.apply(1, MetaPut(b"k000", b"old"))
    live.apply(2, MetaPut(b"gone", b"x"))
    live.changes = []
    op = MetaRestore(backup.data, backup.digest)
    entry = Entry(4, 10, op)
    assert entry_from_wire(entry_to_wire(entry)) == entry
    assert live.apply(10, op) == Applied(10)
    assert sorted(live.keys) == [f"k{i:03}".encode() for i in range(5)]
    assert live.keys[b"k000"].value == b"v0"
    assert {(k.create_revision, k.mod_revision, k.version) for k in live.keys.values()} == {
        (10, 10, 1)
    }
    assert live.changes is None  # the watches restart (410 for a resume from before)


def test_a_damaged_restore_entry_changes_nothing() -> None:
    backup = snap.take(_state(5), 3)
    live = _state(2)
    before = dict(live.keys)
    damaged = bytes([backup.data[0] ^ 1]) + backup.data[1:]
    assert live.apply(3, MetaRestore(damaged, backup.digest)) == Conflict(0)
    assert live.keys == before
    oversized = MetaRestore(bytes(MAX_RESTORE_BYTES + 1), backup.digest)
    assert live.apply(4, oversized) == Conflict(0)
    assert live.keys == before


def test_a_backup_needs_the_token_even_where_reads_are_open() -> None:
    access = ApiAccess(token="s3cret", open_reads=True)
    assert access.allows("GET", "/v1/meta/x", "")  # an open read
    assert not access.allows("GET", "/v1/snapshot", "")  # every key: not open
    assert access.allows("GET", "/v1/snapshot", "Bearer s3cret")
    assert not access.allows("POST", "/v1/snapshot/restore", "")


def _shoal(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "shoal.daemon.cli", *args], capture_output=True,
                          text=True, timeout=60)  # fmt: skip


def test_the_cli_refuses_a_bad_file_or_usage_with_one_line_and_exit_2(tmp_path: Path) -> None:
    good = tmp_path / "good.tar"
    good.write_bytes(_backup())
    out = _shoal("snapshot", "inspect", str(good))
    assert out.returncode == 0 and "checksums       ok" in out.stdout, out.stderr
    cut = tmp_path / "cut.tar"
    cut.write_bytes(_backup()[:3000])
    for args in (
        ("snapshot", "inspect", str(cut)),
        ("snapshot", "inspect", str(tmp_path / "absent.tar")),
        ("snapshot", "restore", str(good), "--data-dir", str(tmp_path / "d")),  # no --offline
        ("snapshot", "restore", str(good), "--offline"),  # no --data-dir
        ("snapshot", "restore", str(cut), "--offline", "--data-dir", str(tmp_path / "d"),
         "--node-name", "n1"),
    ):  # fmt: skip
        out = _shoal(*args)
        assert out.returncode == 2, (args, out.stderr)
        assert len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert not (tmp_path / "d").exists()
    out = _shoal("snapshot", "save", str(tmp_path / "b.tar"), "--api", "127.0.0.1:9")
    assert out.returncode == 1 and len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert not (tmp_path / "b.tar").exists()


def test_a_restore_keeps_the_open_sessions_and_their_keys() -> None:
    """A live session's key stays as it is (a restore takes no lock from its
    holder); the backup's session-owned keys are not restored."""
    then = MetaState()
    then.apply(1, SessionOpen(b"s" * 16, 10_000))
    then.apply(2, MetaPut(b"lock/old", b"then", session=b"s" * 16))
    then.apply(3, MetaPut(b"plain", b"then"))
    then.apply(4, MetaPut(b"lock/live", b"then"))
    backup = snap.take(then, 1)
    live = MetaState()
    live.apply(1, SessionOpen(b"t" * 16, 10_000))
    live.apply(2, MetaPut(b"lock/live", b"held", session=b"t" * 16))
    live.apply(3, MetaPut(b"other", b"x"))
    held = live.keys[b"lock/live"]
    assert live.apply(9, MetaRestore(backup.data, backup.digest)) == Applied(9)
    assert sorted(live.keys) == [b"lock/live", b"plain"]
    assert live.keys[b"lock/live"] == held
    assert live.owned == {b"t" * 16: {b"lock/live"}}
    assert list(live.sessions) == [b"t" * 16]
    live.apply(10, SessionEnd(b"t" * 16))  # its end still deletes its key
    assert sorted(live.keys) == [b"plain"]
