"""The search for one partition's linearization: Wing & Gong with Lowe's cache.

The theory of operation is linearizability.py's; this module holds the
search itself (Porcupine's checkSingle), its cache and its budget, and the
model protocol it steps.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Generic, Protocol, TypeVar

S = TypeVar("S", bound=Hashable)

# Wall time is read (through the injected clock) once per this many steps.
CLOCK_EVERY_STEPS = 4096
# Configurations kept per (operations that return, state) for subsumption:
# pruning with fewer is still sound, and scanning more cost more than it
# saved (a 10,000-operation history with 2,000 timeouts, not prepared: 52 s
# with no limit, 8 s with no subsumption, when only failed ones were kept;
# kept as seen, 3.4 million steps where failed ones took 6.6, 16 kept 2.9).
_SEEN_KEPT = 8


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

        An output of None means the outcome is not known: any outcome is
        legal, so the step must not return None for it (the search counts
        on placing such an operation last, where it changes nothing seen).
        Inputs and outputs should be hashable: equal timed-out operations
        are then searched once.
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


class Budget:
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
            return CLOCK_EVERY_STEPS
        return max(0, min(CLOCK_EVERY_STEPS, self._max_steps - self.steps))

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
class Part:
    """One partition's sub-history: parts of operations, by position."""

    ops: list[int]  # index into the history
    inputs: list[object]
    outputs: list[object | None]
    call_at: list[float]
    return_at: list[float]


@dataclass(frozen=True, slots=True)
class Outcome(Generic[S]):
    """A partition's verdict; on ILLEGAL, where the deepest dead end was."""

    verdict: Verdict
    prefix: tuple[int, ...] = ()  # positions in the part, in linearized order
    stuck: int = -1  # the position whose return ended the deepest prefix
    candidates: tuple[int, ...] = ()
    state: S | None = None


class Search(Generic[S]):
    """Porcupine's checkSingle over one partition, on arrays, open operations apart.

    The operations that return: nodes 1..2m of a doubly linked list of their
    call and return entries in time order (0 the head, 2m+1 the tail);
    `match[node]` is a call's return node, 0 for a return. The operations
    that never return (open): nodes 1..k of a second list, in call order.
    When the walk of the first list reaches a return entry, the open
    operations called by then are tried, after every operation that
    returns: so the configurations without them are searched first, and
    `_Memo`'s subsumption prunes the same ones with them.
    """

    def __init__(self, model: Model[S], part: Part) -> None:
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

    def run(self, budget: Budget) -> Outcome[S]:
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
                    return Outcome(Verdict.UNKNOWN)
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
        return Outcome(Verdict.OK)

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

    def _dead_end(self, ret: int, walk: _Walk[S]) -> Outcome[S]:
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
        return Outcome(Verdict.ILLEGAL, tuple(prefix), stuck, tuple(candidates), walk.state)


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
        self.best: Outcome[S] | None = None


class _Memo(Generic[S]):
    """Lowe's cache of configurations seen, and subsumption by them.

    A configuration is the set of operations linearized and the state. One
    seen before has been searched already (it cannot be an ancestor: the set
    only grows along a path). Subsumption: a configuration is not searched
    if one with the same state, the same operations that return and fewer
    of those that never do has been seen (searched, or being searched):
    any way on from the second, followed by its extra open operations at
    the end (where they may always go, with any outcome), is a way on from
    the first that takes fewer open operations. The search therefore finds
    a linearization with the fewest open operations it can, if there is
    one: no configuration on the way to that one is pruned, or a way with
    fewer would exist (the open operations taken in call order among
    equal ones, the twins, count alike). This keeps timed-out writes from
    multiplying the search: a run of them that returns to a state already
    met is pruned at once, where pruning only by failed configurations
    waited for the first to fail.
    """

    __slots__ = ("_seen", "_seen_open", "_open_mask")

    def __init__(self, open_mask: int) -> None:
        self._seen: set[tuple[int, S]] = set()
        # (linearized operations that return, state) -> those that never
        # return, per configuration seen (the first few)
        self._seen_open: dict[tuple[int, S], list[int]] = {}
        self._open_mask = open_mask

    def fresh(self, linearized: int, state: S) -> bool:
        """Whether a configuration is worth searching; it counts as seen from now on."""
        key = (linearized, state)
        if key in self._seen:
            return False
        if self._open_mask:
            mine = linearized & self._open_mask
            seen = self._seen_open.setdefault((linearized & ~self._open_mask, state), [])
            if any(not (used & ~mine) for used in seen):
                return False
            if len(seen) < _SEEN_KEPT:
                seen.append(mine)
        self._seen.add(key)
        return True
