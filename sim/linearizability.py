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
- An indeterminate operation (a timeout: `return_at` None) returns at
  infinity: it may take effect at any instant after its call, and since
  taking effect after everything else is always open to it, "it never took
  effect" is one of the orders tried. The model accepts any output for it
  (output None).

Partitions. The model splits each operation into per-partition parts
(`Model.split`); for a key-value model, one part per key. Linearizability is
local (Herlihy & Wing, Theorem 1): a history of single-object operations is
linearizable if and only if each object's sub-history is, so each key is
searched alone, which turns one exponential search into many small ones. A
part that spans keys (a transaction) breaks locality; the model's docstring
says what per-key checking of it does and does not prove.

Budget. The problem is NP-complete (Gibbons & Korach, 1997), so the check
takes a budget: a number of search steps (deterministic: the same history
gives the same verdict, which a seeded simulation wants), and, optionally,
wall time through an injected clock (this module imports no clock). The
verdict is OK, ILLEGAL (with the key, the longest linearizable prefix found,
the operation that could not take effect before its return and the state it
met), or UNKNOWN when the budget ran out first. An ILLEGAL partition is final
even if others were not finished.

Speed (pure Python 3.11, one core; the command prints the figure):

    .venv/bin/python bench/linearizability.py
    10,000 operations, 50 keys, 10 clients, 5 % timeouts: about 0.2 s
    (see bench/linearizability.py for the run's exact figures)
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Generic, Protocol, TypeVar

S = TypeVar("S", bound=Hashable)

# Wall time is read (through the injected clock) once per this many steps.
_CLOCK_EVERY_STEPS = 4096


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


class Model(Protocol[S]):
    """A sequential specification, split into independent partitions.

    States must be immutable and hashable: the search caches them.
    """

    def split(
        self, input: object, output: object | None
    ) -> Sequence[tuple[Hashable, object, object | None]]:
        """The parts of one operation: (partition key, input, output) each."""
        ...

    def init(self) -> S:
        """The state of a partition before any operation."""
        ...

    def step(self, state: S, input: object, output: object | None) -> S | None:
        """The state after the operation, or None if the output is not legal.

        An output of None means the operation is indeterminate: any outcome
        of it is legal.
        """
        ...

    def describe(self, input: object, output: object | None) -> str:
        """One operation for a person: `put('k', 'v') -> ok(7)`."""
        ...

    def describe_state(self, state: S) -> str:
        """One partition's state for a person."""
        ...


class Verdict(Enum):
    """What the check found."""

    OK = "ok"
    ILLEGAL = "illegal"
    UNKNOWN = "unknown"  # the budget ran out first


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
    budget = _Budget(max_steps, clock, deadline_at)
    parts = _partition(history, model)
    unfinished: Hashable | None = None
    for key, part in parts.items():
        if budget.exhausted():
            unfinished = key if unfinished is None else unfinished
            continue
        outcome = _Search(model, part).run(budget)
        if outcome.verdict is Verdict.ILLEGAL:
            return _explain(history, model, key, part, outcome, budget.steps, len(parts))
        if outcome.verdict is Verdict.UNKNOWN and unfinished is None:
            unfinished = key
    if unfinished is not None:
        text = f"budget ran out after {budget.steps} steps; key {unfinished!r} undecided"
        return CheckResult(Verdict.UNKNOWN, budget.steps, len(parts), unfinished, explanation=text)
    return CheckResult(Verdict.OK, budget.steps, len(parts))


class _Budget:
    """Steps taken over all partitions, and the limits on them."""

    __slots__ = ("steps", "_max_steps", "_clock", "_deadline_at", "_out")

    def __init__(
        self, max_steps: int | None, clock: Callable[[], float] | None, deadline_at: float | None
    ) -> None:
        self.steps = 0
        self._max_steps = max_steps
        self._clock = clock
        self._deadline_at = deadline_at
        self._out = False

    def allowance(self) -> int:
        """How many steps a search may take before it calls `spend` again."""
        if self._max_steps is None:
            return _CLOCK_EVERY_STEPS
        return max(0, min(_CLOCK_EVERY_STEPS, self._max_steps - self.steps))

    def spend(self, steps: int) -> None:
        """Count steps taken; note whether a limit is now reached."""
        self.steps += steps
        if self._max_steps is not None and self.steps >= self._max_steps:
            self._out = True
        if self._clock is not None and self._deadline_at is not None:
            self._out = self._out or self._clock() >= self._deadline_at

    def exhausted(self) -> bool:
        """Whether a limit has been reached."""
        return self._out


@dataclass(frozen=True, slots=True)
class _Part:
    """One partition's sub-history: parts of operations, by position."""

    ops: list[int]  # index into the history
    inputs: list[object]
    outputs: list[object | None]
    call_at: list[float]
    return_at: list[float]


def _partition(history: Sequence[Operation], model: Model[S]) -> dict[Hashable, _Part]:
    """Split every operation into its parts, grouped by partition key in first-seen order."""
    parts: dict[Hashable, _Part] = {}
    for index, op in enumerate(history):
        indeterminate = op.indeterminate
        assert not indeterminate or op.output is None, f"indeterminate with an output: {op}"
        assert indeterminate or op.return_at is None or op.return_at >= op.call_at, op
        for key, input, output in model.split(op.input, op.output):
            part = parts.get(key)
            if part is None:
                part = parts[key] = _Part([], [], [], [], [])
            part.ops.append(index)
            part.inputs.append(input)
            part.outputs.append(output)
            part.call_at.append(op.call_at)
            part.return_at.append(math.inf if op.return_at is None else op.return_at)
    return parts


@dataclass(frozen=True, slots=True)
class _Outcome(Generic[S]):
    """A partition's verdict; on ILLEGAL, where the deepest dead end was."""

    verdict: Verdict
    prefix: tuple[int, ...] = ()  # positions in the part, in linearized order
    stuck: int = -1  # the position whose return ended the deepest prefix
    candidates: tuple[int, ...] = ()
    state: S | None = None


class _Search(Generic[S]):
    """Porcupine's checkSingle over one partition, on arrays, open operations apart.

    The operations that return: nodes 1..2m of a doubly linked list of their
    call and return entries in time order (0 the head, 2m+1 the tail);
    `match[node]` is a call's return node, 0 for a return. The operations
    that never return (open): nodes 1..k of a second list, in call order.
    When the walk of the first list reaches a return entry, the open
    operations called by then are tried, after every operation that
    returns: so the configurations without them fail first, and `_Memo`'s
    subsumption prunes the same ones with them.
    """

    def __init__(self, model: Model[S], part: _Part) -> None:
        self.model = model
        self.inputs, self.outputs = part.inputs, part.outputs
        n = len(part.ops)
        closed = [i for i in range(n) if part.return_at[i] != math.inf]
        entries = sorted(
            [(part.call_at[i], 0, i) for i in closed] + [(part.return_at[i], 1, i) for i in closed]
        )
        self.tail = len(entries) + 1
        self.op, self.match = [-1] * (self.tail + 1), [0] * (self.tail + 1)
        self.at = [0.0] + [at for at, _, _ in entries] + [math.inf]
        return_node = {i: node for node, (_, kind, i) in enumerate(entries, 1) if kind == 1}
        for node, (_, kind, i) in enumerate(entries, start=1):
            self.op[node] = i
            self.match[node] = return_node[i] if kind == 0 else 0
        self.nxt = list(range(1, self.tail + 1)) + [self.tail]
        self.prv = [0] + list(range(0, self.tail))
        opened = sorted((part.call_at[i], i) for i in range(n) if part.return_at[i] == math.inf)
        self.open_tail = len(opened) + 1
        self.open_op = [-1] + [i for _, i in opened] + [-1]
        self.open_at = [0.0] + [at for at, _ in opened] + [math.inf]
        self.open_nxt = list(range(1, self.open_tail + 1)) + [self.open_tail]
        self.open_prv = [0] + list(range(0, self.open_tail))
        self.open_mask = sum(1 << i for _, i in opened)
        self.twin = self._twins()
        self.open_in = [node != 0 for node in range(self.open_tail + 1)]  # not lifted

    def _twins(self) -> list[int]:
        """Each open node's closest earlier one with the same input and output (0: none).

        Of two such operations, the earlier-called may stand in for the later
        anywhere the later may go, so the search uses twins in call order.
        """
        last: dict[tuple[object, object], int] = {}
        twin = [0] * (self.open_tail + 1)
        for node in range(1, self.open_tail):
            i = self.open_op[node]
            try:
                key = (self.inputs[i], self.outputs[i])
                twin[node] = last.get(key, 0)
                last[key] = node
            except TypeError:  # unhashable: no twins
                continue
        return twin

    def _lift(self, node: int) -> None:
        """Take a call and its return out of the list."""
        nxt, prv = self.nxt, self.prv
        ret = self.match[node]
        nxt[prv[node]] = nxt[node]
        prv[nxt[node]] = prv[node]
        nxt[prv[ret]] = nxt[ret]
        prv[nxt[ret]] = prv[ret]

    def _unlift(self, node: int) -> None:
        """Put a lifted call and its return back, in reverse order of `_lift`."""
        nxt, prv = self.nxt, self.prv
        ret = self.match[node]
        nxt[prv[ret]] = ret
        prv[nxt[ret]] = ret
        nxt[prv[node]] = node
        prv[nxt[node]] = node

    def run(self, budget: _Budget) -> _Outcome[S]:
        """Search until the list is empty (OK), exhausted (ILLEGAL) or out of budget."""
        nxt, match, op, at = self.nxt, self.match, self.op, self.at
        open_nxt, open_op, open_at = self.open_nxt, self.open_op, self.open_at
        walk = _Walk[S](self.model.init(), _Memo[S](self.open_mask))
        node, ret = nxt[0], 0  # ret: the return entry the open operations are tried before
        allowance, taken = budget.allowance(), 0
        while nxt[0] != self.tail:
            if taken >= allowance:
                budget.spend(taken)
                taken, allowance = 0, budget.allowance()
                if budget.exhausted():
                    return _Outcome(Verdict.UNKNOWN)
            taken += 1
            if not ret and match[node]:
                if self._take(walk, op[node], node, 0):
                    self._lift(node)
                    node = nxt[0]
                else:
                    node = nxt[node]
            elif not ret:
                node, ret = open_nxt[0], node
            elif node != self.open_tail and open_at[node] <= at[ret]:
                if not self.open_in[self.twin[node]] and self._take(walk, open_op[node], node, ret):
                    self._open_lift(node)
                    node, ret = nxt[0], 0
                else:
                    node = open_nxt[node]
            else:
                if walk.best is None or len(walk.stack) > len(walk.best.prefix):
                    walk.best = self._dead_end(ret, walk)
                if not walk.stack:
                    budget.spend(taken)
                    return walk.best
                node, ret = self._back(walk)
        budget.spend(taken)
        return _Outcome(Verdict.OK)

    def _take(self, walk: _Walk[S], i: int, node: int, ret: int) -> bool:
        """Linearize operation i next, if legal and not searched before.

        An open operation that would change nothing here is not taken: at the
        end, where it may always go, it changes nothing either.
        """
        after = self.model.step(walk.state, self.inputs[i], self.outputs[i])
        linearized = walk.linearized | (1 << i)
        if after is None or (ret and after == walk.state):
            return False
        if not walk.memo.fresh(linearized, after):
            return False
        walk.stack.append((node, ret, walk.state, walk.chain))
        walk.state, walk.linearized, walk.chain = after, linearized, (i, walk.chain)
        return True

    def _back(self, walk: _Walk[S]) -> tuple[int, int]:
        """Undo the last operation linearized; where the walk goes on from."""
        walk.memo.fail(walk.linearized, walk.state)
        node, ret, walk.state, walk.chain = walk.stack.pop()
        if not ret:
            walk.linearized ^= 1 << self.op[node]
            self._unlift(node)
            return self.nxt[node], 0
        walk.linearized ^= 1 << self.open_op[node]
        self.open_nxt[self.open_prv[node]] = node
        self.open_prv[self.open_nxt[node]] = node
        self.open_in[node] = True
        return self.open_nxt[node], ret

    def _open_lift(self, node: int) -> None:
        """Take an open operation out of its list."""
        self.open_nxt[self.open_prv[node]] = self.open_nxt[node]
        self.open_prv[self.open_nxt[node]] = self.open_prv[node]
        self.open_in[node] = False

    def _dead_end(self, ret: int, walk: _Walk[S]) -> _Outcome[S]:
        """The prefix ending here, the operation whose return ended it, the candidates."""
        prefix: list[int] = []
        chain = walk.chain
        while chain is not None:
            assert isinstance(chain, tuple)
            prefix.append(chain[0])
            chain = chain[1]
        prefix.reverse()
        candidates = []
        entry = self.nxt[0]
        while entry != ret:
            if self.match[entry]:
                candidates.append(self.op[entry])
            entry = self.nxt[entry]
        entry = self.open_nxt[0]
        while entry != self.open_tail and self.open_at[entry] <= self.at[ret]:
            candidates.append(self.open_op[entry])
            entry = self.open_nxt[entry]
        stuck = self.op[ret]
        return _Outcome(Verdict.ILLEGAL, tuple(prefix), stuck, tuple(candidates), walk.state)


class _Walk(Generic[S]):
    """The search's position: the state, what is linearized, how it got there."""

    __slots__ = ("state", "linearized", "chain", "stack", "memo", "best")

    def __init__(self, state: S, memo: _Memo[S]) -> None:
        self.state = state
        self.linearized = 0
        self.chain: object = None  # the prefix as a persistent list: (position, rest)
        # (node, the return entry if an open operation's, state before, chain before)
        self.stack: list[tuple[int, int, S, object]] = []
        self.memo = memo
        self.best: _Outcome[S] | None = None


class _Memo(Generic[S]):
    """Lowe's cache of configurations seen, and subsumption by failed ones.

    A configuration is the set of operations linearized and the state. One
    seen before has been searched already (it cannot be an ancestor: the set
    only grows along a path). Subsumption: a configuration that failed
    (every way on from it was tried) fails again with the same state, the
    same operations that return and more of those that never do: any way on
    from the second, followed by those extra operations at the end (where
    they may always go, with any outcome), would have been a way on from the
    first. This keeps timed-out writes from multiplying the search.
    """

    __slots__ = ("_seen", "_failed", "_open_mask")

    def __init__(self, open_mask: int) -> None:
        self._seen: set[tuple[int, S]] = set()
        # (linearized operations that return, state) -> those that never return, per failure
        self._failed: dict[tuple[int, S], list[int]] = {}
        self._open_mask = open_mask

    def fresh(self, linearized: int, state: S) -> bool:
        """Whether a configuration is worth searching; it counts as seen from now on."""
        key = (linearized, state)
        if key in self._seen:
            return False
        if self._open_mask:
            failures = self._failed.get((linearized & ~self._open_mask, state))
            if failures is not None:
                mine = linearized & self._open_mask
                if any(not (used & ~mine) for used in failures):
                    return False
        self._seen.add(key)
        return True

    def fail(self, linearized: int, state: S) -> None:
        """Note that every way on from a configuration failed."""
        if self._open_mask:
            key = (linearized & ~self._open_mask, state)
            self._failed.setdefault(key, []).append(linearized & self._open_mask)


def _explain(
    history: Sequence[Operation],
    model: Model[S],
    key: Hashable,
    part: _Part,
    outcome: _Outcome[S],
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
