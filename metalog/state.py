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

**Sessions** (ZooKeeper's sessions, etcd's leases; docs/metadata.md
"Sessions") are state too: `SessionOpen` opens one (its id chosen by the
proposer), `SessionEnd` ends it and deletes, at that one revision, every
key written under it (`MetaPut(session=...)`: the key's `session` names its
owner until a write without one). A write under a session that is not
open changes nothing: its result is `NoSession`. When a session ends is
the controller's decision (metalog/sessionclock.py); that it ended is this
state's, so every node agrees on it.

Every node applies the same committed entries in the same order, so every
node's state at a revision is the same. Pure: a dict, no IO (the agent
keeps it in RocksDB through the same interface, later).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

import msgspec


class MetaPut(msgspec.Struct, frozen=True):
    """Set `key` to `value`; with `cas`, only if its mod revision is `cas`;
    with `session`, owned by that session (deleted when it ends)."""

    key: bytes
    value: bytes
    cas: int | None = None
    session: bytes = b""


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
    the log of the survivor whose log became the base (node/recovery.py)."""

    lineage: bytes
    version: int
    voters: tuple[str, ...]
    ids: tuple[bytes, ...] = ()
    recovery: int = 0


class MetaRestore(msgspec.Struct, frozen=True):
    """Replace every key with those of a backup (`shoal snapshot restore`):
    `data` is a snapshot's encoded state (metalog/snapshot.py), `digest`
    its sha256. Applied by metalog/restore.py; the dedup memory stays."""

    data: bytes
    digest: bytes


# Why a session ended (`SessionEnd.reason`).
END_CLOSED, END_EXPIRED, END_CHECK = 0, 1, 2
END_REASONS = ("closed", "expired", "check critical")


class SessionOpen(msgspec.Struct, frozen=True):
    """Open session `id` (16 bytes, chosen by the proposer) with a TTL of
    `ttl_ms`; `node` is the agent it was opened on, `checks` that agent's
    health checks whose going critical ends it."""

    id: bytes
    ttl_ms: int
    name: str = ""
    node: str = ""
    checks: tuple[str, ...] = ()


class SessionEnd(msgspec.Struct, frozen=True):
    """End session `id` and delete its keys (`reason`: END_*)."""

    id: bytes
    reason: int = END_CLOSED


MetaOp = (MetaPut | MetaDelete | NoOp | MetaTxn | VoterSet | SessionOpen | SessionEnd
          | MetaRestore)  # fmt: skip


class KeyState(msgspec.Struct, frozen=True):
    """One key as the state machine holds it (`session`: its owner, if any)."""

    value: bytes
    create_revision: int
    mod_revision: int
    version: int
    session: bytes = b""


class SessionInfo(msgspec.Struct, frozen=True):
    """An open session as the state holds it: what opened it, at `revision`."""

    id: bytes
    ttl_ms: int
    name: str
    node: str
    checks: tuple[str, ...]
    revision: int


class Applied(msgspec.Struct, frozen=True):
    """A write that took effect at `revision`."""

    revision: int


class Conflict(msgspec.Struct, frozen=True):
    """A write whose `cas` did not match: the key's mod revision is
    `current` (0: absent). Nothing changed."""

    current: int


class Duplicate(msgspec.Struct, frozen=True):
    """A copy of a proposal applied before: skipped, nothing changed."""


class NoSession(msgspec.Struct, frozen=True):
    """A write under (or the end of) a session that is not open: nothing
    changed."""

    session: bytes


class TxnApplied(msgspec.Struct, frozen=True):
    """A transaction applied at `revision`: `succeeded` (its compares all
    held: the success branch ran) and one item per operation of the branch
    that ran: a get's key (None: absent); a delete's key as it was, without
    its value (None: there was nothing to delete); None for a put."""

    revision: int
    succeeded: bool
    results: tuple[KeyState | None, ...]


Result = Applied | Conflict | Duplicate | TxnApplied | NoSession
Change = tuple[int, bytes, KeyState | None]
"""A key changed at a revision: (revision, key, its state after; None: deleted)."""

# Proposals remembered per origin, to skip copies: far more than one agent
# has in flight (its answers time out after seconds).
_SEEN_PER_ORIGIN = 4096


class MetaState:
    """The keys at `revision` (the index of the last applied entry)."""

    # A deliberate bug, set only by the test that shows the swarm's checker
    # catches it (tests/sim/test_meta_mutations.py): "txn_ignores_compares"
    # (a transaction runs its success branch whatever its compares say), or
    # "end_keeps_keys" (a session's end leaves its keys).
    mutation: str | None = None
    # How a `MetaRestore` applies: metalog/restore.py's `replace_keys`, set
    # when that module loads (it decodes a snapshot, and snapshot.py imports
    # this module, so this one cannot import it; the package's __init__
    # loads it, through metalog/messages.py).
    restorer: ClassVar[Callable[[MetaState, int, MetaRestore], Result] | None] = None

    def __init__(self) -> None:
        self.keys: dict[bytes, KeyState] = {}
        self.revision = 0
        self.sessions: dict[bytes, SessionInfo] = {}
        # session id -> the keys it owns now (derived from `keys`).
        self.owned: dict[bytes, set[bytes]] = {}
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
            case MetaPut(key, value, cas, session):
                if session and session not in self.sessions:
                    return NoSession(session)
                current = self.keys.get(key)
                if cas is not None and cas != (0 if current is None else current.mod_revision):
                    return Conflict(0 if current is None else current.mod_revision)
                self._put(index, key, value, session, current)
                return Applied(index)
            case MetaDelete(key, cas):
                current = self.keys.get(key)
                if cas is not None and cas != (0 if current is None else current.mod_revision):
                    return Conflict(0 if current is None else current.mod_revision)
                if current is not None:
                    self._delete(index, key, current)
                return Applied(index)
            case MetaTxn():
                return self._txn(index, op)
            case MetaRestore():
                assert MetaState.restorer is not None, "shoal.metalog.restore is not loaded"
                return MetaState.restorer(self, index, op)
            case SessionOpen(sid, ttl_ms, name, node, checks):
                if sid not in self.sessions:
                    self.sessions[sid] = SessionInfo(sid, ttl_ms, name, node, checks, index)
                return Applied(index)
            case SessionEnd(sid):
                return self._end(index, sid)
        return Applied(index)

    def _put(self, index: int, key: bytes, value: bytes, session: bytes,
             current: KeyState | None) -> None:  # fmt: skip
        """Set `key` at revision `index`, owned by `session` (b"": none)."""
        if current is None:
            now = KeyState(value, index, index, 1, session)
        else:
            now = KeyState(value, current.create_revision, index, current.version + 1, session)
            if current.session and current.session != session:
                self._disown(current.session, key)
        if session:
            self.owned.setdefault(session, set()).add(key)
        self.keys[key] = now
        self._changed(index, key, now)

    def _delete(self, index: int, key: bytes, current: KeyState) -> None:
        del self.keys[key]
        if current.session:
            self._disown(current.session, key)
        self._changed(index, key, None)

    def _disown(self, session: bytes, key: bytes) -> None:
        keys = self.owned.get(session)
        if keys is not None:
            keys.discard(key)
            if not keys:
                del self.owned[session]

    def _end(self, index: int, sid: bytes) -> Applied | NoSession:
        """End session `sid`: its keys deleted at this revision, in key order."""
        if self.sessions.pop(sid, None) is None:
            return NoSession(sid)
        if MetaState.mutation == "end_keeps_keys":
            return Applied(index)
        for key in sorted(self.owned.pop(sid, ())):
            current = self.keys.pop(key)
            self._changed(index, key, None)
            assert current.session == sid
        return Applied(index)

    def _txn(self, index: int, txn: MetaTxn) -> TxnApplied | NoSession:
        keys = self.keys
        held = all(compare_holds(keys.get(c.key), c) for c in txn.compares)
        if MetaState.mutation == "txn_ignores_compares":
            held = True
        branch = txn.success if held else txn.failure
        for op in branch:  # a put under a session that is not open: nothing runs
            if type(op) is MetaPut and op.session and op.session not in self.sessions:
                return NoSession(op.session)
        results: list[KeyState | None] = []
        for op in branch:
            current = keys.get(op.key)
            match op:
                case MetaGet():
                    results.append(current)
                case MetaPut(key, value, _, session):
                    self._put(index, key, value, session, current)
                    results.append(None)
                case MetaDelete(key):
                    if current is not None:
                        self._delete(index, key, current)
                        current = KeyState(b"", current.create_revision, current.mod_revision,
                                           current.version, current.session)  # fmt: skip
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
