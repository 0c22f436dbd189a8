"""A node's data directory: its format, its lock, its database, its identity.

The node id is created once per data directory and identifies the node for
life, so a restarted node is recognised as itself even at a new address. The
incarnation is persisted (synced) before the core may announce it, so a
restart always starts above anything the cluster has seen from this node.
Both live in the database's ``local`` column family (`storage.engine`).

`DataDir` first reads `<data_dir>/FORMAT` (daemon/disk/dataformat.py) and
refuses a newer format, a damaged or foreign record, or another cluster's
directory before it creates or writes anything there. Then it takes an
exclusive `flock` on `<data_dir>/LOCK`, so that a second agent pointed at
the same directory gets a one-line error naming the problem instead of
RocksDB's lock message, opens the database and migrates an older format
forward (version 0.1's `identity.cbor` is imported by that migration, so an
upgraded node keeps its id).
"""

from __future__ import annotations

import fcntl
import json
import threading
import time
from pathlib import Path
from typing import IO, Any

import cbor2
import msgspec

from shoal.daemon.disk import dataformat
from shoal.daemon.disk.dataformat import INCARNATION, NODE_ID
from shoal.kernel.errors import DataDirError
from shoal.kernel.sealing import next_run
from shoal.storage.engine import Engine
from shoal.storage.records import NODE_ID_BYTES

_RUN = b"run"
TAGS_FILE = "tags.json"  # the tags `shoal tags` set; they win over the config's
_ELECTION = b"election"
# The metadata log's entries (metalog/): this prefix + the index, 8 bytes
# big-endian, so that a scan reads them in order; its latest snapshot
# (metalog/snapshot.py; stored in pieces: daemon/disk/snapshots.py), whose
# write deletes the entries behind it.
_LOG = b"meta/log/"


class StoredIdentity(msgspec.Struct, frozen=True):
    """What a previous run left: the node id and last incarnation."""

    node_id: bytes
    incarnation: int


class DataDir:
    """The locked data directory and its open database."""

    def __init__(self, path: Path, depth: int, cluster: str) -> None:
        """Check the directory's format, lock it, open its database and
        migrate it to this build's format.

        Args:
            path: the data directory (created if missing).
            depth: the Merkle tree depth (for the record store's index).
            cluster: the cluster this agent is configured for.

        Raises:
            DataDirError: not usable, in use by another agent, of a newer
                format or another cluster (then left untouched).
        """
        self.path = path
        self._log_last = 0  # the metadata log's last index on disk (load_log, save_log)
        # The snapshot the taker's thread staged last (its index and digest),
        # and the lock that keeps its writes from a closing database.
        self._staged: tuple[int, bytes] | None = None
        self._closing = threading.Lock()
        self._closed = False
        dataformat.check_format(path, cluster)  # before anything is created
        try:
            path.mkdir(parents=True, exist_ok=True)
            self._lock: IO[bytes] = open(path / "LOCK", "wb")
        except OSError as exc:
            raise DataDirError(f"data_dir: cannot use {path}: {exc.strerror}") from None
        try:
            fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            self._lock.close()
            raise DataDirError(f"data_dir: {path} is in use by another shoal agent") from None
        try:
            # Again under the lock: another agent may have written it since.
            found = dataformat.check_format(path, cluster)
            self.engine = Engine(path / "db", depth)
        except DataDirError:
            self._lock.close()
            raise
        try:
            self.migrated_from = dataformat.migrate(path, self.engine, cluster, found)
        except DataDirError:
            self.close()
            raise

    def load_identity(self) -> StoredIdentity:
        """The stored identity (made by the format's first step)."""
        node_id = self.engine.local_get(NODE_ID)
        raw_inc = self.engine.local_get(INCARNATION)
        if (node_id is None or len(node_id) != NODE_ID_BYTES
                or raw_inc is None or len(raw_inc) != 8):  # fmt: skip
            raise DataDirError(f"data_dir: the identity in {self.path} is damaged; move it away")
        return StoredIdentity(node_id, int.from_bytes(raw_inc, "big"))

    def next_run(self) -> int:
        """This start's run number, above every earlier one and durable
        (fsync) before it is used: every sealed packet is bound to it
        (kernel/sealing.py)."""
        raw = self.engine.local_get(_RUN)
        stored = int.from_bytes(raw, "big") if raw is not None and len(raw) == 8 else 0
        run = next_run(stored, time.time_ns() // 1000)
        self.engine.local_put(_RUN, run.to_bytes(8, "big"))
        return run

    def load_tags(self) -> Any:
        """The tags `shoal tags` set (they win over the configured ones), or
        None if it never ran here.

        Raises:
            DataDirError: the file is damaged.
        """
        path = self.path / TAGS_FILE
        try:
            raw = json.loads(path.read_text())
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            raise DataDirError(f"data_dir: {path} is unreadable ({exc}); "
                               "fix or remove it") from None  # fmt: skip
        if not isinstance(raw, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in raw.items()
        ):  # fmt: skip
            raise DataDirError(f"data_dir: {path} must be a JSON object of strings")
        return tuple(sorted(raw.items()))

    def save_tags(self, tags: Any) -> None:
        """Write the tags `shoal tags` set, atomically and durably."""
        dataformat.write_durably(self.path / TAGS_FILE, json.dumps(dict(tags), sort_keys=True))

    def save_incarnation(self, incarnation: int) -> None:
        """Make `incarnation` durable (fsync) before returning."""
        self.engine.local_put(INCARNATION, incarnation.to_bytes(8, "big"))

    def load_election(self) -> tuple[int, Any]:
        """(highest granted epoch, voter configuration or None) from the last run."""
        from shoal.election.voters import VoterConfig

        raw = self.engine.local_get(_ELECTION)
        if raw is None:
            return 0, None
        try:
            epoch, config = cbor2.loads(raw)
            if config is None:
                return int(epoch), None
            # rest: the voters' ids (issue 37), then the recovery (issue 39)
            lineage, version, voters, *rest = config
            ids = tuple(bytes(i) for i in rest[0]) if rest else ()
            recovery = int(rest[1]) if len(rest) > 1 else 0
            if len(rest) > 2 or (ids and len(ids) != len(voters)) or recovery < 0:
                raise ValueError("voter ids")
            return int(epoch), VoterConfig(bytes(lineage), int(version), tuple(voters), ids,
                                           recovery)  # fmt: skip
        except (ValueError, TypeError, cbor2.CBORDecodeError):
            raise DataDirError(f"data_dir: the election state in {self.path} is damaged; "
                               "move the directory away") from None  # fmt: skip

    def save_election(self, granted_epoch: int, config: Any, sync: bool = True) -> None:
        """Store the granted epoch and voter configuration; durable (fsync)
        on return unless `sync` is False, then at the engine's next sync."""
        enc = None if config is None else [config.lineage, config.version, list(config.voters)]
        if enc is not None and (config.ids or config.recovery):
            enc.append(list(config.ids))  # a build before voter ids never reads it (level 2)
        if enc is not None and config.recovery:
            enc.append(config.recovery)  # written only by `shoal recover` and after it
        self.engine.local_put(_ELECTION, cbor2.dumps([granted_epoch, enc]), sync)

    def load_log(self) -> tuple[Any, ...]:
        """The metadata log's entries a previous run left durable, in order.

        Raises:
            DataDirError: an entry is damaged, or one is missing.
        """
        from shoal.kernel.codec import DecodeError
        from shoal.metalog.messages import entry_from_wire

        entries = []
        try:
            for _, raw in self.engine.local_scan(_LOG):
                entries.append(entry_from_wire(cbor2.loads(raw)))
        except (ValueError, TypeError, cbor2.CBORDecodeError, DecodeError):
            raise DataDirError(f"data_dir: the metadata log in {self.path} is damaged; "
                               "move the directory away") from None  # fmt: skip
        snapshot = self.load_snapshot()
        first = 1 if not entries else entries[0].index
        if (any(e.index != first + i for i, e in enumerate(entries))
                or first > (1 if snapshot is None else snapshot.index + 1)):  # fmt: skip
            raise DataDirError(f"data_dir: the metadata log in {self.path} has a gap; "
                               "move the directory away")  # fmt: skip
        self._log_last = entries[-1].index if entries else 0
        return tuple(entries)

    def load_snapshot(self) -> Any:
        """The metadata log's latest snapshot (a `Snapshot`), or None.

        Raises:
            DataDirError: it is damaged (its checksum does not match).
        """
        from shoal.daemon.disk import snapshots

        try:
            return snapshots.load(self.engine)
        except (ValueError, TypeError, cbor2.CBORDecodeError):
            raise DataDirError(f"data_dir: the metadata log's snapshot in {self.path} is "
                               "damaged; move the directory away") from None  # fmt: skip

    def stage_snapshot(self, snapshot: Any) -> None:
        """Write a `Snapshot`'s bytes, not yet named the latest (from the
        snapshot thread: daemon/disk/snapshots.py).

        Raises:
            OSError: the directory is closed, or a write failed.
        """
        from shoal.daemon.disk import snapshots

        def closed() -> bool:
            return self._closed

        with self._closing:  # per piece would be finer; a close waits for the rest
            snapshots.stage(self.engine, snapshot, closed)
        self._staged = (snapshot.index, snapshot.digest)

    def save_snapshot(self, write: Any) -> None:
        """Store `write.snapshot` (its bytes staged already, or now: one
        installed from the leader) and delete the log's entries up to
        `write.drop_through` (a `PersistSnapshot`): the naming is one
        atomic, unsynced write with range deletes, so the log's size
        stays bounded."""
        from shoal.daemon.disk import snapshots

        snapshot = write.snapshot
        if self._staged != (snapshot.index, snapshot.digest):
            snapshots.stage(self.engine, snapshot)
        end = _LOG + (write.drop_through + 1).to_bytes(8, "big")
        snapshots.commit(self.engine, snapshot, (_LOG, end))
        if write.drop_through >= self._log_last:
            self._log_last = write.snapshot.index  # none left: appends follow the snapshot

    def save_log(self, write: Any) -> None:
        """Replace the log from `write.from_index` on with `write.entries`
        (a `PersistLog`), unsynced and atomic: the group commit's next sync
        makes it durable."""
        from shoal.metalog.messages import entry_to_wire

        puts = [(_LOG + e.index.to_bytes(8, "big"), cbor2.dumps(entry_to_wire(e)))
                for e in write.entries]  # fmt: skip
        end = write.from_index + len(write.entries)  # the first index no longer held
        deletes = [_LOG + i.to_bytes(8, "big") for i in range(end, self._log_last + 1)]
        self.engine.local_batch(puts, deletes)
        self._log_last = end - 1

    def close(self) -> None:
        """Close the database and release the directory."""
        self._closed = True
        with self._closing:  # a snapshot's pieces being written stop first
            self.engine.close()
        self._lock.close()
