"""Snapshots of the metadata state machine, and their transfer in chunks.

etcd raft's `Snapshot` + `Compact` and hashicorp/raft's `installSnapshot`,
shaped for shoal's pure core:

**Taking one.** Every `snapshot_every` applied entries a node takes a
`TakeSnapshot`: an immutable view of its `MetaState` (the keys with their
revisions and the proposals it remembers applying) as of the applied index
S, a copy of the key table's references (milliseconds at 100,000 keys).
The driver encodes it (`encode_view`: deterministic msgpack of sorted
lists, with a sha256 of the whole) and stores its bytes off the event loop
(daemon/disk/snapshots.py; the simulator after a delay), then hands the
`Snapshot` back (`MetaLog.snapshot_taken`); only then does the core emit
`PersistSnapshot`: the driver records it as the latest and drops the log's
entries up to S - `keep_entries` in one atomic write (a tail stays, so a
follower slightly behind still catches up from the log). One take is in
flight at a time. A restart loads the snapshot and replays the entries
after it. Encoding 100,000 keys of 1 KiB took seconds of the loop before
(bench/meta_snapshot.py); `encode_pieces` works in pieces so that a thread
doing it lets the loop run between them (each C call holds the GIL).

**Sending one.** A follower that needs an index the leader no longer holds
gets the leader's latest snapshot instead, in `SnapshotChunk`s of
`chunk_bytes` (each with a crc32, and the whole's sha256 in every chunk),
a few in flight; it answers each with the length it holds
(`SnapshotAck`); what is lost is sent again on the heartbeat cadence. Only
a whole snapshot whose sha256 matches is installed, durably, before the
follower's `AppendAck` confirms it; then entries after it follow as usual.
Only committed state is ever in a snapshot, so installing one never
changes what a majority holds.

**Receiving one is bounded.** A follower holds one incoming snapshot at a
time, whose declared size (in every chunk) must be at most
`max_snapshot_bytes` (`[meta] max_snapshot_bytes`); chunks declaring more
are refused unbuffered and counted (`snapshot_chunks_too_large`), as are
chunks inconsistent with what they or the transfer declared (data past the
declared size, an empty chunk, another size or digest for the same index:
`snapshot_chunks_inconsistent`). Chunks must come in order (each at the
offset held), so what is held never exceeds the declared size, and the
number of chunks is bounded by it too. The bytes are held in memory, not
spooled to disk: a snapshot's state is restored into memory whole anyway.

Pure: sha256 (hashlib) and zlib compute, nothing here does IO.
"""

from __future__ import annotations

import heapq
import zlib
from collections.abc import Iterator
from typing import Any

import msgspec

from shoal.metalog.state import KeyState, MetaState, SessionInfo

# The default of `max_snapshot_bytes`: the largest snapshot a follower takes.
MAX_SNAPSHOT_BYTES = 512 * 1024 * 1024
# Keys sorted per run, and rows encoded per piece, by `encode_pieces`: each
# a C call of a few milliseconds at most, between which a thread yields.
_SORT_RUN = 4096
_ROWS_PER_PIECE = 128


class Snapshot(msgspec.Struct, frozen=True):
    """The state machine at `index` (the entry there is of `epoch`):
    `data` is `encode_state`'s, `digest` its sha256."""

    index: int
    epoch: int
    data: bytes
    digest: bytes


class TakeSnapshot(msgspec.Struct, frozen=True):
    """Encode and store a snapshot of the state at `index` (whose entry is
    of `epoch`), then tell the core (`MetaLog.snapshot_taken`). `keys` is a
    copy of the key table nobody changes; `seen` the dedup memory, by
    origin, oldest first. Not a durable write: the `PersistSnapshot` that
    follows is."""

    index: int
    epoch: int
    keys: dict[bytes, KeyState]
    seen: tuple[tuple[str, tuple[int, ...]], ...]
    sessions: tuple[SessionInfo, ...] = ()


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


def _sha256() -> Any:
    """A sha256 hasher: OpenSSL's (hashlib), 9 times as fast as CPython's
    own on this VM (77 ms against 670 ms for 50 MB) and letting go of the
    GIL as it hashes; imported here, on the first snapshot, not at every
    start (kernel/hashes.py). The same digests."""
    import hashlib

    return hashlib.sha256()


def digest(data: bytes) -> bytes:
    """The checksum of a whole snapshot."""
    hasher = _sha256()
    hasher.update(data)
    return bytes(hasher.digest())


def chunk_crc(data: bytes) -> int:
    """The checksum of one chunk."""
    return zlib.crc32(data)


def view_of(state: MetaState, index: int, epoch: int) -> TakeSnapshot:
    """What a snapshot of `state` as the index `index` (its revision; the
    entry there is of `epoch`) holds, copied: the state changes meanwhile."""
    # The dedup memory, oldest first per origin (its order decides what is
    # forgotten next, so it is part of the state).
    seen = tuple((origin, tuple(pids)) for origin, pids in sorted(state._seen.items()))
    sessions = tuple(state.sessions[sid] for sid in sorted(state.sessions))
    return TakeSnapshot(index, epoch, dict(state.keys), seen, sessions)


def _array_header(n: int) -> bytes:
    """msgpack's header of an array of `n` items (its shortest form, as
    msgspec writes it)."""
    if n < 16:
        return bytes((0x90 | n,))
    if n < 1 << 16:
        return b"\xdc" + n.to_bytes(2, "big")
    return b"\xdd" + n.to_bytes(4, "big")


def _sorted_keys(keys: dict[bytes, KeyState]) -> list[bytes]:
    """The keys in order, sorted in runs and merged (no long C call)."""
    names = list(keys)
    if len(names) <= _SORT_RUN:
        return sorted(names)
    runs = [sorted(names[i : i + _SORT_RUN]) for i in range(0, len(names), _SORT_RUN)]
    return list(heapq.merge(*runs))


def encode_pieces(view: TakeSnapshot) -> Iterator[bytes]:
    """The bytes of `view`'s snapshot, in pieces whose concatenation is
    msgpack of `[2, keys, seen, sessions]`: `keys` the rows [key, value,
    create, mod, version, session] in key order, `seen` [origin, [pid, ...]]
    by origin, `sessions` [id, ttl_ms, name, node, [check, ...], revision]
    by id. The same state gives the same bytes, whatever order its keys came
    in. (Format 1, before sessions, had no `sessions` and 5-field rows: it
    is still read.)"""
    keys = view.keys
    order = _sorted_keys(keys)
    encode = msgspec.msgpack.encode
    yield b"\x94\x02" + _array_header(len(order))
    for at in range(0, len(order), _ROWS_PER_PIECE):
        rows = []
        for k in order[at : at + _ROWS_PER_PIECE]:
            s = keys[k]
            rows.append([k, s.value, s.create_revision, s.mod_revision, s.version, s.session])
        yield encode(rows)[len(_array_header(len(rows))) :]
    yield encode([[origin, list(pids)] for origin, pids in view.seen])
    yield encode([[i.id, i.ttl_ms, i.name, i.node, list(i.checks), i.revision]
                  for i in view.sessions])  # fmt: skip


def encode_view(view: TakeSnapshot) -> Snapshot:
    """The snapshot `view` holds, with its digest (in pieces: see
    `encode_pieces`; sha256 lets go of the GIL as it hashes)."""
    hasher = _sha256()
    pieces = []
    for piece in encode_pieces(view):
        hasher.update(piece)
        pieces.append(piece)
    return Snapshot(view.index, view.epoch, b"".join(pieces), hasher.digest())


def encode_state(state: MetaState) -> bytes:
    """`state`'s keys and remembered proposals, deterministically (its
    revision is the snapshot's index, not in here). Whatever ops the state
    machine applies, this is what they leave."""
    return b"".join(encode_pieces(view_of(state, state.revision, 0)))


def take(state: MetaState, epoch: int) -> Snapshot:
    """A snapshot of `state` at its revision, whose entry is of `epoch`."""
    return encode_view(view_of(state, state.revision, epoch))


def restore(snapshot: Snapshot, checked: bool = False) -> MetaState:
    """The state machine a snapshot holds (`checked`: its digest was just
    checked, not again: 100 MB take a tenth of a second).

    Raises:
        ValueError: its data does not match its digest, or is not a state.
    """
    if not checked and digest(snapshot.data) != snapshot.digest:
        raise ValueError("snapshot checksum mismatch")
    try:
        decoded = msgspec.msgpack.decode(snapshot.data)
        version = decoded[0]
        if version not in (1, 2) or len(decoded) != version + 2:
            raise ValueError(f"snapshot format {version}")
        keys, seen = decoded[1], decoded[2]
        state = MetaState()
        for row in keys:
            key, value, create, mod, ver = row[:5]
            owner = bytes(row[5]) if version == 2 else b""
            state.keys[bytes(key)] = KeyState(bytes(value), create, mod, ver, owner)
            if owner:
                state.owned.setdefault(owner, set()).add(bytes(key))
        state._seen = {str(o): dict.fromkeys(int(p) for p in pids) for o, pids in seen}
        for sid, ttl_ms, name, node, checks, revision in decoded[3] if version == 2 else ():
            state.sessions[bytes(sid)] = SessionInfo(bytes(sid), int(ttl_ms), str(name),
                                                     str(node), tuple(map(str, checks)),
                                                     int(revision))  # fmt: skip
    except (TypeError, IndexError, msgspec.DecodeError) as exc:
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
        return ((chunk.index, chunk.snap_epoch, chunk.size, chunk.digest)
                == (self.index, self.snap_epoch, self.size, self.digest))  # fmt: skip

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
    """A follower's side: the snapshot being received, if any, at most
    `max_bytes` (module docstring, "Receiving one is bounded")."""

    def __init__(self, max_bytes: int = MAX_SNAPSHOT_BYTES) -> None:
        self.max_bytes = max_bytes
        self.incoming: Incoming | None = None
        self.refused = 0  # chunks or wholes that failed their checksum
        self.too_large = 0  # chunks of a snapshot declared over `max_bytes`
        self.inconsistent = 0  # chunks at odds with what they or the transfer declared

    def _held(self, chunk: SnapshotChunk) -> int:
        """The bytes held of `chunk`'s snapshot."""
        incoming = self.incoming
        return len(incoming.buf) if incoming is not None and incoming.same(chunk) else 0

    def take(self, chunk: SnapshotChunk) -> tuple[int, tuple[Snapshot, MetaState] | None]:
        """Take one chunk: the bytes now held, and the snapshot with its
        state once whole and intact (then the transfer is over)."""
        if chunk.size > self.max_bytes:
            self.too_large += 1  # never buffered: the leader's next beat sends it again
            return 0, None
        if not chunk.data or chunk.offset + len(chunk.data) > chunk.size:
            self.inconsistent += 1
            return self._held(chunk), None
        incoming = self.incoming
        if incoming is None or not incoming.same(chunk):
            if incoming is not None and incoming.index == chunk.index:
                self.inconsistent += 1  # one index, another snapshot: not the same bytes
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
            state = None if whole is None else restore(whole, checked=True)
        except ValueError:  # its digest matched, but it is not a state
            state = None
        if whole is None or state is None:
            self.refused += 1
            return 0, None
        return len(whole.data), (whole, state)
