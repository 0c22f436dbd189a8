"""Engine: the node's RocksDB database (through rocksdict); IO.

Nothing else in shoal imports rocksdict. One database per node, in
`<data_dir>/db`, with three column families:

- ``local``: this node's own state, never replicated: its node id, its last
  incarnation, and whatever another core must keep across a crash (the
  election's highest granted epoch). Every write here is synced (WAL fsync)
  before the call returns, because each one backs a promise the node is
  about to make to others (see `kernel.contract.Output`).
- ``records``: the replicated key-value records, key -> `encode_value`.
- ``leaves``: an index, ``leaf (4 bytes, big-endian) + key -> b""``, so
  that the records under a Merkle node are one range scan.

Local writes (`stage`: a client's put or delete, a user event) are not
written one by one: they wait in memory, readable at once through `get`,
and the next `sync()` writes all of them as one WriteBatch and fsyncs the
write-ahead log (`FlushWAL(true)`). The agent's group commit calls `sync`
from its worker thread, back to back while client writes wait
(daemon/disk/commit.py): the thread writes the staged batch (rocksdict
holds the GIL for that short write) and then fsyncs (rocksdict releases
the GIL). So a write costs the loop a dict insert and a batch entry, not a
WAL append of its own (a `write` syscall, which can wait for a running
fsync's page writeback: 3-6 us on average, up to the whole fsync, measured
beside a syncing thread; the batch is written on the syncing thread
itself, so it never waits for another fsync). A merge, a scan or `close`
writes what waits first, so the database never holds an older version
over a newer one, and at most `STAGE_MAX` records wait. Records merged from
peers go in unsynced at once (a memtable insert and a WAL append) and are
not synced on their own: after a crash they come back by anti-entropy.

The database is opened in raw mode: rocksdict would otherwise pickle values,
and nothing a peer sent may ever be unpickled.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, cast

import rocksdict

from shoal.kernel.errors import DataDirError
from shoal.storage.merkle import leaf_of
from shoal.storage.records import Record, decode_value, encode_value

_FAMILIES = ("local", "records", "leaves")

# Memory bounds. An agent's data is small (its own state, a replicated
# key-value set of kilobytes to megabytes), and RocksDB's defaults are sized
# for a database server: a 64 MiB memtable per column family and up to two
# of them (384 MiB for our three families at worst), a 32 MiB block cache,
# unbounded open files. These keep the worst case to tens of MiB; at rest
# the database costs an agent 2-3 MB either way (docs/operations.md, Memory).
WRITE_BUFFER_BYTES = 4 << 20  # one memtable per family; flushed to L0 when full
DB_WRITE_BUFFER_BYTES = 16 << 20  # all memtables together: the flush trigger
BLOCK_CACHE_BYTES = 4 << 20  # one LRU cache shared by the three families
MAX_OPEN_FILES = 256  # table readers kept open (each holds index and filter blocks)
# Staged local writes beyond this are written out (unsynced) at once: a
# group commit holds as many as there are concurrent writers.
STAGE_MAX = 1024


def _family_options(cache: rocksdict.Cache) -> rocksdict.Options:
    opts = rocksdict.Options(raw_mode=True)
    opts.set_write_buffer_size(WRITE_BUFFER_BYTES)
    opts.set_max_write_buffer_number(2)
    table = rocksdict.BlockBasedOptions()
    table.set_block_cache(cache)
    opts.set_block_based_table_factory(table)
    return opts


def _options(cache: rocksdict.Cache) -> rocksdict.Options:
    opts = _family_options(cache)
    opts.create_if_missing(True)
    opts.create_missing_column_families(True)
    opts.set_db_write_buffer_size(DB_WRITE_BUFFER_BYTES)
    opts.set_max_open_files(MAX_OPEN_FILES)
    opts.set_max_file_opening_threads(1)
    return opts


class Engine:
    """One open RocksDB database (module docstring)."""

    def __init__(self, path: Path, depth: int) -> None:
        """Open (creating if needed) the database at `path`.

        Args:
            path: the database directory.
            depth: the Merkle tree depth the leaf index is built for.

        Raises:
            DataDirError: the database cannot be opened (in use, damaged,
                not writable), with the reason.
        """
        self.path = path
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            cache = rocksdict.Cache(BLOCK_CACHE_BYTES)
            families = {name: _family_options(cache) for name in _FAMILIES}
            self._db = rocksdict.Rdict(str(path), _options(cache), column_families=families)
        except OSError as exc:
            raise DataDirError(f"data_dir: cannot use {path.parent}: {exc.strerror}") from None
        except Exception as exc:  # rocksdict raises a bare Exception with RocksDB's status
            raise DataDirError(f"data_dir: cannot open the database {path}: {exc}") from None
        self._synced = rocksdict.WriteOptions()
        self._synced.sync = True
        self._unsynced = rocksdict.WriteOptions()
        self._unsynced.sync = False
        self._local = self._db.get_column_family("local")
        self.records = RocksStore(self, depth)

    def local_get(self, name: bytes) -> bytes | None:
        """A value of this node's own state."""
        value = self._local.get(name)
        return None if value is None else bytes(value)

    def local_put(self, name: bytes, value: bytes, sync: bool = True) -> None:
        """Store a value of this node's own state; fsync it unless `sync` is
        False (then the next `sync()` makes it durable)."""
        self._local.put(name, value, self._synced if sync else self._unsynced)

    def local_scan(self, prefix: bytes) -> list[tuple[bytes, bytes]]:
        """Every (name, value) of this node's own state under `prefix`."""
        out = []
        for name, value in _raw(self._local.items(from_key=prefix)):
            if not name.startswith(prefix):
                break
            out.append((name, value))
        return out

    def local_delete(self, names: list[bytes]) -> None:
        """Forget these names of this node's own state (unsynced)."""
        for name in names:
            self._local.delete(name, self._unsynced)

    def local_batch(self, puts: list[tuple[bytes, bytes]], deletes: list[bytes],
                    ranges: tuple[tuple[bytes, bytes], ...] = ()) -> None:  # fmt: skip
        """Put and delete names of this node's own state in one atomic,
        unsynced WriteBatch (the next `sync()` makes it durable): after a
        crash it is there whole or not at all. `ranges`: [begin, end) spans
        of names deleted too (one range tombstone each)."""
        batch = rocksdict.WriteBatch(raw_mode=True)
        handle = self._db.get_column_family_handle("local")
        for name, value in puts:
            batch.put(name, value, handle)
        for name in deletes:
            batch.delete(name, handle)
        for begin, end in ranges:
            batch.delete_range(begin, end, handle)
        self._db.write(batch, self._unsynced)

    def sync(self) -> None:
        """Make every write so far durable: write the staged records, then
        fsync the write-ahead log (from any thread)."""
        self.records.sync()

    def close(self) -> None:
        """Flush and close; the database can then be reopened."""
        self.records.write_staged()
        self.records.release()
        del self._local
        self._db.flush_wal(True)
        self._db.close()


class RocksStore:
    """`RecordStore` on the ``records`` and ``leaves`` column families."""

    def __init__(self, engine: Engine, depth: int) -> None:
        """A view of `engine`'s records for a tree of `depth`."""
        db = engine._db
        self.depth = depth
        self._db = db
        self._unsynced = engine._unsynced
        self._records = db.get_column_family("records")
        self._leaves = db.get_column_family("leaves")
        self._records_h = db.get_column_family_handle("records")
        self._leaves_h = db.get_column_family_handle("leaves")
        # Local writes not yet in the database (module docstring): `_staged`
        # takes new ones, and `_batch` their puts, built as they come, so the
        # sync thread only hands it to RocksDB (it would wait for the GIL to
        # build it while the loop answers requests). `_writing` is what a
        # sync took and is writing, read by `get` until the database has it.
        # `_lock` orders every database write of records, so an older
        # version never lands last.
        self._staged: dict[bytes, Record] = {}
        self._writing: dict[bytes, Record] = {}
        self._batch = rocksdict.WriteBatch(raw_mode=True)
        self._lock = threading.Lock()

    def release(self) -> None:
        """Drop the column-family views (rocksdict keeps the lock while any
        is alive, so the database could not be reopened)."""
        del self._records, self._leaves, self._records_h, self._leaves_h, self._batch

    def get(self, key: bytes) -> Record | None:
        """The record of `key`, or None."""
        rec = self._staged.get(key)
        if rec is None:
            rec = self._writing.get(key)
            if rec is None:
                raw = self._records.get(key)
                return None if raw is None else decode_value(key, bytes(raw))
        return rec

    def stage(self, rec: Record, leaf: int, stored: bytes) -> None:
        """Keep a local write for the next `sync` (module docstring)."""
        key = rec.key
        index = leaf.to_bytes(4, "big") + key
        with self._lock:
            self._staged[key] = rec
            self._batch.put(key, stored, self._records_h)
            self._batch.put(index, b"", self._leaves_h)
            full = len(self._staged) >= STAGE_MAX
        if full:
            self.write_staged()

    def apply(self, puts: list[Record], deletes: list[bytes]) -> None:
        """One unsynced WriteBatch: the staged records first, then these
        records and their leaf index entries, then the deletes."""
        with self._lock:
            batch = self._take()
            for rec in puts:
                batch.put(rec.key, encode_value(rec), self._records_h)
                batch.put(self._leaf_key(rec.key), b"", self._leaves_h)
            for key in deletes:
                batch.delete(key, self._records_h)
                batch.delete(self._leaf_key(key), self._leaves_h)
            self._db.write(batch, self._unsynced)

    def write_staged(self) -> None:
        """Write the staged records to the database (unsynced)."""
        with self._lock:
            if not self._staged:
                return
            self._writing = self._staged
            self._db.write(self._take(), self._unsynced)
            self._writing = {}

    def _take(self) -> rocksdict.WriteBatch:
        """The staged puts, which start again empty (under `_lock`)."""
        batch = self._batch
        self._staged = {}
        self._batch = rocksdict.WriteBatch(raw_mode=True)
        return batch

    def scan(self, prefix: bytes, after: bytes, limit: int) -> list[Record]:
        """Up to `limit` records with `prefix`, after `after`, in key order."""
        self.write_staged()
        out: list[Record] = []
        start = max(prefix, after)
        for key, raw in _raw(self._records.items(from_key=start)):
            if not key.startswith(prefix) or len(out) >= limit:
                break
            if key > after:
                out.append(decode_value(key, raw))
        return out

    def in_leaves(self, first: int, end: int) -> Iterator[Record]:
        """Records in leaves [first, end), by leaf then key (lazily)."""
        self.write_staged()
        stop = end.to_bytes(4, "big")
        keys = self._leaves.keys(from_key=first.to_bytes(4, "big"))
        for index_key in cast("Iterator[bytes]", keys):
            if index_key >= stop:
                break
            key = index_key[4:]
            raw = self._records.get(key)
            if raw is not None:
                yield decode_value(key, cast(bytes, raw))

    def all(self) -> Iterator[Record]:
        """Every record, in key order."""
        self.write_staged()
        for key, raw in _raw(self._records.items()):
            yield decode_value(key, raw)

    def sync(self) -> None:
        """Write the staged records and fsync the write-ahead log: every
        write staged or applied before the call is then durable."""
        self.write_staged()
        self._db.flush_wal(True)

    def _leaf_key(self, key: bytes) -> bytes:
        return leaf_of(key, self.depth).to_bytes(4, "big") + key


def _raw(items: Iterable[Any]) -> Iterator[tuple[bytes, bytes]]:
    """rocksdict's items typed as what a raw-mode store holds: bytes."""
    return cast("Iterator[tuple[bytes, bytes]]", iter(items))
