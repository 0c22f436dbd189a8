"""The metadata log's wire messages (tags 70-79; docs/wire.md).

Raft's AppendEntries and its answer, carrying the election's epoch as the
term; a proposal forwarded to the controller and its outcome; a
linearizable read asked of the controller (ReadIndex, Ongaro's thesis
section 6.4) and its answer; a snapshot sent in chunks to a follower the
log no longer has the entries for, and its progress (76-77,
metalog/snapshot.py); sessions' renewals forwarded to the controller and
its answer (78-79, metalog/sessionclock.py). Sent only while the cluster's feature level
includes the metadata log (node/features.py), so an agent that predates it
never receives one.
"""

from __future__ import annotations

from typing import Any

import msgspec

from shoal.kernel import codec
from shoal.kernel.codec import DecodeError, boolean, counter, name, u64
from shoal.metalog.restore import MAX_RESTORE_BYTES
from shoal.metalog.snapshot import SnapshotAck, SnapshotChunk
from shoal.metalog.state import (
    MAX_TXN_OPS,
    Compare,
    KeyState,
    MetaDelete,
    MetaGet,
    MetaOp,
    MetaPut,
    MetaRestore,
    MetaTxn,
    NoOp,
    SessionEnd,
    SessionOpen,
    TxnApplied,
    TxnOp,
    VoterSet,
)

MAX_KEY_BYTES = 1024
MAX_VALUE_BYTES = 512 * 1024
MAX_ENTRIES_PER_APPEND = 1024
MAX_CHUNK_BYTES = 4 * 1024 * 1024
MAX_VOTERS = 64  # as election/messages.py
SESSION_ID_BYTES = 16
MAX_SESSION_TTL_MS = 3_600_000  # an hour, as daemon/sessions.py
MAX_SESSION_NAME = 256
MAX_SESSION_CHECKS = 64
MAX_KEEPALIVE_IDS = 1024  # sessions renewed in one message


class Entry(msgspec.Struct, frozen=True, gc=False):
    """One log entry: appended by the controller of `epoch` at `index`;
    (`origin`, `pid`) name the proposal, so that a copy of it appended
    again (a duplicated datagram, a retry reaching a new controller) is
    applied once (Raft thesis §6.3; the state machine skips the copy)."""

    epoch: int
    index: int
    op: MetaOp
    origin: str = ""
    pid: int = 0


class Append(msgspec.Struct, frozen=True):
    """Raft's AppendEntries: `entries` follow (`prev_index`, `prev_epoch`);
    the leader has committed up to `commit`. With no entries it is a
    heartbeat; `read_seq` numbers the leader's ReadIndex rounds."""

    epoch: int
    leader: str
    prev_index: int
    prev_epoch: int
    entries: tuple[Entry, ...]
    commit: int
    read_seq: int = 0


class AppendAck(msgspec.Struct, frozen=True):
    """A follower's answer: `ok` with the index its log matches the
    leader's up to (durable), or a refusal with its last index as a hint;
    `epoch` is the highest epoch it knows."""

    epoch: int
    follower: str
    ok: bool
    match_index: int
    read_seq: int = 0


class Propose(msgspec.Struct, frozen=True):
    """An agent forwards a client's write to the controller of `epoch`;
    only the leader of that epoch appends it (so a refusal is final)."""

    origin: str
    pid: int
    op: MetaOp
    epoch: int


OUTCOME_COMMITTED = 0  # applied: `revision`
OUTCOME_CONFLICT = 1  # refused by its cas: `revision` is the key's current mod revision
OUTCOME_NOT_APPLIED = 2  # not appended (not the controller): safe to retry
OUTCOME_UNKNOWN = 3  # appended, then leadership was lost: may or may not commit
OUTCOME_NO_SESSION = 4  # refused: the session it names is not open (`revision` 0)


class ProposeResult(msgspec.Struct, frozen=True):
    """The controller's answer to a `Propose` (`txn`: a committed
    transaction's branch and results)."""

    pid: int
    outcome: int
    revision: int
    txn: TxnApplied | None = None


class ReadRequest(msgspec.Struct, frozen=True):
    """A linearizable read of `key`, asked of the controller."""

    origin: str
    rid: int
    key: bytes


class ReadResult(msgspec.Struct, frozen=True):
    """`key`'s value and mod revision (0, None: absent) at `revision`, the
    applied index the read was served at; `ok` False: not served (not the
    controller, or leadership not confirmed)."""

    rid: int
    ok: bool
    value: bytes | None
    mod_revision: int
    revision: int


class Keepalive(msgspec.Struct, frozen=True):
    """Renew sessions `ids` (request `rid` of `origin`), asked of the
    controller: it holds renewals in memory (metalog/sessionclock.py)."""

    origin: str
    rid: int
    ids: tuple[bytes, ...]


class KeepaliveResult(msgspec.Struct, frozen=True):
    """The controller's answer: `ok` False: not served (not the
    controller); else every id renewed but `ended` (not open, or being
    ended: its end is decided)."""

    rid: int
    ok: bool
    ended: tuple[bytes, ...] = ()


MetaMessage = (Append | AppendAck | Propose | ProposeResult | ReadRequest | ReadResult
               | SnapshotChunk | SnapshotAck | Keepalive | KeepaliveResult)  # fmt: skip


# -- codec -----------------------------------------------------------------


def _bytes(v: object, limit: int) -> bytes:
    if type(v) is not bytes or len(v) > limit:
        raise DecodeError("shape", "bad key or value")
    return v


def _key(v: object) -> bytes:
    key = _bytes(v, MAX_KEY_BYTES)
    if not key:
        raise DecodeError("shape", "empty key")
    return key


def _cas(v: object) -> int | None:
    return None if v is None else counter(v)


def _op(v: object) -> MetaOp:
    if type(v) is not list or not v:
        raise DecodeError("shape", "bad metadata operation")
    if v[0] == 0 and len(v) == 1:
        return NoOp()
    if v[0] == 1 and len(v) in (4, 5):
        owner = _session_id(v[4]) if len(v) == 5 else b""
        return MetaPut(_key(v[1]), _bytes(v[2], MAX_VALUE_BYTES), _cas(v[3]), owner)
    if v[0] == 2 and len(v) == 3:
        return MetaDelete(_key(v[1]), _cas(v[2]))
    if v[0] == 3 and len(v) == 4:
        compares, success, failure = _list(v[1]), _list(v[2]), _list(v[3])
        if len(compares) + len(success) + len(failure) > MAX_TXN_OPS:
            raise DecodeError("shape", "too many transaction operations")
        return MetaTxn(tuple(_compare(c) for c in compares), tuple(_txn_op(o) for o in success),
                       tuple(_txn_op(o) for o in failure))  # fmt: skip
    if v[0] == 4 and len(v) in (5, 6):
        return _voter_set(v[1:])
    if v[0] == 5 and len(v) == 6:
        return _session_open(v[1:])
    if v[0] == 6 and len(v) == 3 and type(v[2]) is int and 0 <= v[2] <= 2:
        return SessionEnd(_session_id(v[1]), v[2])
    if v[0] == 7 and len(v) == 3:  # a backup's state: metalog/restore.py
        return MetaRestore(_bytes(v[1], MAX_RESTORE_BYTES), _bytes(v[2], 32))
    raise DecodeError("shape", "bad metadata operation")


def _session_id(v: object) -> bytes:
    if type(v) is not bytes or len(v) != SESSION_ID_BYTES:
        raise DecodeError("shape", "bad session id")
    return v


def _session_open(v: list[Any]) -> SessionOpen:
    """[id, ttl_ms, name, node ("" or a member's name), [check, ...]]."""
    sid, ttl_ms, label, node, checks = v
    if type(ttl_ms) is not int or not 0 < ttl_ms <= MAX_SESSION_TTL_MS:
        raise DecodeError("shape", "bad session ttl")
    if type(label) is not str or len(label) > MAX_SESSION_NAME:
        raise DecodeError("shape", "bad session name")
    if type(checks) is not list or len(checks) > MAX_SESSION_CHECKS:
        raise DecodeError("shape", "bad session checks")
    if any(type(c) is not str or len(c) > MAX_SESSION_NAME for c in checks):
        raise DecodeError("shape", "bad session check")
    return SessionOpen(_session_id(sid), ttl_ms, label, node if node == "" else name(node),
                       tuple(checks))  # fmt: skip


def _session_ids(v: object) -> tuple[bytes, ...]:
    if type(v) is not list or len(v) > MAX_KEEPALIVE_IDS:
        raise DecodeError("shape", "bad session ids")
    return tuple(_session_id(i) for i in v)


def _voter_set(v: list[Any]) -> VoterSet:
    """A `VoterSet` entry: [lineage (8 bytes), version, names, ids ([] or one
    per name)], then its recovery when above 0 (issue 39)."""
    lineage, version, voters, ids = v[:4]
    recovery = counter(v[4]) if len(v) == 5 else 0
    if type(lineage) is not bytes or len(lineage) != 8:
        raise DecodeError("shape", "bad lineage")
    if type(voters) is not list or not 0 < len(voters) <= MAX_VOTERS:
        raise DecodeError("shape", "bad voter list")
    if type(ids) is not list or len(ids) not in (0, len(voters)):
        raise DecodeError("shape", "bad voter ids")
    names = tuple(name(n) for n in voters)
    if list(names) != sorted(set(names)):
        raise DecodeError("shape", "voters not sorted or repeated")
    return VoterSet(lineage, counter(version), names, tuple(_bytes(i, 16) for i in ids),
                    recovery)  # fmt: skip


def _list(v: object) -> list[Any]:
    if type(v) is not list:
        raise DecodeError("shape", "bad transaction")
    return v


def _compare(v: object) -> Compare:
    if (type(v) is not list or len(v) != 5 or type(v[1]) is not int or type(v[2]) is not int
            or not (0 <= v[1] <= 3 and 0 <= v[2] <= 3)):  # fmt: skip
        raise DecodeError("shape", "bad compare")
    return Compare(_key(v[0]), v[1], v[2], u64(v[3]), _bytes(v[4], MAX_VALUE_BYTES))


def _txn_op(v: object) -> TxnOp:
    if type(v) is not list or not v or type(v[0]) is not int:
        raise DecodeError("shape", "bad transaction operation")
    if len(v) == 2 and v[0] in (2, 3):
        return MetaDelete(_key(v[1])) if v[0] == 2 else MetaGet(_key(v[1]))
    if len(v) in (3, 4) and v[0] == 1:
        owner = _session_id(v[3]) if len(v) == 4 else b""
        return MetaPut(_key(v[1]), _bytes(v[2], MAX_VALUE_BYTES), None, owner)
    raise DecodeError("shape", "bad transaction operation")


def _enc_txn_op(op: TxnOp) -> list[Any]:
    match op:
        case MetaPut(key, value, _, session):
            return [1, key, value, session] if session else [1, key, value]
        case MetaDelete(key):
            return [2, key]
    return [3, op.key]


def _enc_op(op: MetaOp) -> list[Any]:
    match op:
        case MetaPut(key, value, cas, session):
            return [1, key, value, cas, session] if session else [1, key, value, cas]
        case MetaDelete(key, cas):
            return [2, key, cas]
        case MetaTxn(compares, success, failure):
            return [
                3,
                [[c.key, c.target, c.cmp, c.number, c.value] for c in compares],
                [_enc_txn_op(o) for o in success],
                [_enc_txn_op(o) for o in failure],
            ]
        case VoterSet(lineage, version, voters, ids, 0):
            return [4, lineage, version, list(voters), list(ids)]
        case VoterSet(lineage, version, voters, ids, recovery):
            return [4, lineage, version, list(voters), list(ids), recovery]
        case SessionOpen(sid, ttl_ms, name, node, checks):
            return [5, sid, ttl_ms, name, node, list(checks)]
        case SessionEnd(sid, reason):
            return [6, sid, reason]
        case MetaRestore(data, digest):
            return [7, data, digest]
    return [0]


def _enc_txn_result(t: TxnApplied | None) -> list[Any] | None:
    if t is None:
        return None
    return [
        t.revision,
        t.succeeded,
        [
            None if k is None else [k.value, k.create_revision, k.mod_revision, k.version]
            for k in t.results
        ],
    ]


def _txn_result(v: object) -> TxnApplied | None:
    if v is None:
        return None
    if type(v) is not list or len(v) != 3 or type(v[2]) is not list or len(v[2]) > MAX_TXN_OPS:
        raise DecodeError("shape", "bad transaction result")
    results = []
    for k in v[2]:
        if k is not None and (type(k) is not list or len(k) != 4):
            raise DecodeError("shape", "bad transaction result")
        results.append(None if k is None else KeyState(_bytes(k[0], MAX_VALUE_BYTES), u64(k[1]),
                                                       u64(k[2]), u64(k[3])))  # fmt: skip
    return TxnApplied(u64(v[0]), boolean(v[1]), tuple(results))


def _entries(v: object) -> tuple[Entry, ...]:
    if type(v) is not list or len(v) > MAX_ENTRIES_PER_APPEND:
        raise DecodeError("shape", "bad entries")
    return tuple(entry_from_wire(e) for e in v)


def entry_to_wire(e: Entry) -> list[Any]:
    """One entry as the codec carries it (also its form on disk)."""
    return [e.epoch, e.index, _enc_op(e.op), e.origin, e.pid]


def entry_from_wire(v: object) -> Entry:
    """An entry from `entry_to_wire`'s form.

    Raises:
        DecodeError: not an entry.
    """
    if type(v) is not list or len(v) != 5:
        raise DecodeError("shape", "bad entry")
    origin = v[3] if v[3] == "" else name(v[3])
    return Entry(counter(v[0]), u64(v[1]), _op(v[2]), origin, u64(v[4]))


def _outcome(v: object) -> int:
    if type(v) is not int or not OUTCOME_COMMITTED <= v <= OUTCOME_NO_SESSION:
        raise DecodeError("shape", "bad outcome")
    return v


def _encode(msg: Any) -> list[Any] | None:
    match msg:
        case Append(epoch, leader, prev_index, prev_epoch, entries, commit, read_seq):
            return [
                70,
                epoch,
                leader,
                prev_index,
                prev_epoch,
                [entry_to_wire(e) for e in entries],
                commit,
                read_seq,
            ]
        case AppendAck(epoch, follower, ok, match_index, read_seq):
            return [71, epoch, follower, ok, match_index, read_seq]
        case Propose(origin, pid, op, epoch):
            return [72, origin, pid, _enc_op(op), epoch]
        case ProposeResult(pid, outcome, revision, txn):
            return [73, pid, outcome, revision, _enc_txn_result(txn)]
        case ReadRequest(origin, rid, key):
            return [74, origin, rid, key]
        case ReadResult(rid, ok, value, mod_revision, revision):
            return [75, rid, ok, value, mod_revision, revision]
        case SnapshotChunk(epoch, leader, index, snap_epoch, size, offset, data, crc, digest):
            return [76, epoch, leader, index, snap_epoch, size, offset, data, crc, digest]
        case SnapshotAck(epoch, follower, index, received):
            return [77, epoch, follower, index, received]
        case Keepalive(origin, rid, ids):
            return [78, origin, rid, list(ids)]
        case KeepaliveResult(rid, ok, ended):
            return [79, rid, ok, list(ended)]
    return None  # fmt: skip


def _opt_value(v: object) -> bytes | None:
    return None if v is None else _bytes(v, MAX_VALUE_BYTES)


codec.register(70, 8, lambda f: Append(counter(f[1]), name(f[2]), u64(f[3]), counter(f[4]),
                                       _entries(f[5]), u64(f[6]), u64(f[7])), _encode)  # fmt: skip
codec.register(71, 6, lambda f: AppendAck(counter(f[1]), name(f[2]), boolean(f[3]), u64(f[4]),
                                          u64(f[5])), _encode)  # fmt: skip
codec.register(72, 5, lambda f: Propose(name(f[1]), u64(f[2]), _op(f[3]), counter(f[4])),
               _encode)  # fmt: skip
codec.register(73, 5, lambda f: ProposeResult(u64(f[1]), _outcome(f[2]), u64(f[3]),
                                              _txn_result(f[4])), _encode)  # fmt: skip
codec.register(74, 4, lambda f: ReadRequest(name(f[1]), u64(f[2]), _key(f[3])), _encode)
codec.register(75, 6, lambda f: ReadResult(u64(f[1]), boolean(f[2]), _opt_value(f[3]),
                                           u64(f[4]), u64(f[5])), _encode)  # fmt: skip


def _digest(v: object) -> bytes:
    if type(v) is not bytes or len(v) != 32:
        raise DecodeError("shape", "bad snapshot digest")
    return v


def _chunk(f: list[Any]) -> SnapshotChunk:
    data = _bytes(f[7], MAX_CHUNK_BYTES)
    return SnapshotChunk(counter(f[1]), name(f[2]), u64(f[3]), counter(f[4]), u64(f[5]),
                         u64(f[6]), data, u64(f[8]), _digest(f[9]))  # fmt: skip


codec.register(76, 10, _chunk, _encode)
codec.register(77, 5, lambda f: SnapshotAck(counter(f[1]), name(f[2]), u64(f[3]), u64(f[4])),
               _encode)  # fmt: skip
codec.register(78, 4, lambda f: Keepalive(name(f[1]), u64(f[2]), _session_ids(f[3])), _encode)
codec.register(79, 4, lambda f: KeepaliveResult(u64(f[1]), boolean(f[2]), _session_ids(f[3])),
               _encode)  # fmt: skip


def keepalive_ids_fitting(origin: str, mtu_bytes: int) -> int:
    """How many session ids a `Keepalive` of `origin` carries in a datagram
    whose payload may take `mtu_bytes` (as daemon/meta.py's `sends_for`
    counts it): an agent's renewals of one pass go in as few as that allows
    (daemon/renewals.py). 17 bytes an id: 74 at the default 1,400 bytes."""
    empty = len(codec.encode_payload((Keepalive(origin, 2**64 - 1, ()),)))
    # An id is a byte string of 16 (a 1-byte CBOR head); the list's head
    # grows from 1 to 3 bytes with its length.
    fitting = (mtu_bytes - empty - 2) // (SESSION_ID_BYTES + 1)
    return max(1, min(MAX_KEEPALIVE_IDS, fitting))
