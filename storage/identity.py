"""A node's identity on disk: its node id and the last incarnation it used.

The node id is created once per data directory and identifies the node for
life, so a restarted node is recognised as itself even at a new address. The
incarnation is persisted (synced) before the core may announce it, so a
restart always starts above anything the cluster has seen from this node.

`IdentityStore` is the small interface the agent uses; `FileIdentityStore`
keeps both values in one CBOR file, replaced atomically. (The storage issue
moves this into RocksDB behind the same interface.)
"""

from __future__ import annotations

import fcntl
import os
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Protocol

import cbor2

from daemon.errors import DataDirError


@dataclass(frozen=True, slots=True)
class StoredIdentity:
    """What a previous run left: the node id and last incarnation."""

    node_id: bytes
    incarnation: int


class IdentityStore(Protocol):
    """Where a node keeps its id and incarnation between runs."""

    def load(self) -> StoredIdentity:
        """The stored identity, created on first use."""

    def save_incarnation(self, incarnation: int) -> None:
        """Make `incarnation` durable before returning."""


class FileIdentityStore:
    """`IdentityStore` in `<data_dir>/identity.cbor`, with a lock file so that
    two agents never share one data directory."""

    def __init__(self, data_dir: Path) -> None:
        self.path = data_dir / "identity.cbor"
        self._node_id = b""
        try:
            data_dir.mkdir(parents=True, exist_ok=True)
            self._lock: IO[bytes] = open(data_dir / "LOCK", "wb")
        except OSError as exc:
            raise DataDirError(f"data_dir: cannot use {data_dir}: {exc.strerror}") from None
        try:
            fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            self._lock.close()
            raise DataDirError(f"data_dir: {data_dir} is in use by another shoal agent") from None

    def load(self) -> StoredIdentity:
        """Read the identity, creating a fresh node id the first time."""
        try:
            raw = cbor2.loads(self.path.read_bytes())
            node_id, incarnation = raw["node_id"], raw["incarnation"]
            if not (isinstance(node_id, bytes) and len(node_id) == 16):
                raise ValueError("node_id")
            if not (isinstance(incarnation, int) and incarnation >= 0):
                raise ValueError("incarnation")
        except FileNotFoundError:
            node_id, incarnation = os.urandom(16), 0
            self._node_id = node_id
            self.save_incarnation(0)
        except (OSError, ValueError, KeyError, TypeError, cbor2.CBORDecodeError) as exc:
            raise DataDirError(f"data_dir: {self.path} is damaged ({exc}); move it away") from None
        self._node_id = node_id
        return StoredIdentity(node_id, incarnation)

    def save_incarnation(self, incarnation: int) -> None:
        """Write and fsync a new file, then rename it over the old one."""
        tmp = self.path.with_suffix(".tmp")
        data = cbor2.dumps({"node_id": self._node_id, "incarnation": incarnation})
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)
        dir_fd = os.open(self.path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)

    def close(self) -> None:
        """Release the data directory."""
        self._lock.close()
