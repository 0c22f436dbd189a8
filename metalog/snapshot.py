"""Snapshots of the metadata state machine, and their transfer in chunks.

etcd raft's `Snapshot` + `Compact` and hashicorp/raft's `installSnapshot`,
shaped for shoal's pure core:

**Taking one.** Every `snapshot_every` applied entries a node encodes its
`MetaState` (the keys with their revisions and the proposals it remembers
applying) as of the applied index S, deterministically (msgpack of sorted
lists), with a sha256 of the whole, and emits `PersistSnapshot`: the driver
stores it and drops the log's entries up to S - `keep_entries` in one
atomic write (a tail stays, so a follower slightly behind still catches up
from the log). A restart loads the snapshot and replays the entries after
it.

**Sending one.** A follower that needs an index the leader no longer holds
gets the leader's latest snapshot instead, in `SnapshotChunk`s of
`chunk_bytes` (each with a crc32, and the whole's sha256 in every chunk),
a few in flight; it answers each with the length it holds
(`SnapshotAck`); what is lost is sent again on the heartbeat cadence. Only
a whole snapshot whose sha256 matches is installed, durably, before the
follower's `AppendAck` confirms it; then entries after it follow as usual.
Only committed state is ever in a snapshot, so installing one never
changes what a majority holds.

Pure: sha256 (kernel/hashes.py) and zlib compute, nothing here does IO.
"""

from __future__ import annotations

import zlib
from typing import Any

import msgspec

from shoal.kernel.hashes import sha256
from shoal.metalog.state import KeyState, MetaState


class Snapshot(msgspec.Struct, frozen=True):
    """The state machine at `index` (the entry there is of `epoch`):
    `data` is `encode_state`'s, `digest` its sha256."""

    index: int
    epoch: int
    data: bytes
    digest: bytes


class PersistSnapshot(msgspec.Struct, frozen=True):
    """Store `snapshot` and delete the log's entries up to `drop_through`,
    in one atomic write (an install replaces the log: `drop_through` is then
    at least the last index held)."""

    snapshot: Snapshot
    drop_through: int


class SnapshotChunk(msgspec.Struct, frozen=True):
    """`data` at byte `offset` of the leader's snapshot at `index` (of
    `snap_epoch`), `size` bytes in all, whose sha256 is `digest`; `crc` is
    the chunk's crc32. Sent by the leader of `epoch`."""

    epoch: int
    leader: str
    index: int
    snap_epoch: int
    size: int
    offset: int
    data: bytes
    crc: int
    digest: bytes


class SnapshotAck(msgspec.Struct, frozen=True):
    """A follower holds the first `received` bytes of the snapshot at
    `index` (sent under `epoch`)."""

    epoch: int
    follower: str
    index: int
    received: int


def digest(data: bytes) -> bytes:
    """The checksum of a whole snapshot."""
    return sha256(data).digest()


def chunk_crc(data: bytes) -> int:
    """The checksum of one chunk."""
    return zlib.crc32(data)


def encode_state(state: MetaState) -> bytes:
    """`state`'s keys and remembered proposals, deterministically (its
    revision is the snapshot's index, not in here). Whatever ops the state
    machine applies, this is what they leave."""
    keys = [[k, s.value, s.create_revision, s.mod_revision, s.version]
            for k, s in sorted(state.keys.items())]  # fmt: skip
    # The dedup memory, oldest first per origin (its order decides what is
    # forgotten next, so it is part of the state).
    seen = [[origin, list(pids)] for origin, pids in sorted(state._seen.items())]
    return msgspec.msgpack.encode([1, keys, seen])


def take(state: MetaState, epoch: int) -> Snapshot:
    """A snapshot of `state` at its revision, whose entry is of `epoch`."""
    data = encode_state(state)
    return Snapshot(state.revision, epoch, data, digest(data))


def restore(snapshot: Snapshot) -> MetaState:
    """The state machine a snapshot holds.

    Raises:
        ValueError: its data does not match its digest, or is not a state.
    """
    if digest(snapshot.data) != snapshot.digest:
        raise ValueError("snapshot checksum mismatch")
    try:
        version, keys, seen = msgspec.msgpack.decode(snapshot.data)
        if version != 1:
            raise ValueError(f"snapshot format {version}")
        state = MetaState()
        for key, value, create, mod, ver in keys:
            state.keys[bytes(key)] = KeyState(bytes(value), create, mod, ver)
        state._seen = {str(o): dict.fromkeys(int(p) for p in pids) for o, pids in seen}
    except (TypeError, msgspec.DecodeError) as exc:
        raise ValueError(f"snapshot damaged: {exc}") from None
    state.revision = snapshot.index
    return state


def to_wire(snapshot: Snapshot) -> list[Any]:
    """A snapshot as stored on disk."""
    return [snapshot.index, snapshot.epoch, snapshot.data, snapshot.digest]


def from_wire(v: object) -> Snapshot:
    """A snapshot from `to_wire`'s form (checked: its digest matches).

    Raises:
        ValueError: not one, or damaged.
    """
    if type(v) is not list or len(v) != 4:
        raise ValueError("not a snapshot")
    index, epoch, data, dig = v
    if type(index) is not int or type(epoch) is not int or type(data) is not bytes:
        raise ValueError("not a snapshot")
    snapshot = Snapshot(index, epoch, data, bytes(dig))
    restore(snapshot)  # raises when damaged
    return snapshot


class Incoming:
    """A follower's snapshot being received, chunk by chunk."""

    __slots__ = ("index", "snap_epoch", "size", "digest", "buf")

    def __init__(self, chunk: SnapshotChunk) -> None:
        self.index, self.snap_epoch = chunk.index, chunk.snap_epoch
        self.size, self.digest = chunk.size, chunk.digest
        self.buf = bytearray()

    def same(self, chunk: SnapshotChunk) -> bool:
        """Whether `chunk` belongs to this snapshot."""
        return (chunk.index, chunk.size, chunk.digest) == (self.index, self.size, self.digest)

    def add(self, chunk: SnapshotChunk) -> bool:
        """Take `chunk` if it is the next one and intact; False: refused."""
        if chunk.offset != len(self.buf) or chunk_crc(chunk.data) != chunk.crc:
            return False
        if len(self.buf) + len(chunk.data) > self.size:
            return False
        self.buf += chunk.data
        return True

    def complete(self) -> Snapshot | None:
        """The whole snapshot once every byte came and its digest matches."""
        if len(self.buf) != self.size:
            return None
        data = bytes(self.buf)
        if digest(data) != self.digest:
            return None
        return Snapshot(self.index, self.snap_epoch, data, self.digest)


def chunk_of(snapshot: Snapshot, epoch: int, leader: str, offset: int,
             chunk_bytes: int) -> SnapshotChunk:  # fmt: skip
    """The chunk of `snapshot` at `offset`, sent by `leader` of `epoch`."""
    data = snapshot.data[offset : offset + chunk_bytes]
    return SnapshotChunk(epoch, leader, snapshot.index, snapshot.epoch, len(snapshot.data),
                         offset, data, chunk_crc(data), snapshot.digest)  # fmt: skip


class Sender:
    """The leader's snapshot transfers, per follower: the snapshot pinned
    for it (a later one does not restart a transfer it still serves), the
    bytes it confirmed, the bytes sent."""

    def __init__(self, chunk_bytes: int, window: int) -> None:
        self.chunk_bytes, self.window = chunk_bytes, window
        self._to: dict[str, list[Any]] = {}  # follower -> [snapshot, acked, sent]

    def reset(self) -> None:
        """Leadership changed: every transfer starts over."""
        self._to = {}

    def done(self, follower: str) -> None:
        """`follower` takes entries from the log again."""
        self._to.pop(follower, None)

    def chunks(self, follower: str, latest: Snapshot, offset: int, epoch: int, leader: str,
               again: bool) -> list[SnapshotChunk]:  # fmt: skip
        """The chunks to send `follower` now: up to the window past what it
        confirmed; with `again` (a heartbeat), from what it confirmed (what
        was lost goes again). A pinned snapshot older than the log's
        `offset` is replaced by `latest`."""
        state = self._to.get(follower)
        if state is None or state[0].index < offset:
            state = self._to[follower] = [latest, 0, 0]
        snapshot, acked, sent = state
        if again:
            sent = acked
        out = []
        size, step = len(snapshot.data), self.chunk_bytes
        while sent < size and sent < acked + step * self.window:
            out.append(chunk_of(snapshot, epoch, leader, sent, step))
            sent += step
        state[2] = min(sent, size)
        return out

    def acked(self, follower: str, index: int, received: int) -> bool:
        """`follower` confirmed `received` bytes of the snapshot at `index`;
        True when that moved its transfer on."""
        state = self._to.get(follower)
        if state is None or state[0].index != index or received == state[1]:
            return False
        if received < state[1]:
            # It holds less than it confirmed: it restarted (a crash before
            # the install's fsync) or dropped the transfer, or this is a stale
            # copy of an old answer. The next heartbeat sends from there
            # again (without this the leader resent its last chunk forever);
            # not at once: answers to chunks in flight would each send more.
            state[1] = state[2] = received
            return False
        state[1] = received
        state[2] = max(state[2], received)
        return True


class Receiver:
    """A follower's side: the snapshot being received, if any."""

    def __init__(self) -> None:
        self.incoming: Incoming | None = None
        self.refused = 0  # chunks or wholes that failed their checksum

    def take(self, chunk: SnapshotChunk) -> tuple[int, tuple[Snapshot, MetaState] | None]:
        """Take one chunk: the bytes now held, and the snapshot with its
        state once whole and intact (then the transfer is over)."""
        incoming = self.incoming
        if incoming is None or not incoming.same(chunk):
            if chunk.offset != 0:
                return 0, None  # the leader starts again from what we hold
            incoming = self.incoming = Incoming(chunk)
        if not incoming.add(chunk):
            if chunk.offset == len(incoming.buf):
                self.refused += 1  # damaged: it comes again
            return len(incoming.buf), None
        if len(incoming.buf) < incoming.size:
            return len(incoming.buf), None
        self.incoming = None
        whole = incoming.complete()
        try:
            state = None if whole is None else restore(whole)
        except ValueError:  # its digest matched, but it is not a state
            state = None
        if whole is None or state is None:
            self.refused += 1
            return 0, None
        return len(whole.data), (whole, state)
