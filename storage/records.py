"""Versioned records: the unit that replicas store, compare and exchange.

A record is a key, a value or a tombstone, and a version. The version is
a fence epoch (0 for an unfenced write), a hybrid-logical-clock timestamp
(`storage.hlc`) and the id of the node that wrote it; versions compare as
the tuple ``(epoch, hlc, writer)``, so two writes are never equal and every
replica picks the same winner, whatever order the writes arrived in: the
newest version wins (last writer wins), except that a write fenced under a
higher controller epoch beats every write under a lower one, whatever the
clocks say (a deposed controller with a fast clock loses; issue 21). A
delete is a tombstone, a record with no value, so that it too can win
against older writes on other replicas; tombstones are dropped after a
grace period.

An ephemeral record names its `owner`, a member's node id: every replica
hides it from reads once that member has failed or left (storage/store.py).

The stored form (`encode_value`) is the same on every node, so a record's
digest (which the Merkle tree sums) is the same on every node that holds it.
"""

from __future__ import annotations

import struct

import msgspec

from shoal.kernel.hashes import blake2b

NODE_ID_BYTES = 16
MAX_KEY_BYTES = 1024
# Consul's KV store refuses values over 512 KiB: this is a store for small
# coordination data (configuration, assignments), not for blobs.
MAX_VALUE_BYTES = 512 * 1024

_HEAD = struct.Struct(">QB16s")  # hlc, flags, writer
_EPOCH = struct.Struct(">Q")  # after the head when _FLAG_FENCED
_FLAG_TOMBSTONE = 0x01
_FLAG_FENCED = 0x02
_FLAG_EPHEMERAL = 0x04  # then the owner's 16-byte id, after the epoch if any
DIGEST_MASK = 2**64 - 1


class Record(msgspec.Struct, frozen=True):
    """One key's current state on one replica.

    Attributes:
        key: the key, 1 to MAX_KEY_BYTES bytes.
        value: the value, or None for a tombstone (a delete).
        hlc: the hybrid-logical-clock timestamp of the write.
        writer: the 16-byte id of the node that wrote it.
        epoch: the controller epoch the write was fenced under (0: none).
        owner: for an ephemeral record, the 16-byte id of the member that
            owns it; empty otherwise.
    """

    key: bytes
    value: bytes | None
    hlc: int
    writer: bytes
    epoch: int = 0
    owner: bytes = b""

    @property
    def version(self) -> tuple[int, int, bytes]:
        """What decides between two writes of one key: bigger wins."""
        return (self.epoch, self.hlc, self.writer)

    @property
    def is_tombstone(self) -> bool:
        """Whether this record is a delete."""
        return self.value is None

    def newer_than(self, other: Record | None) -> bool:
        """Whether this record should replace `other` (None: no record)."""
        if other is None:
            return True
        if self.epoch != other.epoch:
            return self.epoch > other.epoch
        if self.hlc != other.hlc or self.writer != other.writer:
            return (self.hlc, self.writer) > (other.hlc, other.writer)
        # Equal versions with different contents come only from a faulty
        # writer (one node never stamps two writes alike); any fixed order
        # keeps the replicas equal whatever the arrival order.
        return (self.value is not None, self.value or b"", self.owner) > (
            other.value is not None,
            other.value or b"",
            other.owner,
        )


def encode_value(record: Record) -> bytes:
    """The stored bytes of a record (everything but the key). A record with
    no epoch and no owner is stored as before fences existed."""
    flags = _FLAG_TOMBSTONE if record.value is None else 0
    extra = b""
    if record.epoch:
        flags |= _FLAG_FENCED
        extra = _EPOCH.pack(record.epoch)
    if record.owner:
        flags |= _FLAG_EPHEMERAL
        extra += record.owner
    return _HEAD.pack(record.hlc, flags, record.writer) + extra + (record.value or b"")


def decode_value(key: bytes, raw: bytes) -> Record:
    """The record stored as `raw` under `key` (our own bytes, trusted)."""
    hlc, flags, writer = _HEAD.unpack_from(raw)
    at, epoch, owner = _HEAD.size, 0, b""
    if flags & _FLAG_FENCED:
        (epoch,) = _EPOCH.unpack_from(raw, at)
        at += _EPOCH.size
    if flags & _FLAG_EPHEMERAL:
        owner = raw[at : at + NODE_ID_BYTES]
        at += NODE_ID_BYTES
    value = None if flags & _FLAG_TOMBSTONE else raw[at:]
    return Record(key, value, hlc, writer, epoch, owner)


def frame_size(record: Record) -> int:
    """Roughly the bytes a record takes in a frame (anti-entropy's budget)."""
    return len(record.key) + len(record.value or b"") + 32


def digest(record: Record) -> int:
    """A 64-bit hash of the whole record, summed by the Merkle tree."""
    return digest_of(record.key, encode_value(record))


def digest_of(key: bytes, stored: bytes) -> int:
    """`digest` of the record stored as `stored` (`encode_value`) under
    `key`: a local write encodes its record once, for the digest and the
    store."""
    data = len(key).to_bytes(4, "big") + key + stored
    return int.from_bytes(blake2b(data, digest_size=8).digest(), "big")


def check_key(key: bytes) -> None:
    """Raise ValueError for a key the store cannot hold (local misuse)."""
    if not 0 < len(key) <= MAX_KEY_BYTES:
        raise ValueError(f"a key is 1 to {MAX_KEY_BYTES} bytes, not {len(key)}")


def check_value(value: bytes) -> None:
    """Raise ValueError for a value over the limit (local misuse)."""
    if len(value) > MAX_VALUE_BYTES:
        raise ValueError(f"a value is at most {MAX_VALUE_BYTES} bytes, not {len(value)}")
