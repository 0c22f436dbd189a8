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
see are violations visible only across keys (two keys' revisions out of
real-time order).

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

Transactions are not modelled yet: a transaction over several keys is not a
single-object operation, so Herlihy & Wing's locality does not cover it and
per-key checking could only check each key's part on its own (sound, but
blind to a transaction applied on one key and not on another). Until the
metadata log's transaction API settles, a client records a transaction's
per-key effects as separate operations only if it wants that weaker check.
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass

from shoal.sim.linearizability import CheckResult, Operation, check

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


def prepare(history: Sequence[Operation]) -> list[Operation]:
    """The history with what cannot matter taken out, for a faster search.

    - An operation that certainly did not take effect (`NotApplied`), and a
      timed-out read, constrain nothing: dropped.
    - A timed-out put whose value no read of its key returned is dropped,
      when no revision it could have had was seen after its call. A
      revision seen (reported by a read or a conflict, or named by a cas)
      is explained if it is 0, one a put's `Written` returned, or one a
      read returned beside the value of a timed-out put; the put could have
      had an unexplained one if it was seen by an operation that had not
      returned before the put's call, and is above every revision
      acknowledged to a put that returned before that call. If the put
      took effect, nobody saw it: no read returned its value, and its
      revision, different from every other on the key, was never reported
      nor used as a cas; the next write that took effect on the key was
      unconditional (a cas would have had to name it), and the timed-out
      writes in between that did nothing can move to the end. So the
      history without it is linearizable if the one with it is (reads do
      not return the version it changed).
    - A timed-out put kept that no read saw gets the value `UNREAD`.
    - A timed-out put whose value (written by no other put of the key) a
      read returned took effect before that read returned: its return is
      set to the earliest such return (etcd's robustness tests do both).

    Timed-out deletes are kept as they are: an absent key's reads do not
    say which delete they saw.
    """
    by_key: dict[str, list[int]] = {}
    for index, op in enumerate(history):
        assert isinstance(op.input, Get | Put | Delete), op.input
        by_key.setdefault(op.input.key, []).append(index)
    kept: dict[int, Operation] = {}
    for indices in by_key.values():
        kept.update(_prepare_key([history[i] for i in indices], indices))
    return [kept[i] for i in sorted(kept)]


def _prepare_key(ops: list[Operation], indices: list[int]) -> dict[int, Operation]:
    """`prepare` for one key's operations (at these positions in the history)."""
    facts = _KeyFacts(ops)
    kept = {}
    for index, op in zip(indices, ops, strict=True):
        settled = facts.settle(op)
        if settled is not None:
            kept[index] = settled
    return kept


class _KeyFacts:
    """What one key's history says about its timed-out puts."""

    def __init__(self, ops: list[Operation]) -> None:
        self.read_at: dict[Value, float] = {}  # a value -> the earliest return of a read of it
        read_revisions: dict[Value, set[int]] = {}  # a value -> the revisions read with it
        self.writers: dict[Value, int] = {}  # a value -> how many puts wrote it
        explained = {0}
        observed: dict[int, float] = {}  # a revision -> the latest return of an op that saw it
        for op in ops:
            ended_at = math.inf if op.return_at is None else op.return_at
            if isinstance(op.input, Put):
                self.writers[op.input.value] = self.writers.get(op.input.value, 0) + 1
            if isinstance(op.input, Put | Delete) and op.input.cas is not None:
                observed[op.input.cas] = max(observed.get(op.input.cas, ended_at), ended_at)
            match op.output:
                case Written(revision) if isinstance(op.input, Put):
                    explained.add(revision)  # a delete's is never a mod revision
                case Conflict(revision) | Read(_, revision):
                    observed[revision] = max(observed.get(revision, ended_at), ended_at)
            if isinstance(op.output, Read) and op.output.value is not None:
                value = op.output.value
                read_revisions.setdefault(value, set()).add(op.output.mod_revision)
                self.read_at[value] = min(self.read_at.get(value, math.inf), ended_at)
        for op in ops:
            if op.output is None and isinstance(op.input, Put):
                explained |= read_revisions.get(op.input.value, set())
        self.unexplained = [(r, at) for r, at in observed.items() if r not in explained]
        self.floor_at = _floors(ops)

    def settle(self, op: Operation) -> Operation | None:
        """The operation as checked, or None if it cannot matter."""
        if isinstance(op.output, NotApplied) or (op.output is None and isinstance(op.input, Get)):
            return None
        if op.output is not None or not isinstance(op.input, Put):
            return op
        seen_at = self.read_at.get(op.input.value)
        if seen_at is None:
            floor = self.floor_at(op.call_at)
            if all(r <= floor or at < op.call_at for r, at in self.unexplained):
                return None
            return Operation(
                op.client, op.call_at, None, Put(op.input.key, UNREAD, op.input.cas), None
            )
        if self.writers[op.input.value] == 1:
            return Operation(op.client, op.call_at, max(seen_at, op.call_at), op.input, None)
        return op


def _floors(ops: list[Operation]) -> Callable[[float], int]:
    """The highest revision acknowledged to a write that returned before a given instant.

    A write called after that has a higher revision, if it took effect.
    """
    written = sorted(
        (op.return_at, op.output.revision)
        for op in ops
        if isinstance(op.output, Written) and op.return_at is not None and isinstance(op.input, Put)
    )
    ends = [at for at, _ in written]
    highest = list(itertools.accumulate((r for _, r in written), max))

    def floor_at(at: float) -> int:
        i = bisect.bisect_left(ends, at)  # strictly before `at`: closed intervals
        return highest[i - 1] if i else 0

    return floor_at


def check_meta(
    history: Sequence[Operation],
    *,
    max_steps: int | None = None,
    clock: Callable[[], float] | None = None,
    timeout_s: float | None = None,
) -> CheckResult:
    """Check a metadata history: `prepare`, then `linearizability.check` with `MetaModel`.

    The operations in the result are the prepared ones: a timed-out put a
    read saw returns at that read's return.
    """
    model = MetaModel()
    prepared = prepare(history)
    return check(prepared, model, max_steps=max_steps, clock=clock, timeout_s=timeout_s)
