"""The metadata state machine: what committed entries do to the keys.

etcd's model (mvcc): every committed entry has a revision, its log index
(so revisions only grow; a no-op entry takes one too, which leaves gaps, as
etcd's compactions do); each key holds its value, `create_revision` (the
revision that created it since it last did not exist), `mod_revision` (the
last that changed it) and `version` (changes since its creation). A write
may carry `cas=R`: it applies only if the key's mod revision is R, where
R = 0 means "only if absent" (Consul's `?cas=`, etcd's compare on
`mod_revision`); otherwise it changes nothing and its result is a conflict
naming the current mod revision.

Every node applies the same committed entries in the same order, so every
node's state at a revision is the same. Pure: a dict, no IO (the agent
keeps it in RocksDB through the same interface, later).
"""

from __future__ import annotations

import msgspec


class MetaPut(msgspec.Struct, frozen=True):
    """Set `key` to `value`; with `cas`, only if its mod revision is `cas`."""

    key: bytes
    value: bytes
    cas: int | None = None


class MetaDelete(msgspec.Struct, frozen=True):
    """Delete `key`; with `cas`, only if its mod revision is `cas`."""

    key: bytes
    cas: int | None = None


class NoOp(msgspec.Struct, frozen=True):
    """What a new controller appends first: committing an entry of its own
    epoch commits everything before it (Raft §5.4.2)."""


MetaOp = MetaPut | MetaDelete | NoOp


class KeyState(msgspec.Struct, frozen=True):
    """One key as the state machine holds it."""

    value: bytes
    create_revision: int
    mod_revision: int
    version: int


class Applied(msgspec.Struct, frozen=True):
    """A write that took effect at `revision`."""

    revision: int


class Conflict(msgspec.Struct, frozen=True):
    """A write whose `cas` did not match: the key's mod revision is
    `current` (0: absent). Nothing changed."""

    current: int


class Duplicate(msgspec.Struct, frozen=True):
    """A copy of a proposal applied before: skipped, nothing changed."""


Result = Applied | Conflict | Duplicate
Change = tuple[int, bytes, KeyState | None]
"""A key changed at a revision: (revision, key, its state after; None: deleted)."""

# Proposals remembered per origin, to skip copies: far more than one agent
# has in flight (its answers time out after seconds).
_SEEN_PER_ORIGIN = 4096


class MetaState:
    """The keys at `revision` (the index of the last applied entry)."""

    def __init__(self) -> None:
        self.keys: dict[bytes, KeyState] = {}
        self.revision = 0
        # origin -> its proposals applied lately, oldest first (insertion order).
        self._seen: dict[str, dict[int, None]] = {}
        # What watches follow (daemon/metawatch.py): None (off: the simulator,
        # a state just restored), or every key change applied since the driver
        # last took them, in order: (revision, key, its state after; None:
        # deleted). An op that changes keys records each with `_changed`; a
        # restore from a snapshot sets it back to None (the watches restart).
        self.changes: list[Change] | None = None

    def get(self, key: bytes) -> KeyState | None:
        """The key's state, or None when absent."""
        return self.keys.get(key)

    def apply(self, index: int, op: MetaOp, origin: str = "", pid: int = 0) -> Result:
        """Apply the committed entry at `index`; entries come in order. A
        proposal (`origin`, `pid`) applied before is skipped."""
        assert index > self.revision, f"entry {index} applied after {self.revision}"
        self.revision = index
        if origin and self._seen_before(origin, pid):
            return Duplicate()
        match op:
            case MetaPut(key, value, cas):
                current = self.keys.get(key)
                if cas is not None and cas != (0 if current is None else current.mod_revision):
                    return Conflict(0 if current is None else current.mod_revision)
                if current is None:
                    self.keys[key] = KeyState(value, index, index, 1)
                else:
                    self.keys[key] = KeyState(value, current.create_revision, index,
                                              current.version + 1)  # fmt: skip
                self._changed(index, key, self.keys[key])
                return Applied(index)
            case MetaDelete(key, cas):
                current = self.keys.get(key)
                if cas is not None and cas != (0 if current is None else current.mod_revision):
                    return Conflict(0 if current is None else current.mod_revision)
                if self.keys.pop(key, None) is not None:
                    self._changed(index, key, None)
                return Applied(index)
        return Applied(index)

    def _changed(self, revision: int, key: bytes, now: KeyState | None) -> None:
        """Record a key change for the watches, when they follow."""
        if self.changes is not None:
            self.changes.append((revision, key, now))

    def _seen_before(self, origin: str, pid: int) -> bool:
        seen = self._seen.setdefault(origin, {})
        if pid in seen:
            return True
        seen[pid] = None
        if len(seen) > _SEEN_PER_ORIGIN:
            del seen[next(iter(seen))]
        return False
