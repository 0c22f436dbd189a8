"""A backup file: `shoal snapshot save | inspect | restore` (docs/operations.md, "Backups").

A backup is a tar (as `consul snapshot save` writes) of four files:

    manifest.json   what it is: {"format": 1, "cluster", "lineage", "voters",
                    "voter_ids", "voters_version", "revision", "epoch",
                    "meta_keys", "kv_records", "meta_bytes", "source_node",
                    "taken_at" (UTC), "shoal_version"}
    meta.snap       the metadata log's state at `revision`: msgpack of
                    [index, epoch, state, sha256(state)], the state as
                    metalog/snapshot.py encodes it (opaque here)
    kv.msgpack      the replicated key-value records this agent held, live
                    ones only (no tombstones, no ephemeral keys: their
                    sessions do not outlive the cluster), as storage/ keeps
                    them: [key, value, hlc, writer, epoch] in key order
    SHA256SUMS      `sha256sum`'s lines over the three others (so
                    `tar xf F && sha256sum -c SHA256SUMS` checks one by hand)

`read_backup` checks everything before anything is used: a file that is
not a tar or is cut short, a part missing, a sum that does not match, a
newer format, a state whose own digest does not match or that does not
decode: each is one `BackupError` line (the CLI's exit 2, the API's 400),
and nothing was changed. The bytes of the metadata state are never parsed
here: `snapshot.from_wire` checks them (so a state of a later encoding, the
lead's sessions, lands in a backup unchanged).
"""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from typing import Any

import msgspec

from shoal.kernel.errors import ShoalError
from shoal.metalog import snapshot as snap
from shoal.metalog.snapshot import Snapshot
from shoal.storage.records import MAX_KEY_BYTES, MAX_VALUE_BYTES, NODE_ID_BYTES, Record

FORMAT_VERSION = 1  # what this build writes and the highest it reads
MANIFEST, META, KV, SUMS = "manifest.json", "meta.snap", "kv.msgpack", "SHA256SUMS"
PARTS = (MANIFEST, META, KV)


class BackupError(ShoalError):
    """A backup file refused: damaged, cut short, foreign or of a newer format."""

    exit_code = 2


class Backup(msgspec.Struct, frozen=True):
    """A checked backup: its manifest, the metadata snapshot, the kv records."""

    manifest: dict[str, Any]
    snapshot: Snapshot
    records: tuple[Record, ...]


def build_backup(manifest: dict[str, Any], snapshot: Snapshot, records: list[Record]) -> bytes:
    """The tar of a backup (module docstring); `manifest` gets the format
    and the counts. Deterministic: the same inputs give the same bytes."""
    manifest = {**manifest, "format": FORMAT_VERSION, "revision": snapshot.index,
                "epoch": snapshot.epoch, "kv_records": len(records),
                "meta_bytes": len(snapshot.data)}  # fmt: skip
    parts = {
        MANIFEST: json.dumps(manifest, indent=2, sort_keys=True).encode() + b"\n",
        META: msgspec.msgpack.encode(snap.to_wire(snapshot)),
        KV: msgspec.msgpack.encode([[r.key, r.value, r.hlc, r.writer, r.epoch] for r in records]),
    }
    parts[SUMS] = _sums(parts)
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for name in (*PARTS, SUMS):
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(parts[name]), 0o600, 0
            tar.addfile(info, io.BytesIO(parts[name]))
    return out.getvalue()


def read_backup(data: bytes, source: str = "backup") -> Backup:
    """The backup in `data`, every part checked (module docstring).

    Raises:
        BackupError: one line naming `source` and what is wrong.
    """
    parts = _parts(data, source)
    manifest = _manifest(parts[MANIFEST], source)
    _check_sums(parts, source)
    try:
        snapshot = snap.from_wire(msgspec.msgpack.decode(parts[META]))
    except (ValueError, msgspec.DecodeError) as exc:
        raise BackupError(f"{source}: its metadata state is damaged ({exc})") from None
    if snapshot.index != manifest.get("revision"):
        raise BackupError(f"{source}: its metadata state is at revision {snapshot.index}, "
                          f"its manifest says {manifest.get('revision')}")  # fmt: skip
    records = _records(parts[KV], source)
    if len(records) != manifest.get("kv_records"):
        raise BackupError(f"{source}: it holds {len(records)} kv records, its manifest "
                          f"says {manifest.get('kv_records')}")  # fmt: skip
    return Backup(manifest, snapshot, records)


def _parts(data: bytes, source: str) -> dict[str, bytes]:
    """The tar's files by name, each read whole."""
    parts: dict[str, bytes] = {}
    gaps: list[tuple[int, int]] = []  # what must be zeros: each file's padding, the end
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as tar:
            for member in tar:
                if member.name in parts or not member.isfile():
                    raise BackupError(f"{source}: not a shoal backup (unexpected {member.name!r})")
                body = tar.extractfile(member)
                assert body is not None
                parts[member.name] = body.read()
                if len(parts[member.name]) != member.size:
                    raise BackupError(f"{source}: truncated ({member.name} is cut short)")
                gaps.append((member.offset_data + member.size, tar.offset))
                _check_header(data[member.offset : member.offset + tarfile.BLOCKSIZE], source)
            end = tar.offset  # past the last file: the end marker and padding follow
    except (tarfile.TarError, EOFError, OSError) as exc:
        raise BackupError(f"{source}: not a shoal backup, or truncated ({exc})") from None
    if len(data) != _padded(end):
        raise BackupError(f"{source}: truncated or extended ({len(data)} bytes, its tar "
                          f"says {_padded(end)})")  # fmt: skip
    if any(data.count(0, start, stop) != stop - start for start, stop in [*gaps, (end, len(data))]):
        raise BackupError(f"{source}: damaged (a byte outside its files is not zero)")
    missing = [n for n in (*PARTS, SUMS) if n not in parts]
    if missing:
        raise BackupError(f"{source}: not a shoal backup, or truncated "
                          f"(no {', '.join(missing)})")  # fmt: skip
    return parts


def _check_header(block: bytes, source: str) -> None:
    """A file's header checksum as `build_backup` writes it (tarfile reads
    the field leniently: a flipped space or NUL in it would pass)."""
    chksum = sum(block[:148]) + 8 * 0x20 + sum(block[156:])  # the field counted as spaces
    if block[148:156] != b"%06o\0 " % chksum:
        raise BackupError(f"{source}: damaged (a file header's checksum)")


def _padded(end: int) -> int:
    """The length of a tar as `build_backup` writes it whose last file ends
    at `end`: two zero blocks, then zeros up to a whole record."""
    record = tarfile.RECORDSIZE
    return (end + 2 * tarfile.BLOCKSIZE + record - 1) // record * record


def _manifest(raw: bytes, source: str) -> dict[str, Any]:
    """The manifest; a newer format is refused before its sums are read
    (a later build may lay its parts out otherwise)."""
    try:
        manifest = json.loads(raw)
    except ValueError:
        manifest = None
    number = manifest.get("format") if isinstance(manifest, dict) else None
    if not isinstance(number, int) or isinstance(number, bool) or number < 1:
        raise BackupError(f"{source}: its manifest is damaged (no format number)")
    assert isinstance(manifest, dict)
    if number > FORMAT_VERSION:
        by = manifest.get("shoal_version")
        raise BackupError(
            f"{source} is backup format {number}"
            + (f", written by shoal {by}" if isinstance(by, str) else "")
            + f"; this build reads format {FORMAT_VERSION}: use a newer shoal"
        )
    return manifest


def _sums(parts: dict[str, bytes]) -> bytes:
    """SHA256SUMS of `parts`: `sha256sum`'s lines, in `PARTS` order."""
    return "".join(f"{hashlib.sha256(parts[n]).hexdigest()}  {n}\n" for n in PARTS).encode()


def _check_sums(parts: dict[str, bytes], source: str) -> None:
    if parts[SUMS] == _sums(parts):
        return
    want = dict(line.split("  ", 1)[::-1] for line in
                parts[SUMS].decode(errors="replace").split("\n") if "  " in line)  # fmt: skip
    for name in PARTS:
        if want.get(name) != hashlib.sha256(parts[name]).hexdigest():
            raise BackupError(f"{source}: checksum mismatch in {name}: the file is damaged")
    raise BackupError(f"{source}: {SUMS} is damaged")


def _records(raw: bytes, source: str) -> tuple[Record, ...]:
    try:
        rows = msgspec.msgpack.decode(raw)
        records = []
        for key, value, hlc, writer, epoch in rows:
            if (type(key) is not bytes or not 0 < len(key) <= MAX_KEY_BYTES
                    or type(value) is not bytes or len(value) > MAX_VALUE_BYTES
                    or type(writer) is not bytes or len(writer) != NODE_ID_BYTES):  # fmt: skip
                raise ValueError("bad record")
            records.append(Record(key, value, int(hlc), writer, int(epoch)))
    except (ValueError, TypeError, msgspec.DecodeError) as exc:
        raise BackupError(f"{source}: its kv records are damaged ({exc})") from None
    return tuple(records)


def describe(manifest: dict[str, Any]) -> list[str]:
    """The manifest as `shoal snapshot inspect` prints it: `name  value` lines."""
    order = ("format", "cluster", "lineage", "revision", "epoch", "meta_keys", "meta_bytes",
             "kv_records", "voters", "voters_version", "source_node", "taken_at",
             "shoal_version")  # fmt: skip
    lines = []
    for name in (*order, *sorted(set(manifest) - set(order) - {"voter_ids"})):
        if name in manifest:
            value = manifest[name]
            text = ", ".join(map(str, value)) if isinstance(value, list) else str(value)
            lines.append(f"{name:<15} {text}")
    return lines
