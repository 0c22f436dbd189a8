"""The metadata log's key-value model, per key, for the linearizability checker.

Theory of operation. The model is etcd's as shoal's metadata API exposes it
(issue 37): every committed write has a global revision; a key's state is
its value (None: absent), its mod revision and its version (writes since it
was created). Operations and their outputs:

- `Get(key)` -> `Read(value, mod_revision)`; an absent key reads
  `Read(None, 0)`.
- `Put(key, value, cas)` and `Delete(key, cas)` -> `Written(revision)` or
  `Conflict(mod_revision)`, the key's current mod revision (0: absent).
  `cas=R` applies only if the key's mod revision is R; `cas=0` only if the
  key is absent; `cas=None` always.
- `NotApplied()` for any of them: the write certainly did not take effect
  (503 not appended, 4xx bad input). Legal anywhere, changes nothing.
- Output None: indeterminate (504, a timeout): see below.

Per key, not global. Revisions are global, so one key's history cannot
know which revisions other keys used. The checker therefore only requires,
per key, that a successful write's revision be greater than the key's
current mod revision, and the key's mod revision becomes that revision. A
read must return exactly the value and mod revision of the state. This is
a relaxation of the global model (every globally linearizable history
passes it), so an ILLEGAL verdict is always a real violation; what it cannot
see are violations visible only across keys. `metahistory.check_revisions`
checks the simplest of those apart (two keys' acknowledged revisions equal,
or out of real-time order); no others are checked.

Indeterminate writes. A timed-out write may have taken effect at any instant
after its call, or never. "Never" needs nothing from the model: the search
may always place the write after every other operation of the key, where
it changes nothing anyone saw (Porcupine's return-at-infinity). So the model
gives a timed-out write one outcome, "took effect" (when its cas can match),
with a revision nobody was told. The state then holds a lower bound instead
of an exact mod revision: `exact` False and `mod_revision` the least value
the unknown revision can have (one more than the revision it overwrote).
What happens to the bound:

- a read pins it: the read's mod revision must be at least the bound, and
  becomes the exact revision (the first observation is the revision);
- a successful write needs a revision above the unknown one; one that is at
  least the bound exists exactly when the write's revision is above the
  bound, so the rule is the same as for an exact state: `revision >
  mod_revision`;
- a CAS with `cas=R`: with an exact state it matches iff R is the revision;
  with a bound it can match iff R is at least the bound, and matching pins
  the unknown revision to R. A timed-out CAS that cannot match changes
  nothing. A conflict pins the revision to the one it reports, which must
  be at least the bound and differ from R;
- another timed-out write over a revision not known keeps the bound where
  it is, though its revision is at least one more: a relaxation, so that
  the search, which may try runs of timed-out writes in many orders, finds
  them ending in the same state (its cache then prunes them). An
  acknowledged revision is still checked exactly against what was known.

Every branch keeps only necessary conditions, so the relaxation stays
sound. A delete of an absent key creates no revision for it (etcd's delete
of a missing key deletes nothing), so its `Written` revision is not
checked. The state holds no version: no output reports one, and two
orders that differ only in it must meet in the search's cache (a
transaction's compare on the version would bring it back).

Transactions (`Txn`, etcd's). A transaction spans keys, so per-key
partitions are not valid for it: `MetaModel.for_history` puts every key a
history's transactions touch, with the keys transactions share with them
(union-find), into one partition, whose state holds each of its keys'
states (`Group`; the operations on one key of it step that key's state as
above). A transaction with a known outcome (`TxnDone`) must find each of
its compares true if it succeeded (a compare the state cannot decide, on
an unknown revision or on a version or create revision not tracked, is
allowed either way, and `mod_revision = R` pins an unknown revision to R),
and not all of them true if it failed; then the branch it names runs in
order, each put and delete a write at the transaction's revision, each get
a read that must match. A timed-out transaction runs the branch its
compares decide; when they cannot decide it runs the success branch. That
is sound when its failure branch writes nothing (a failure is then the
same as never taking effect, which the search always tries): clients that
time out a transaction whose failure branch writes must compare only what
the state decides (values, absence: `create_revision = 0`), as the swarm's
do. `check_revisions` counts a transaction's revision as a put's: it too
takes one revision of its own.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from shoal.sim.txnmodel import Cmp as Cmp  # re-exported: a transaction's parts
from shoal.sim.txnmodel import Txn as Txn
from shoal.sim.txnmodel import TxnDone as TxnDone
from shoal.sim.txnmodel import describe_txn, holds

if TYPE_CHECKING:
    from shoal.sim.linearizability import Operation

Value = str | bytes
# (value or None when absent, mod revision or its lower bound, exact)
MetaState = tuple[Value | None, int, bool]
ABSENT: MetaState = (None, 0, True)
# A partition of several keys (those transactions join): each key's state,
# absent ones left out, sorted by key. Its `init` is ABSENT, read as empty.
Group = tuple[tuple[str, MetaState], ...]
# The value `prepare` gives a timed-out put that no read returned: which one
# it was cannot matter, and timed-out puts that differ only in it are
# interchangeable in the search.
UNREAD = "\x00a value no read returned"


@dataclass(frozen=True, slots=True)
class Get:
    """Read one key."""

    key: str


@dataclass(frozen=True, slots=True)
class Put:
    """Write one key; with `cas`, only if its mod revision is `cas` (0: absent);
    with `session`, owned by it (sim/sessionmodel.py)."""

    key: str
    value: Value
    cas: int | None = None
    session: str = ""


@dataclass(frozen=True, slots=True)
class Delete:
    """Delete one key; with `cas`, only if its mod revision is `cas`."""

    key: str
    cas: int | None = None


@dataclass(frozen=True, slots=True)
class Read:
    """A read's answer: the value (None: absent) and its mod revision (0: absent)."""

    value: Value | None
    mod_revision: int


@dataclass(frozen=True, slots=True)
class Written:
    """A write committed, at this revision."""

    revision: int


@dataclass(frozen=True, slots=True)
class Conflict:
    """A CAS did not match; the key's mod revision then (0: absent)."""

    mod_revision: int


@dataclass(frozen=True, slots=True)
class NotApplied:
    """The write certainly did not take effect."""


class MetaModel:
    """The metadata log's model for `linearizability.check`: one partition
    per key, but one for the keys transactions join (`for_history`)."""

    def __init__(self, groups: dict[str, str] | None = None) -> None:
        self.groups = groups or {}  # a key transactions touch -> its partition

    @classmethod
    def for_history(cls, history: Sequence[Operation]) -> MetaModel:
        """The model with the keys of `history`'s transactions joined."""
        parent: dict[str, str] = {}

        def root(key: str) -> str:
            while parent.setdefault(key, key) != key:
                parent[key] = parent[parent[key]]
                key = parent[key]
            return key

        for op in history:
            if isinstance(op.input, Txn):
                first, *rest = op.input.keys
                for key in rest:
                    parent[root(key)] = root(first)
        return cls({key: root(key) for key in parent})

    def split(
        self, input: object, output: object | None
    ) -> Sequence[tuple[Hashable, object, object | None]]:
        """One part: the operation's key, or its keys' partition."""
        if isinstance(input, Txn):
            return ((self.groups[input.keys[0]], input, output),)
        assert isinstance(input, Get | Put | Delete), input
        return ((self.groups.get(input.key, input.key), input, output),)

    def init(self) -> MetaState:
        """An absent key, no revision yet (an empty `Group`)."""
        return ABSENT

    def step(self, state: Any, input: object, output: object | None) -> Any:
        """The partition's state after the operation, or None if its output is not legal."""
        if isinstance(output, NotApplied):
            return state
        if isinstance(input, Txn):
            return _txn(_keys(state), input, output)
        assert isinstance(input, Get | Put | Delete), input
        if input.key in self.groups:
            keys = _keys(state)
            after = _step_key(keys.get(input.key, ABSENT), input, output)
            if after is None:
                return None
            keys[input.key] = after
            return _group(keys)
        return _step_key(state, input, output)

    def describe(self, input: object, output: object | None) -> str:
        """`put('k', 'v', cas=3) -> ok(7)`, `get('k') -> ('v', 7)`, ... -> unknown."""
        if isinstance(input, Txn):
            return describe_txn(
                input, output, lambda op: self.describe(op, None).removesuffix(" -> unknown")
            )
        match input:
            case Get(key):
                call = f"get({key!r})"
            case Put(key, value, cas, session):
                cas_text = "" if cas is None else f", cas={cas}"
                owner = f", session={session!r}" if session else ""
                call = f"put({key!r}, {value!r}{cas_text}{owner})"
            case Delete(key, cas):
                call = f"delete({key!r}{'' if cas is None else f', cas={cas}'})"
            case _:
                call = repr(input)
        match output:
            case None:
                result = "unknown"
            case Read(read, mod_revision):
                result = f"({read!r}, {mod_revision})"
            case Written(revision):
                result = f"ok({revision})"
            case Conflict(mod_revision):
                result = f"conflict({mod_revision})"
            case _:
                result = repr(output)
        return f"{call} -> {result}"

    def describe_state(self, state: Any) -> str:
        """`'v' at revision 7`, `absent`, `'v' at an unknown revision >= 8`;
        a group's keys each so, `{'a': absent, ...}`."""
        if type(state[-1]) is not bool:  # a MetaState ends with `exact`
            return "{" + ", ".join(f"{k!r}: {_describe_key(s)}" for k, s in state) + "}"
        return _describe_key(state)


def _describe_key(state: MetaState) -> str:
    value, mod_revision, exact = state
    if value is None:
        return "absent"
    at = f"revision {mod_revision}" if exact else f"an unknown revision >= {mod_revision}"
    return f"{value!r} at {at}"


def _step_key(
    state: MetaState, input: Get | Put | Delete, output: object | None
) -> MetaState | None:
    """One key's state after a single-key operation (None: not legal)."""
    if isinstance(input, Get):
        return _read(state, output)
    if isinstance(input, Put):
        return _write(state, input.value, input.cas, output)
    if state[0] is None and input.cas in (None, 0):
        # Nothing to delete: no revision, no change, any answer but a conflict.
        return None if isinstance(output, Conflict) else state
    return _write(state, None, input.cas, output)


def _keys(state: Any) -> dict[str, MetaState]:
    """A group's states by key (ABSENT, the init: none yet)."""
    return {} if state == ABSENT else dict(state)


def _group(keys: dict[str, MetaState]) -> Any:
    """The hashable state of a group: absent keys left out, sorted."""
    items = tuple(sorted((k, s) for k, s in keys.items() if s != ABSENT))
    return items or ABSENT


def _txn(keys: dict[str, MetaState], txn: Txn, output: object | None) -> Any:
    """A group's state after a transaction, or None if its output is not legal."""
    held = [holds(keys.get(c.key, ABSENT), c) for c in txn.compares]
    if output is None:
        succeeded = False not in held  # undecided: the success branch (module docstring)
        revision = None
    else:
        if not isinstance(output, TxnDone):
            return None
        succeeded, revision = output.succeeded, output.revision
        if (False in held) if succeeded else all(h is True for h in held):
            return None
        if succeeded:
            for c in txn.compares:  # an unknown revision the compare names is pinned
                value, mod_revision, exact = keys.get(c.key, ABSENT)
                if c.target == "mod" and c.op == "=" and not exact and value is not None:
                    keys[c.key] = (value, int(c.operand), True)
    branch = txn.success if succeeded else txn.failure
    results = (None,) * len(branch) if output is None else output.results
    if len(results) != len(branch):
        return None
    written = None if revision is None else Written(revision)
    for op, result in zip(branch, results, strict=True):
        if isinstance(op, Get) and output is None:
            continue  # a timed-out transaction's get says nothing
        if isinstance(op, Get) and not isinstance(result, Read):
            return None
        state = keys.get(op.key, ABSENT)
        after = _read(state, result) if isinstance(op, Get) else _step_key(state, op, written)
        if after is None:
            return None
        keys[op.key] = after
    return _group(keys)


def _read(state: MetaState, output: object | None) -> MetaState | None:
    """A read returns exactly the state; its revision pins an unknown one."""
    if output is None:
        return state
    if not isinstance(output, Read):
        return None
    value, mod_revision, exact = state
    if output.value != value:
        return None
    if value is None:
        return state if output.mod_revision == 0 else None
    if output.mod_revision == mod_revision:
        return state if exact else (value, mod_revision, True)
    if not exact and output.mod_revision > mod_revision:
        return (value, output.mod_revision, True)
    return None


def _seen_revision(state: MetaState, cas: int | None) -> int | None:
    """The mod revision a write with this cas sees when it applies, None if it cannot apply.

    For an unknown revision that is a value it may have: the bound, or the
    cas it is pinned to.
    """
    value, mod_revision, exact = state
    if cas is None:
        return mod_revision
    if value is None:
        return mod_revision if cas == 0 else None
    if cas == mod_revision or (not exact and cas > mod_revision):
        return cas
    return None


def _write(
    state: MetaState, new_value: Value | None, cas: int | None, output: object | None
) -> MetaState | None:
    """A put (new_value) or a delete (None) of a key with this state."""
    seen = _seen_revision(state, cas)
    if output is None:
        if seen is None:
            return state
        # Over a revision not known, the bound stays (see the module docstring).
        return (new_value, seen if cas is None and not state[2] else seen + 1, False)
    if isinstance(output, Conflict):
        return _conflict(state, cas, output.mod_revision)
    if not isinstance(output, Written) or seen is None or output.revision <= seen:
        return None
    return (new_value, output.revision, True)


def _conflict(state: MetaState, cas: int | None, reported: int) -> MetaState | None:
    """A CAS refused: legal iff the key's revision is `reported` and differs from cas."""
    value, mod_revision, exact = state
    if cas is None or cas == reported:
        return None
    if value is None:
        return state if reported == 0 else None
    if reported == mod_revision or (not exact and reported > mod_revision):
        return (value, reported, True)
    return None
