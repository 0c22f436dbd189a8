"""The membership messages on the wire (tags 1-10; docs/wire.md).

The envelope, the tag table and the field checks are the kernel's
(kernel/codec.py); this module registers SWIM's messages with it, and
re-exports the envelope functions the membership IO modules use.
"""

from __future__ import annotations

import math
import struct
from typing import Any

from shoal.kernel.codec import (
    MAX_PUSHPULL_MEMBERS,
    DecodeError,
    address,
    boolean,
    counter,
    name,
    node_id,
    register,
    tags,
    u64,
    versions,
)
from shoal.membership.member import MemberState, NodeIdentity
from shoal.membership.messages import (
    Ack,
    Alive,
    Dead,
    Leave,
    MemberRecord,
    Nack,
    Ping,
    PingReq,
    PushPull,
    Suspect,
)
from shoal.membership.vivaldi import Coordinate


def _identity(name_: object, id_: object, addr: object, tags_: object,
              versions_: object) -> NodeIdentity:  # fmt: skip
    return NodeIdentity(name(name_), node_id(id_), address(addr), tags(tags_), versions(versions_))


def _state(v: object) -> MemberState:
    if type(v) is not int or not 0 <= v <= 3:
        raise DecodeError("shape", "bad member state")
    return MemberState(v)


def _record(v: object) -> MemberRecord:
    if type(v) is not list or len(v) != 7:
        raise DecodeError("shape", "bad member record")
    return MemberRecord(_identity(v[0], v[1], v[2], v[3], v[6]), counter(v[4]), _state(v[5]))


def _records(v: object) -> tuple[MemberRecord, ...]:
    if type(v) is not list or len(v) > MAX_PUSHPULL_MEMBERS:
        raise DecodeError("shape", "bad member list")
    return tuple(_record(r) for r in v)


# A coordinate on the wire: little-endian float32s, the vector then error,
# adjustment and height (8 dimensions: 44 bytes, where CBOR's float64s
# would take 100). float32 keeps 7 significant digits: 0.1 µs in a 1 s
# coordinate, far below any RTT a probe can time.
_COORD_FIXED = 3  # error, adjustment, height
_COORD_MAX_DIMENSIONS = 16
# No honest coordinate component comes near this: Vivaldi refuses RTTs
# above 10 s, and gravity pulls every coordinate towards the origin.
_COORD_MAX_ABS_S = 1000.0


def _coordinate(v: object) -> Coordinate:
    if type(v) is not bytes or len(v) % 4:
        raise DecodeError("shape", "bad coordinate")
    n = len(v) // 4
    if not _COORD_FIXED < n <= _COORD_FIXED + _COORD_MAX_DIMENSIONS:
        raise DecodeError("shape", "bad coordinate")
    values = struct.unpack(f"<{n}f", v)
    if not all(math.isfinite(x) and abs(x) <= _COORD_MAX_ABS_S for x in values):
        raise DecodeError("shape", "bad coordinate")
    *vec, error, adjustment, height = values
    if error < 0.0 or height < 0.0:
        raise DecodeError("shape", "bad coordinate")
    return Coordinate(tuple(vec), error, adjustment, height)


def _enc_coordinate(c: Coordinate) -> bytes:
    return struct.pack(f"<{len(c.vec) + _COORD_FIXED}f", *c.vec, c.error, c.adjustment, c.height)


# -- the tag table ----------------------------------------------------------


def _enc_identity(n: NodeIdentity) -> list[Any]:
    return [n.name, n.node_id, list(n.addr), dict(n.tags), n.versions.to_wire()]


def _enc_row(n: NodeIdentity) -> list[Any]:
    # A push-pull row keeps the alive fields' order and puts the versions
    # last, after the incarnation and state.
    return [n.name, n.node_id, list(n.addr), dict(n.tags)]


def _encode_fields(msg: Any) -> list[Any] | None:
    match msg:
        case Ping(seq, target, source):
            return [1, seq, target, source]
        case PingReq(seq, target, addr, nack):
            return [2, seq, target, list(addr), nack]
        case Ack(seq, wall_ms, None):
            return [3, seq, wall_ms]
        case Ack(seq, wall_ms, Coordinate() as coord):
            return [10, seq, wall_ms, _enc_coordinate(coord)]
        case Nack(seq):
            return [4, seq]
        case Alive(inc, node):
            return [5, inc, *_enc_identity(node)]
        case Suspect(inc, node, source):
            return [6, inc, node, source]
        case Dead(inc, node, source):
            return [7, inc, node, source]
        case Leave(inc, node):
            return [8, inc, node]
        case PushPull(source, join, reply, members):
            recs = [[*_enc_row(r.ident), r.incarnation, int(r.state), r.ident.versions.to_wire()]
                    for r in members]  # fmt: skip
            return [9, source, join, reply, recs]
    return None


register(1, 4, lambda f: Ping(u64(f[1]), name(f[2]), name(f[3])), _encode_fields)
register(2, 5, lambda f: PingReq(u64(f[1]), name(f[2]), address(f[3]), boolean(f[4])),
         _encode_fields)  # fmt: skip
register(3, 3, lambda f: Ack(u64(f[1]), u64(f[2])), _encode_fields)
# An ack with the answerer's coordinate has its own tag, so the plain form
# keeps its bytes and both are decoded (mixed versions: probing.py).
register(10, 4, lambda f: Ack(u64(f[1]), u64(f[2]), _coordinate(f[3])), _encode_fields)
register(4, 2, lambda f: Nack(u64(f[1])), _encode_fields)
register(5, 7, lambda f: Alive(counter(f[1]), _identity(f[2], f[3], f[4], f[5], f[6])),
         _encode_fields)  # fmt: skip
register(6, 4, lambda f: Suspect(counter(f[1]), name(f[2]), name(f[3])), _encode_fields)
register(7, 4, lambda f: Dead(counter(f[1]), name(f[2]), name(f[3])), _encode_fields)
register(8, 3, lambda f: Leave(counter(f[1]), name(f[2])), _encode_fields)
register(9, 5, lambda f: PushPull(name(f[1]), boolean(f[2]), boolean(f[3]), _records(f[4])),
         _encode_fields)  # fmt: skip

__all__ = ["DecodeError"]
