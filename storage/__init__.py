"""Local state: the data directory, replicated records, anti-entropy."""

# Registers anti-entropy's message tags with the kernel's codec.
from shoal.storage import messages as _messages  # noqa: F401
from shoal.storage.antientropy import AntiEntropy
from shoal.storage.config import SyncConfig
from shoal.storage.identity import DataDir, StoredIdentity
from shoal.storage.records import Record
from shoal.storage.store import MemoryStore, RecordStore, Replica

__all__ = [
    "AntiEntropy",
    "DataDir",
    "MemoryStore",
    "Record",
    "RecordStore",
    "Replica",
    "StoredIdentity",
    "SyncConfig",
]
