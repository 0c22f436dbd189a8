"""Linearizability checking: the Wing & Gong search with Lowe's cache, one partition at a time.

Theory of operation. A history is a list of operations, each with a call and a
return on one true timeline (the simulator's virtual time, or one host's
monotonic clock for real agents). It is linearizable if every operation can
be given one instant between its call and its return at which it takes
effect, such that the sequence of operations in that order is legal for the
sequential model (Herlihy & Wing, 1990). Intervals are closed: two operations
whose return and call share an instant are concurrent (Porcupine's reading).

The search is Wing & Gong's (1993), with Lowe's memoization (2017), in the
shape of Porcupine's `checkSingle` (anishathalye/porcupine, checker.go):

- The calls and returns of one partition, sorted by time (a call before a
  return at the same instant), form a doubly linked list. Walking it from the
  head, a call entry is a candidate to take effect next; a return entry means
  its operation should already have taken effect, so the current prefix is a
  dead end and the search backtracks.
- Taking a candidate: the model steps from the current state with the
  operation's input and output; if that is legal and the pair (set of
  operations taken, new state) has not been seen before, the call and its
  return are lifted out of the list and the walk restarts at the head.
  Otherwise the walk moves to the next entry.
- Lowe's cache is that set of pairs: two prefixes that took the same
  operations and reached the same state have the same futures, so the second
  is never explored. The set of operations is a Python int used as a bitset.
- An indeterminate operation (a timeout: `return_at` None, "open") returns
  at infinity: it may take effect at any instant after its call, and since
  taking effect after everything else is always open to it, "it never took
  effect" is one of the orders tried. The model accepts any outcome for it
  (output None), so its step never fails.

Open operations are what makes the search blow up: each stays a candidate to
the end, so a dead end may be retried with every subset of them in every
place. Four rules, each sound because an open operation may always be moved
to the end of a linearization, where it changes nothing anyone saw
(linearization.py):

- They are kept in a list of their own and tried only when the walk meets a
  return entry, after every operation that returns: an open operation goes
  in only to unblock a dead end.
- One whose step would leave the state as it is is not taken there (at the
  end it does as little).
- Of two with the same input and output, the earlier-called may stand in
  for the later anywhere, so they are taken in call order.
- Subsumption: a configuration met (searched, or being searched) with some
  open operations taken makes the same state with the same operations that
  return and more open ones not worth searching: any way on from it is one
  from the first with fewer open operations (Lowe's cache, widened).

The model may help further: `metahistory.prepare` drops the timed-out writes
no one could have seen, ends the seen ones at the read that saw them, and
gives the values nothing can observe one name (`UNREAD`), so that timed-out
operations that differ only in those are equal, and taken in call order.
Seed 7 of the metadata swarm with sessions and restores (47 timed-out
transactions and a timed-out restore on one group of keys) went from
undecided in 2 and 20 million steps to decided in 4,839 with the names,
2,602 with subsumption by configurations met rather than failed; over
seeds 1 to 200, 327,170 steps in all with the first, 301,619 with both.

Partitions. The model splits each operation into per-partition parts
(`Model.split`); for a key-value model, one part per key. Linearizability is
local (Herlihy & Wing, Theorem 1): a history of single-object operations is
linearizable if and only if each object's sub-history is, so each key is
searched alone, which turns one exponential search into many small ones. An
operation that spans keys (a transaction) is not single-object: the model
puts the keys the history's transactions join into one partition
(`MetaModel.for_history`, union-find), where locality holds again.

Budget. The problem is NP-complete (Gibbons & Korach, 1997), so the check
takes a budget: a number of search steps (deterministic: the same history
gives the same verdict, which a seeded simulation wants), and, optionally,
wall time through an injected clock (this module imports no clock). The
verdict is OK, ILLEGAL (with the key, the longest linearizable prefix found,
the operation that could not take effect before its return and the state it
met), or UNKNOWN when the budget ran out first. An ILLEGAL partition is final
even if others were not finished.

Speed (pure Python 3.11, one core of a shared 2-core machine, best of 3;
`bench/linearizability.py` prints it, with what `prepare` kept, and the same
history checked without `prepare`):

    .venv/bin/python bench/linearizability.py
    10,000 operations, 50 keys, 10 clients, 5 % timed out (515; prepare
    keeps 97): OK in 10,254 steps, 0.12 to 0.20 s over runs (about 60,000
    operations a second); with stale reads: ILLEGAL in 125 steps, 0.07 to
    0.15 s
    --timeouts 0.2 (2,018 timed out; 507 kept): OK in 0.16 s, unprepared 7 s
    --keys 5 (2,000 operations a key): OK in 1.1 s, unprepared 5.4 s
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass

from shoal.sim.linearization import Budget, Model, Outcome, Part, S, Search, Verdict

__all__ = ["CheckResult", "HistoryRecorder", "Model", "Operation", "Verdict", "check"]


@dataclass(frozen=True, slots=True)
class Operation:
    """One call and its outcome, on one true timeline.

    `return_at` None (or math.inf) marks an indeterminate operation: it may
    have taken effect at any instant after `call_at`, or never; its `output`
    is then None. An output of None with a `return_at` is an outcome not
    known that was settled by then (a timed-out write a later read saw).
    """

    client: int | str
    call_at: float
    return_at: float | None
    input: object
    output: object | None

    @property
    def indeterminate(self) -> bool:
        """Whether the outcome is unknown (the call timed out)."""
        return self.return_at is None or self.return_at == math.inf


@dataclass(frozen=True, slots=True)
class CheckResult:
    """The verdict, and on ILLEGAL where the search got stuck.

    `linearized` is the longest linearizable prefix found for `key`, in its
    order; `stuck` is an operation that had to take effect before its
    return, after that prefix, and could not; `candidates` are every
    operation that could have come next, none of them legal in `state`.
    """

    verdict: Verdict
    steps: int
    partitions: int
    key: Hashable | None = None
    linearized: tuple[Operation, ...] = ()
    stuck: Operation | None = None
    candidates: tuple[Operation, ...] = ()
    state: str = ""
    explanation: str = ""

    @property
    def ok(self) -> bool:
        """Whether the history was found linearizable."""
        return self.verdict is Verdict.OK


class HistoryRecorder:
    """Records the calls and returns of clients into a history.

    A call that neither returned nor was marked unknown when `history()` is
    read is indeterminate (its client crashed or is still waiting).
    """

    def __init__(self) -> None:
        self._calls: list[tuple[int | str, float, object]] = []
        self._returns: dict[int, tuple[float, object]] = {}
        self._unknown: set[int] = set()

    def call(self, client: int | str, input: object, at: float) -> int:
        """Record a call; returns the operation's id."""
        self._calls.append((client, at, input))
        return len(self._calls) - 1

    def returned(self, op_id: int, output: object, at: float) -> None:
        """Record the definite outcome of a call."""
        assert op_id not in self._returns and op_id not in self._unknown, op_id
        assert at >= self._calls[op_id][1], (op_id, at)
        self._returns[op_id] = (at, output)

    def unknown(self, op_id: int) -> None:
        """Record that a call's outcome will never be known (a timeout)."""
        assert op_id not in self._returns, op_id
        self._unknown.add(op_id)

    def __len__(self) -> int:
        return len(self._calls)

    def history(self) -> list[Operation]:
        """Every call so far, as operations in the order of their calls."""
        ops = []
        for op_id, (client, call_at, input) in enumerate(self._calls):
            done = self._returns.get(op_id)
            if done is None:
                ops.append(Operation(client, call_at, None, input, None))
            else:
                ops.append(Operation(client, call_at, done[0], input, done[1]))
        return ops


def check(
    history: Sequence[Operation],
    model: Model[S],
    *,
    max_steps: int | None = None,
    clock: Callable[[], float] | None = None,
    timeout_s: float | None = None,
) -> CheckResult:
    """Check a history for linearizability against a model.

    Args:
        history: the operations, in any order.
        model: the sequential specification and its partitioning.
        max_steps: a budget of search steps over all partitions (None: none).
        clock: monotonic seconds, read now and then when `timeout_s` is set.
        timeout_s: a budget of wall time, measured by `clock`.

    Returns:
        OK, ILLEGAL with the first illegal partition explained, or UNKNOWN if
        a budget ran out before every partition was decided.
    """
    assert (clock is None) == (timeout_s is None), "timeout_s needs a clock, and a clock a timeout"
    deadline_at = None if clock is None or timeout_s is None else clock() + timeout_s
    budget = Budget(max_steps, clock, deadline_at)
    parts = _partition(history, model)
    unfinished: Hashable | None = None
    for key, part in parts.items():
        if budget.exhausted():
            unfinished = key if unfinished is None else unfinished
            continue
        outcome = Search(model, part).run(budget)
        if outcome.verdict is Verdict.ILLEGAL:
            return _explain(history, model, key, part, outcome, budget.steps, len(parts))
        if outcome.verdict is Verdict.UNKNOWN and unfinished is None:
            unfinished = key
    if unfinished is not None:
        text = f"budget ran out after {budget.steps} steps; key {unfinished!r} undecided"
        return CheckResult(Verdict.UNKNOWN, budget.steps, len(parts), unfinished, explanation=text)
    return CheckResult(Verdict.OK, budget.steps, len(parts))


def _partition(history: Sequence[Operation], model: Model[S]) -> dict[Hashable, Part]:
    """Split every operation into its parts, grouped by partition key in first-seen order."""
    parts: dict[Hashable, Part] = {}
    for index, op in enumerate(history):
        indeterminate = op.indeterminate
        assert not indeterminate or op.output is None, f"indeterminate with an output: {op}"
        assert indeterminate or op.return_at is None or op.return_at >= op.call_at, op
        for key, input, output in model.split(op.input, op.output):
            part = parts.get(key)
            if part is None:
                part = parts[key] = Part([], [], [], [], [])
            part.ops.append(index)
            part.inputs.append(input)
            part.outputs.append(output)
            part.call_at.append(op.call_at)
            part.return_at.append(math.inf if op.return_at is None else op.return_at)
    return parts


def _explain(
    history: Sequence[Operation],
    model: Model[S],
    key: Hashable,
    part: Part,
    outcome: Outcome[S],
    steps: int,
    partitions: int,
) -> CheckResult:
    """An ILLEGAL result with the dead end written out for a person."""
    assert outcome.state is not None
    state_text = model.describe_state(outcome.state)

    def line(position: int) -> str:
        op = history[part.ops[position]]
        returned = "never" if op.indeterminate else f"{op.return_at:g}"
        what = model.describe(part.inputs[position], part.outputs[position])
        return f"  #{part.ops[position]} client {op.client!r} [{op.call_at:g}, {returned}] {what}"

    tail = outcome.prefix[-5:]
    text = [
        f"key {key!r} is not linearizable: {len(outcome.prefix)} of {len(part.ops)} operations "
        f"linearize, ending with{'' if len(tail) == len(outcome.prefix) else ' (last 5)'}:",
        *(line(p) for p in tail),
        f"state then: {state_text}; this one had to take effect before its return, and could not:",
        line(outcome.stuck),
        "and no operation that could come next leads to a linearization:",
        *(line(p) for p in outcome.candidates),
    ]
    return CheckResult(
        Verdict.ILLEGAL,
        steps,
        partitions,
        key,
        tuple(history[part.ops[p]] for p in outcome.prefix),
        history[part.ops[outcome.stuck]],
        tuple(history[part.ops[p]] for p in outcome.candidates),
        state_text,
        "\n".join(text),
    )
