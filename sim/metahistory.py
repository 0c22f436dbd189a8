"""What a metadata history says beyond one key's search: pruning, revision order.

`check_meta` is the checker for shoal's metadata log: `prepare` (timed-out
operations that cannot matter out, seen ones ended where they were seen),
`check_revisions` (what per-key checking cannot see: acknowledged revisions
are global, unique and in real-time order across keys), then
`linearizability.check` with `RestoreModel` (`MetaModel` with sessions,
sim/sessionmodel.py, and online restores, sim/restoremodel.py), key by key
(the keys transactions join, together). The model and the
reasoning behind each rule are in metamodel.py's docstring and below.
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections.abc import Callable, Sequence

from shoal.sim.linearizability import CheckResult, Operation, Verdict, check
from shoal.sim.metamodel import (
    UNREAD,
    Conflict,
    Delete,
    Get,
    NotApplied,
    Put,
    Read,
    Txn,
    TxnDone,
    Value,
    Written,
)
from shoal.sim.restoremodel import Restore, RestoreModel
from shoal.sim.sessionmodel import End


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

    A timed-out transaction's put of a value no read of its key returned
    and no compare of the key names (nor orders: `<`, `>` on values) gets
    the value `UNREAD` (`_unread_txns`): a state holding it and one holding
    the value differ in nothing any operation of the history can observe.
    Timed-out transactions of one kind (a client's retries, a workload's
    transfers) are then equal, and the search takes equal ones in call
    order (linearization.py) where it would try every subset of them.

    The operations on a key a transaction touches are only dropped when
    they certainly did nothing (not applied, a timed-out read), as are
    transactions that touch no key: a transaction's compares and gets see
    values and revisions the rules above do not account for. So are the
    operations on a key written under a session (sim/sessionmodel.py), and
    sessions' ends are all kept: a timed-out put under a session that nobody
    saw may still be what its session's end deleted.

    Restores (sim/restoremodel.py) are all kept. Each is a writer of the
    values it restores (a read of one may have seen the restore, not a
    timed-out put of the same value), and its revision, where it restored
    a value, is explained.
    """
    by_key: dict[str, list[int]] = {}
    restores: list[Operation] = []
    whole: set[str] = set()  # keys whose operations are kept but for no-ops
    kept: dict[int, Operation] = {}
    for index, op in enumerate(history):
        if isinstance(op.input, Txn):
            whole.update(op.input.keys)
            if op.input.keys and not isinstance(op.output, NotApplied):
                kept[index] = op
            continue
        if isinstance(op.input, End):
            whole.update(op.input.keys)
            kept[index] = op
            continue
        if isinstance(op.input, Restore):
            restores.append(op)
            kept[index] = op
            continue
        assert isinstance(op.input, Get | Put | Delete), op.input
        if isinstance(op.input, Put) and op.input.session:
            whole.add(op.input.key)
        by_key.setdefault(op.input.key, []).append(index)
    for key, indices in by_key.items():
        if key in whole:
            kept.update(
                (i, history[i])
                for i in indices
                if not (
                    isinstance(history[i].output, NotApplied)
                    or (history[i].output is None and isinstance(history[i].input, Get))
                )
            )
            continue
        kept.update(_prepare_key([history[i] for i in indices], indices, key, restores))
    return _unread_txns([kept[i] for i in sorted(kept)])


def _unread_txns(ops: list[Operation]) -> list[Operation]:
    """The timed-out transactions' puts of values nobody can tell apart given `UNREAD`.

    A value is told apart on a key by a read returning it (a get's or a
    transaction's), by a compare naming it, and by any ordering compare of
    the key's values; a put of one that none of these can see is
    relabelled (`prepare`'s docstring).
    """
    seen: set[tuple[str, object]] = set()
    ordered: set[str] = set()
    for op in ops:
        if isinstance(op.output, Read):
            assert isinstance(op.input, Get | Put | Delete)
            seen.add((op.input.key, op.output.value))
        if not isinstance(op.input, Txn):
            continue
        for c in op.input.compares:
            if c.target == "value":
                seen.add((c.key, c.operand))
                if c.op not in ("=", "!="):
                    ordered.add(c.key)
        if isinstance(op.output, TxnDone):
            branch = op.input.success if op.output.succeeded else op.input.failure
            seen.update((o.key, r.value) for o, r in zip(branch, op.output.results, strict=True)
                        if isinstance(r, Read))  # fmt: skip

    def blind(o: Get | Put | Delete) -> Get | Put | Delete:
        if isinstance(o, Put) and o.key not in ordered and (o.key, o.value) not in seen:
            return Put(o.key, UNREAD, o.cas, o.session)
        return o

    out = []
    for op in ops:
        if isinstance(op.input, Txn) and op.output is None:
            txn = op.input
            txn = Txn(txn.compares, tuple(map(blind, txn.success)), tuple(map(blind, txn.failure)))
            op = Operation(op.client, op.call_at, op.return_at, txn, None)
        out.append(op)
    return out


def _prepare_key(ops: list[Operation], indices: list[int], key: str,
                 restores: list[Operation]) -> dict[int, Operation]:  # fmt: skip
    """`prepare` for one key's operations (at these positions in the history)."""
    facts = _KeyFacts(ops, key, restores)
    kept = {}
    for index, op in zip(indices, ops, strict=True):
        settled = facts.settle(op)
        if settled is not None:
            kept[index] = settled
    return kept


class _KeyFacts:
    """What one key's history says about its timed-out puts."""

    def __init__(self, ops: list[Operation], key: str, restores: list[Operation]) -> None:
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
        for op in restores:
            assert isinstance(op.input, Restore)
            restored = op.input.value(key)
            if restored is not None and op.input.intact:
                self.writers[restored] = self.writers.get(restored, 0) + 1
                if isinstance(op.output, Written):
                    explained.add(op.output.revision)
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
    """Check a metadata history: `prepare`, then `linearizability.check` with `RestoreModel`.

    The operations in the result are the prepared ones (a timed-out put a
    read saw returns at that read's return), and the explanation's `#n`
    counts positions in the prepared history.
    """
    problems = check_revisions(history)
    if problems:
        text = "revisions out of order across keys:\n" + "\n".join(problems[:5])
        return CheckResult(Verdict.ILLEGAL, 0, 0, explanation=text)
    prepared = prepare(history)
    model = RestoreModel.for_history(prepared)
    return check(prepared, model, max_steps=max_steps, clock=clock, timeout_s=timeout_s)


def check_revisions(history: Sequence[Operation]) -> list[str]:
    """Acknowledged puts against the global revision order, across keys.

    Revisions are given in commit order, once each: two puts acknowledged
    at one revision, or a put called after another returned but
    acknowledged at a lower revision, cannot both be true (a put is its own
    transaction here), and so is a committed transaction's or restore's. Deletes are
    left out: deleting an absent key answers with a revision that is not
    its own.

    Returns:
        One line per problem found, empty if none.
    """
    puts = sorted(
        (
            (op.return_at, op.output.revision, op)
            for op in history
            if (
                (isinstance(op.input, Put) and isinstance(op.output, Written))
                or isinstance(op.output, TxnDone)
                or (isinstance(op.input, Restore) and isinstance(op.output, Written))
            )
            and op.return_at is not None
        ),
        key=lambda put: (put[0], put[1]),
    )
    problems = []
    by_revision: dict[int, Operation] = {}
    for _, revision, op in puts:
        other = by_revision.setdefault(revision, op)
        if other is not op:
            problems.append(f"revision {revision} acknowledged twice: {_line(other)}; {_line(op)}")
    ends = [at for at, _, _ in puts]
    highest: list[tuple[int, Operation]] = []  # the highest revision returned so far, and whose
    for _, revision, op in puts:
        highest.append(
            max(highest[-1], (revision, op), key=lambda h: h[0]) if highest else (revision, op)
        )
    for _, revision, op in puts:
        i = bisect.bisect_left(ends, op.call_at)  # returned strictly before the call
        if i and highest[i - 1][0] > revision:
            problems.append(f"{_line(highest[i - 1][1])} returned before {_line(op)} was called")
    return problems


def _line(op: Operation) -> str:
    """An operation in a few words."""
    what = RestoreModel().describe(op.input, op.output)
    return f"client {op.client!r} [{op.call_at:g}, {op.return_at:g}] {what}"
