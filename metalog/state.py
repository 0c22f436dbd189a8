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

A transaction (`MetaTxn`, etcd's Txn) is one entry, so one revision: its
compares are evaluated against the state before it, then either its
success or its failure operations (puts, deletes, gets; no `cas` inside)
run in order, each seeing the ones before it, every write at the entry's
revision. Its result (`TxnApplied`) says which branch ran and holds one
item per operation of that branch.

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


class MetaGet(msgspec.Struct, frozen=True):
    """Inside a transaction only: the key as the transaction has it so far."""

    key: bytes


# What a compare looks at, and how (etcd's Compare: target and result).
TARGET_VALUE, TARGET_VERSION, TARGET_CREATE, TARGET_MOD = 0, 1, 2, 3
CMP_EQUAL, CMP_NOT_EQUAL, CMP_LESS, CMP_GREATER = 0, 1, 2, 3


class Compare(msgspec.Struct, frozen=True):
    """`key`'s `target` compared (`cmp`) with `value` (TARGET_VALUE) or
    `number` (a version or a revision). An absent key has version, create
    and mod revision 0, and no value: a compare of its value is false,
    whatever `cmp` (etcd's rule). Absence is `create_revision = 0`."""

    key: bytes
    target: int
    cmp: int
    number: int = 0
    value: bytes = b""


TxnOp = MetaPut | MetaDelete | MetaGet


class MetaTxn(msgspec.Struct, frozen=True):
    """If every compare holds, run `success`, else `failure`; atomically."""

    compares: tuple[Compare, ...]
    success: tuple[TxnOp, ...]
    failure: tuple[TxnOp, ...] = ()


# A transaction's limits (Consul's 64 operations; compares count too), and
# on the bytes of its keys and values together (etcd's request limit is
# 1.5 MiB). Each key and value is limited as a put's is (messages.py).
MAX_TXN_OPS = 64
MAX_TXN_BYTES = 1024 * 1024


def txn_bytes(txn: MetaTxn) -> int:
    """The bytes of a transaction's keys and values together."""
    total = sum(len(c.key) + len(c.value) for c in txn.compares)
    for op in (*txn.success, *txn.failure):
        total += len(op.key) + (len(op.value) if isinstance(op, MetaPut) else 0)
    return total


class NoOp(msgspec.Struct, frozen=True):
    """What a new controller appends first: committing an entry of its own
    epoch commits everything before it (Raft §5.4.2)."""


class VoterSet(msgspec.Struct, frozen=True):
    """A change of the voters, decided by the log (election/controller.py,
    "Voter changes"): the configuration (lineage, version, sorted voter
    names, their data directories' ids or none) the controller moves to
    once this entry is committed. It changes no key; like a `NoOp` it takes
    a revision. The fields are the election's `VoterConfig`'s, spelled out
    here because the cores import one another only through the kernel.

    `recovery` (issue 39) is the configuration's recovery count: every
    change after a `shoal recover` carries it on. The first entry with a new
    count is the recovery's audit record, written by `shoal recover` into
    the log of the survivor whose log became the base (election/recovery.py)."""

    lineage: bytes
    version: int
    voters: tuple[str, ...]
    ids: tuple[bytes, ...] = ()
    recovery: int = 0


MetaOp = MetaPut | MetaDelete | NoOp | MetaTxn | VoterSet


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


class TxnApplied(msgspec.Struct, frozen=True):
    """A transaction applied at `revision`: `succeeded` (its compares all
    held: the success branch ran) and one item per operation of the branch
    that ran: a get's key (None: absent); a delete's key as it was, without
    its value (None: there was nothing to delete); None for a put."""

    revision: int
    succeeded: bool
    results: tuple[KeyState | None, ...]


Result = Applied | Conflict | Duplicate | TxnApplied
Change = tuple[int, bytes, KeyState | None]
"""A key changed at a revision: (revision, key, its state after; None: deleted)."""

# Proposals remembered per origin, to skip copies: far more than one agent
# has in flight (its answers time out after seconds).
_SEEN_PER_ORIGIN = 4096


class MetaState:
    """The keys at `revision` (the index of the last applied entry)."""

    # A deliberate bug, set only by the test that shows the swarm's checker
    # catches it (tests/sim/test_meta_mutations.py): "txn_ignores_compares"
    # (a transaction runs its success branch whatever its compares say).
    mutation: str | None = None

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
            case MetaTxn():
                return self._txn(index, op)
        return Applied(index)

    def _txn(self, index: int, txn: MetaTxn) -> TxnApplied:
        keys = self.keys
        held = all(compare_holds(keys.get(c.key), c) for c in txn.compares)
        if MetaState.mutation == "txn_ignores_compares":
            held = True
        results: list[KeyState | None] = []
        for op in txn.success if held else txn.failure:
            current = keys.get(op.key)
            match op:
                case MetaGet():
                    results.append(current)
                case MetaPut(key, value):
                    keys[key] = (KeyState(value, index, index, 1) if current is None else
                                 KeyState(value, current.create_revision, index,
                                          current.version + 1))  # fmt: skip
                    self._changed(index, key, keys[key])
                    results.append(None)
                case MetaDelete(key):
                    if current is not None:
                        del keys[key]
                        self._changed(index, key, None)
                        current = KeyState(b"", current.create_revision, current.mod_revision,
                                           current.version)  # fmt: skip
                    results.append(current)
        return TxnApplied(index, held, tuple(results))

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


def compare_holds(held: KeyState | None, c: Compare) -> bool:
    """Whether compare `c` holds for a key in state `held` (None: absent)."""
    if c.target == TARGET_VALUE:
        if held is None:
            return False
        ours: bytes | int = held.value
        theirs: bytes | int = c.value
    elif held is None:
        ours, theirs = 0, c.number
    else:
        ours = (held.version, held.create_revision, held.mod_revision)[c.target - 1]
        theirs = c.number
    if c.cmp == CMP_EQUAL:
        return ours == theirs
    if c.cmp == CMP_NOT_EQUAL:
        return ours != theirs
    if c.cmp == CMP_LESS:
        return ours < theirs  # type: ignore[operator]
    return ours > theirs  # type: ignore[operator]
