"""Local state: replicated records, anti-entropy, the history log's schema.

(The agent's data directory is `shoal.daemon.disk.datadir`.)"""

# Registers anti-entropy's message tags with the kernel's codec.
from shoal.storage import messages as _messages  # noqa: F401
from shoal.storage.antientropy import AntiEntropy
from shoal.storage.config import SyncConfig
from shoal.storage.records import Record
from shoal.storage.store import MemoryStore, RecordStore, Replica

__all__ = [
    "AntiEntropy",
    "MemoryStore",
    "Record",
    "RecordStore",
    "Replica",
    "SyncConfig",
]
