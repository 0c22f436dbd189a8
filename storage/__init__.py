"""Local state: the data directory, replicated records, anti-entropy."""

from storage.antientropy import AntiEntropy, SyncConfig
from storage.identity import DataDir, StoredIdentity
from storage.records import Record
from storage.store import MemoryStore, RecordStore, Replica

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
