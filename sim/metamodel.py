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

Transactions are out of scope for now. Split by key (each key's compares
and the operations on it of the branch taken, at the transaction's one
revision), a transaction with a known outcome could be checked soundly:
every linearizable history passes, since each key's part takes effect at the
transaction's one instant. But the check would be weaker than it looks. It
does not see a transaction applied on one key and not on another, because
each key's part may be placed at its own instant; a failed transaction's
compares cannot be checked on any one key (the one that failed may be
another's); a timed-out transaction whose compares read another key has an
outcome no single key can decide, which a deterministic per-key model cannot
hold (it needs a set of states per key, Porcupine's NondeterministicModel);
and compares on the version or the create revision would put both back in
the state, and in the cache. Until the log's transaction API settles, a
client that wants the weaker check records a transaction's effects on each
key as separate operations, and leaves them out of `check_revisions` (one
revision on several keys is legal for a transaction, not for puts).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass

Value = str | bytes
# (value or None when absent, mod revision or its lower bound, exact)
MetaState = tuple[Value | None, int, bool]
ABSENT: MetaState = (None, 0, True)
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
    """Write one key; with `cas`, only if its mod revision is `cas` (0: absent)."""

    key: str
    value: Value
    cas: int | None = None


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
    """The metadata log's model for `linearizability.check`, one partition per key."""

    def split(
        self, input: object, output: object | None
    ) -> Sequence[tuple[Hashable, object, object | None]]:
        """One part: the operation's own key."""
        assert isinstance(input, Get | Put | Delete), input
        return ((input.key, input, output),)

    def init(self) -> MetaState:
        """An absent key, no revision yet."""
        return ABSENT

    def step(self, state: MetaState, input: object, output: object | None) -> MetaState | None:
        """The key's state after the operation, or None if its output is not legal."""
        if isinstance(output, NotApplied):
            return state
        if isinstance(input, Get):
            return _read(state, output)
        if isinstance(input, Put):
            return _write(state, input.value, input.cas, output)
        assert isinstance(input, Delete), input
        if state[0] is None and input.cas in (None, 0):
            # Nothing to delete: no revision, no change, any answer but a conflict.
            return None if isinstance(output, Conflict) else state
        return _write(state, None, input.cas, output)

    def describe(self, input: object, output: object | None) -> str:
        """`put('k', 'v', cas=3) -> ok(7)`, `get('k') -> ('v', 7)`, ... -> unknown."""
        match input:
            case Get(key):
                call = f"get({key!r})"
            case Put(key, value, cas):
                call = f"put({key!r}, {value!r}{'' if cas is None else f', cas={cas}'})"
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

    def describe_state(self, state: MetaState) -> str:
        """`'v' at revision 7`, `absent`, `'v' at an unknown revision >= 8`."""
        value, mod_revision, exact = state
        if value is None:
            return "absent"
        at = f"revision {mod_revision}" if exact else f"an unknown revision >= {mod_revision}"
        return f"{value!r} at {at}"


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
