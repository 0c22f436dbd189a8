"""Anti-entropy wire messages (type tags 40-59) and their codec entries.

A sync session (see storage/antientropy.py) is a few request/answer pairs
on streams; the initiator sends the requests (`SyncTree`, `SyncDigests`),
the responder answers each one without keeping state between them. Writes
are also pushed as they happen (`RecordPush`), in a datagram when they fit.

Importing this module registers the tags with `membership.codec`, whose
decoder validates every field (sizes, ranges, types) before a core sees it.
"""

from __future__ import annotations

from typing import Any, ClassVar

import msgspec

from shoal.kernel import codec
from shoal.kernel.codec import DecodeError, boolean, u64
from shoal.storage.merkle import FANOUT, MAX_DEPTH
from shoal.storage.records import MAX_KEY_BYTES, MAX_VALUE_BYTES, NODE_ID_BYTES, Record

MAX_SYNC_ITEMS = 1_000_000
_MAX_INDEX = FANOUT**MAX_DEPTH


class SyncTree(msgspec.Struct, frozen=True):
    """Initiator -> responder: my sums of the children of `parents` (the
    nodes at `level - 1` that differed), or of the root when `level` is 0.
    Absent children are empty on my side."""

    session: int
    depth: int
    level: int
    parents: tuple[int, ...]
    sums: tuple[tuple[int, int], ...]  # (index, sum)
    expects_reply: ClassVar[bool] = True


class SyncTreeDiff(msgspec.Struct, frozen=True):
    """Responder -> initiator: the nodes at `level` whose sums differ, with
    the responder's record count under each."""

    session: int
    level: int
    differing: tuple[tuple[int, int], ...]  # (index, count)


class SyncDigests(msgspec.Struct, frozen=True):
    """Initiator -> responder: the versions of all my records under
    `ranges` (tree nodes as (level, index))."""

    session: int
    ranges: tuple[tuple[int, int], ...]
    # (key, hlc, writer, epoch); on the wire the epoch is left out when 0
    versions: tuple[tuple[bytes, int, bytes, int], ...]
    expects_reply: ClassVar[bool] = True


class SyncRecords(msgspec.Struct, frozen=True):
    """Records the receiver lacks, and (in the responder's answer) the keys
    it wants back because the initiator's versions are newer."""

    session: int
    records: tuple[Record, ...]
    wants: tuple[bytes, ...]
    more: bool = False  # the sender stopped at its byte budget; sync again


class RecordPush(msgspec.Struct, frozen=True):
    """Fresh writes, pushed to a few members as soon as they are made."""

    records: tuple[Record, ...]


SyncMessage = SyncTree | SyncTreeDiff | SyncDigests | SyncRecords | RecordPush


# -- codec --------------------------------------------------------------------


def _list(v: object, max_items: int = MAX_SYNC_ITEMS) -> list[Any]:
    if type(v) is not list or len(v) > max_items:
        raise DecodeError("shape", "expected a bounded list")
    return v


def _small(v: object, limit: int) -> int:
    if type(v) is not int or not 0 <= v < limit:
        raise DecodeError("shape", "integer out of range")
    return v


def _key(v: object) -> bytes:
    if type(v) is not bytes or not 0 < len(v) <= MAX_KEY_BYTES:
        raise DecodeError("shape", "bad key")
    return v


def _writer(v: object) -> bytes:
    if type(v) is not bytes or len(v) != NODE_ID_BYTES:
        raise DecodeError("shape", "bad writer id")
    return v


def _record(v: object) -> Record:
    # [key, value, hlc, writer] or, fenced or ephemeral, [..., epoch, owner]
    # (owner b"" when not ephemeral): plain records cost what they did.
    if type(v) is not list or len(v) not in (4, 6):
        raise DecodeError("shape", "bad record")
    value = v[1]
    if value is not None and (type(value) is not bytes or len(value) > MAX_VALUE_BYTES):
        raise DecodeError("shape", "bad value")
    if len(v) == 4:
        return Record(_key(v[0]), value, u64(v[2]), _writer(v[3]))
    owner = v[5]
    if owner != b"":
        owner = _writer(owner)
    return Record(_key(v[0]), value, u64(v[2]), _writer(v[3]), u64(v[4]), owner)


def _pair(v: object, first: int, second: int) -> tuple[int, int]:
    if type(v) is not list or len(v) != 2:
        raise DecodeError("shape", "expected a pair")
    return (_small(v[0], first), _small(v[1], second))


def _version(v: object) -> tuple[bytes, int, bytes, int]:
    if type(v) is not list or len(v) not in (3, 4):
        raise DecodeError("shape", "bad version")
    return (_key(v[0]), u64(v[1]), _writer(v[2]), u64(v[3]) if len(v) == 4 else 0)


def _enc_version(v: tuple[bytes, int, bytes, int]) -> list[Any]:
    return list(v) if v[3] else list(v[:3])


def _records(v: object) -> tuple[Record, ...]:
    return tuple(_record(r) for r in _list(v))


def _encode(msg: Any) -> list[Any] | None:
    match msg:
        case SyncTree(session, depth, level, parents, sums):
            return [40, session, depth, level, list(parents), [list(s) for s in sums]]
        case SyncTreeDiff(session, level, differing):
            return [41, session, level, [list(d) for d in differing]]
        case SyncDigests(session, ranges, versions):
            return [42, session, [list(r) for r in ranges], [_enc_version(v) for v in versions]]
        case SyncRecords(session, records, wants, more):
            return [43, session, [_enc_record(r) for r in records], list(wants), more]
        case RecordPush(records):
            return [44, [_enc_record(r) for r in records]]
    return None


def _enc_record(r: Record) -> list[Any]:
    if r.epoch or r.owner:
        return [r.key, r.value, r.hlc, r.writer, r.epoch, r.owner]
    return [r.key, r.value, r.hlc, r.writer]


_U64 = 2**64
codec.register(40, 6, lambda f: SyncTree(
    u64(f[1]), _small(f[2], MAX_DEPTH + 1), _small(f[3], MAX_DEPTH + 1),
    tuple(_small(p, _MAX_INDEX) for p in _list(f[4])),
    tuple(_pair(s, _MAX_INDEX, _U64) for s in _list(f[5]))), _encode)  # fmt: skip
codec.register(41, 4, lambda f: SyncTreeDiff(
    u64(f[1]), _small(f[2], MAX_DEPTH + 1),
    tuple(_pair(d, _MAX_INDEX, _U64) for d in _list(f[3]))), _encode)  # fmt: skip
codec.register(42, 4, lambda f: SyncDigests(
    u64(f[1]), tuple(_pair(r, MAX_DEPTH + 1, _MAX_INDEX) for r in _list(f[2])),
    tuple(_version(v) for v in _list(f[3]))), _encode)  # fmt: skip
codec.register(43, 5, lambda f: SyncRecords(
    u64(f[1]), _records(f[2]), tuple(_key(k) for k in _list(f[3])), boolean(f[4])),
    _encode)  # fmt: skip
codec.register(44, 2, lambda f: RecordPush(_records(f[1])), _encode)
