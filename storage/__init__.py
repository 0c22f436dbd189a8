"""Local state: node identity today; RocksDB records and anti-entropy next."""

from storage.identity import FileIdentityStore, IdentityStore, StoredIdentity

__all__ = ["FileIdentityStore", "IdentityStore", "StoredIdentity"]
