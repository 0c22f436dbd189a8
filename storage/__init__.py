"""Local state: the data directory, replicated records, anti-entropy."""

from shoal.storage.antientropy import AntiEntropy, SyncConfig
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
