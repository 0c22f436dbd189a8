"""The metadata log's snapshots on disk, and the thread that takes them.

**On disk** (the database's ``local`` family): a snapshot's bytes are
stored in pieces of `PIECE_BYTES` under ``meta/snapdata/`` + its index (8
bytes) + the piece's number (4 bytes, both big-endian), and
``meta/snapshot`` names the latest one: CBOR ``[index, epoch, digest,
size, pieces]``. The pieces are written first, each its own unsynced write
(`stage`), by the thread below when this node took the snapshot; then one
atomic batch (`commit`, on the loop, in order with the log's other writes)
puts the name, deletes the log's entries behind it and every older
snapshot's pieces. The write-ahead log keeps writes in order, so after a
crash a name is never there without its pieces, and the digest is checked
at load anyway. Pieces of a snapshot never named (a crash, or a snapshot
installed from the leader meanwhile) go with the next one's batch. One
value of 100 MB was a second of the loop in RocksDB and 400 ms in CBOR
(bench/meta_snapshot.py); a piece is a few milliseconds, and the thread
lets the loop run between two.

**Taking one** (`SnapshotTaker`): the core hands over an immutable view
(`TakeSnapshot`); one thread encodes it (metalog/snapshot.py,
`encode_view`, in pieces), stages its bytes, and hands the `Snapshot`
back to the loop, which gives it to the core (`MetaLog.snapshot_taken`);
the core's `PersistSnapshot` then commits it.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from queue import SimpleQueue
from typing import Any

import cbor2
import structlog

from shoal.metalog.snapshot import Snapshot, TakeSnapshot, encode_view, from_wire
from shoal.storage.engine import Engine

log = structlog.get_logger("shoal")

NAME = b"meta/snapshot"
_DATA = b"meta/snapdata/"
PIECE_BYTES = 256 << 10


def _prefix(index: int) -> bytes:
    return _DATA + index.to_bytes(8, "big")


def stage(engine: Engine, snapshot: Snapshot, closed: Callable[[], bool] | None = None) -> None:
    """Write `snapshot`'s bytes in pieces, unsynced, not yet named (any
    thread; `closed`: checked before each piece, True stops).

    Raises:
        OSError: the database is closed, or a write failed.
    """
    data, prefix = snapshot.data, _prefix(snapshot.index)
    view = memoryview(data)
    for n, at in enumerate(range(0, len(data), PIECE_BYTES)):
        if closed is not None and closed():
            raise OSError("the data directory is closed")
        piece = bytes(view[at : at + PIECE_BYTES])
        engine.local_batch([(prefix + n.to_bytes(4, "big"), piece)], [])


def commit(engine: Engine, snapshot: Snapshot, drop_log: tuple[bytes, bytes]) -> None:
    """Name `snapshot` (staged) the latest, and delete the log's entries in
    `drop_log` ([begin, end)) and every older snapshot's pieces: one
    atomic, unsynced write."""
    pieces = -(-len(snapshot.data) // PIECE_BYTES)
    name = cbor2.dumps([snapshot.index, snapshot.epoch, snapshot.digest, len(snapshot.data),
                        pieces])  # fmt: skip
    engine.local_batch([(NAME, name)], [], (drop_log, (_DATA, _prefix(snapshot.index))))


def load(engine: Engine) -> Snapshot | None:
    """The latest snapshot, its digest checked (None: none).

    Raises:
        ValueError: it is damaged, or a piece is missing.
    """
    raw = engine.local_get(NAME)
    if raw is None:
        return None
    head = cbor2.loads(raw)
    if type(head) is list and len(head) == 4:  # a whole value, as stored before pieces
        return from_wire(head)
    if type(head) is not list or len(head) != 5:
        raise ValueError("not a snapshot")
    index, epoch, dig, size, pieces = head
    if type(index) is not int or type(size) is not int or type(pieces) is not int:
        raise ValueError("not a snapshot")
    prefix = _prefix(index)
    found = engine.local_scan(prefix)
    data = b"".join(value for _, value in found)
    if len(found) != pieces or len(data) != size:
        raise ValueError("snapshot pieces missing")
    return from_wire([index, epoch, data, dig])  # its digest checked, and that it is a state


class SnapshotTaker:
    """Encodes and stages the snapshots the metadata log takes, on one
    thread (started with the first), and hands each back to the loop."""

    def __init__(self, loop: asyncio.AbstractEventLoop,
                 stage_snapshot: Callable[[Snapshot], None],
                 taken: Callable[[Snapshot | None], None]) -> None:  # fmt: skip
        """Args:
        loop: where `taken` is called.
        stage_snapshot: writes a snapshot's pieces (`DataDir.stage_snapshot`).
        taken: called on the loop with each snapshot encoded and staged
            (None: it failed, logged).
        """
        self._loop = loop
        self._stage = stage_snapshot
        self._taken = taken
        self._jobs: SimpleQueue[TakeSnapshot | None] = SimpleQueue()
        self._worker: threading.Thread | None = None
        self.taken = 0
        self.last_s = 0.0  # how long the last one took, on the thread

    def take(self, view: TakeSnapshot) -> None:
        """Encode and stage `view`'s snapshot; `taken` follows."""
        if self._worker is None:
            self._worker = threading.Thread(target=self._work, name="shoal-snapshot", daemon=True)
            self._worker.start()
        self._jobs.put(view)

    def stop(self) -> None:
        """No more: the thread ends after the snapshot it encodes, if any
        (its pieces are dropped with the database's close)."""
        if self._worker is not None:
            self._jobs.put(None)

    def _work(self) -> None:
        jobs = self._jobs
        while (view := jobs.get()) is not None:
            started = time.monotonic()
            snapshot: Snapshot | None
            try:
                snapshot = encode_view(view)
                self._stage(snapshot)
            except Exception as exc:  # OSError, or rocksdict's plain Exceptions
                snapshot = None
                error: Any = str(exc)
            else:
                error = None
            try:
                self._loop.call_soon_threadsafe(self._done, snapshot, error,
                                                time.monotonic() - started)  # fmt: skip
            except RuntimeError:  # the loop closed: shutting down
                return

    def _done(self, snapshot: Snapshot | None, error: str | None, took: float) -> None:
        self.last_s = took
        if error is not None:
            log.error("metadata log snapshot not stored", error=error)
        else:
            self.taken += 1
        self._taken(snapshot)
