"""A node's data directory: its lock, its database, its identity.

The node id is created once per data directory and identifies the node for
life, so a restarted node is recognised as itself even at a new address. The
incarnation is persisted (synced) before the core may announce it, so a
restart always starts above anything the cluster has seen from this node.
Both live in the database's ``local`` column family (`storage.engine`).

`DataDir` takes an exclusive `flock` on `<data_dir>/LOCK` first, so that a
second agent pointed at the same directory gets a one-line error naming the
problem instead of RocksDB's lock message. Version 0.1 kept the identity in
`identity.cbor`; it is imported once and the file renamed
`identity.cbor.imported`, so an upgraded node keeps its id.
"""

from __future__ import annotations

import fcntl
import json
import os
import time
from pathlib import Path
from typing import IO, Any

import cbor2
import msgspec

from shoal.kernel.errors import DataDirError
from shoal.kernel.sealing import next_run
from shoal.storage.engine import Engine

_NODE_ID = b"node_id"
_INCARNATION = b"incarnation"
_RUN = b"run"
TAGS_FILE = "tags.json"  # the tags `shoal tags` set; they win over the config's
_ELECTION = b"election"
NODE_ID_BYTES = 16


class StoredIdentity(msgspec.Struct, frozen=True):
    """What a previous run left: the node id and last incarnation."""

    node_id: bytes
    incarnation: int


class DataDir:
    """The locked data directory and its open database."""

    def __init__(self, path: Path, depth: int) -> None:
        """Lock `path` and open its database.

        Args:
            path: the data directory (created if missing).
            depth: the Merkle tree depth (for the record store's index).

        Raises:
            DataDirError: not usable, or in use by another agent.
        """
        self.path = path
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
            self.engine = Engine(path / "db", depth)
        except DataDirError:
            self._lock.close()
            raise

    def load_identity(self) -> StoredIdentity:
        """The stored identity, created (or imported) on first use."""
        engine = self.engine
        node_id = engine.local_get(_NODE_ID)
        if node_id is None:
            node_id, incarnation = self._legacy_identity()
            engine.local_put(_INCARNATION, incarnation.to_bytes(8, "big"))
            engine.local_put(_NODE_ID, node_id)
            self._retire_legacy()
        raw_inc = engine.local_get(_INCARNATION)
        if len(node_id) != NODE_ID_BYTES or raw_inc is None or len(raw_inc) != 8:
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
        path = self.path / TAGS_FILE
        tmp = path.with_name(TAGS_FILE + ".tmp")
        with open(tmp, "w") as f:
            json.dump(dict(tags), f, sort_keys=True)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)

    def save_incarnation(self, incarnation: int) -> None:
        """Make `incarnation` durable (fsync) before returning."""
        self.engine.local_put(_INCARNATION, incarnation.to_bytes(8, "big"))

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
            lineage, version, voters = config
            return int(epoch), VoterConfig(bytes(lineage), int(version), tuple(voters))
        except (ValueError, TypeError, cbor2.CBORDecodeError):
            raise DataDirError(f"data_dir: the election state in {self.path} is damaged; "
                               "move the directory away") from None  # fmt: skip

    def save_election(self, granted_epoch: int, config: Any, sync: bool = True) -> None:
        """Store the granted epoch and voter configuration; durable (fsync)
        on return unless `sync` is False, then at the engine's next sync."""
        enc = None if config is None else [config.lineage, config.version, list(config.voters)]
        self.engine.local_put(_ELECTION, cbor2.dumps([granted_epoch, enc]), sync)

    def close(self) -> None:
        """Close the database and release the directory."""
        self.engine.close()
        self._lock.close()

    def _legacy_identity(self) -> tuple[bytes, int]:
        legacy = self.path / "identity.cbor"
        try:
            raw = cbor2.loads(legacy.read_bytes())
            node_id, incarnation = raw["node_id"], raw["incarnation"]
            if isinstance(node_id, bytes) and len(node_id) == NODE_ID_BYTES:
                if isinstance(incarnation, int) and incarnation >= 0:
                    return node_id, incarnation
        except FileNotFoundError:
            return os.urandom(NODE_ID_BYTES), 0
        except (OSError, ValueError, KeyError, TypeError, cbor2.CBORDecodeError):
            pass
        raise DataDirError(f"data_dir: {legacy} is damaged; move it away")

    def _retire_legacy(self) -> None:
        legacy = self.path / "identity.cbor"
        if legacy.exists():
            legacy.rename(legacy.with_name("identity.cbor.imported"))
