"""Histories of a correct (or deliberately broken) metadata store, for the checker.

A `ReferenceStore` is the sequential specification as code: one global
revision counter, etcd's CAS rules. `random_history` runs clients against it
on a virtual timeline: each operation takes effect at one instant drawn
between its call and its return, so the history is linearizable by
construction; a timed-out operation takes effect or not (a coin) and its
client never learns which. A `bug` breaks the store in one way, so that the
checker has something to find:

- `stale-read`: a read now and then answers the key's previous value and
  revision (a follower that has not applied the last write);
- `lost-write`: a write now and then is acknowledged with a revision but
  not applied (acknowledged before it was durable on a majority);
- `txn-ignores-compares`: a transaction whose compares failed now and then
  runs its success branch, and says it succeeded.

With `txn_p`, that share of the calls are transactions over two keys
(`_txn`): a transfer if neither changed since last seen, a create if
absent whose failure branch deletes, a set if a value is the one last
seen, a version compare the model cannot decide (its failure branch only
reads, as the model's docstring asks of such transactions).

Used by tests/unit/sim/test_linearizability.py, tests/sim/test_linearizability_random.py
and bench/linearizability.py.
"""

from __future__ import annotations

import heapq
import random
from dataclasses import dataclass, field

from shoal.sim.linearizability import Operation
from shoal.sim.metamodel import (
    Cmp,
    Conflict,
    Delete,
    Get,
    Put,
    Read,
    Txn,
    TxnDone,
    Value,
    Written,
)
from shoal.sim.txnmodel import compare_values

Input = Get | Put | Delete | Txn

BUGS = ("stale-read", "lost-write")
TXN_BUGS = ("txn-ignores-compares",)  # shows only with `txn_p`
# How often the broken store misbehaves, when it can.
_BUG_P = 0.05


@dataclass(slots=True)
class ReferenceStore:
    """A sequential key-value store with global revisions and CAS, optionally broken."""

    rng: random.Random
    bug: str | None = None
    revision: int = 0
    keys: dict[str, tuple[Value, int]] = field(default_factory=dict)  # value, mod revision
    previous: dict[str, tuple[Value, int] | None] = field(default_factory=dict)
    versions: dict[str, int] = field(default_factory=dict)  # changes since created

    def apply(self, input: Input) -> Read | Written | Conflict | TxnDone:
        """Apply one operation now; its answer."""
        if isinstance(input, Txn):
            return self._txn(input)
        current = self.keys.get(input.key)
        if isinstance(input, Get):
            if self.bug == "stale-read" and input.key in self.previous and self._misbehave():
                current = self.previous[input.key]
            return Read(None, 0) if current is None else Read(current[0], current[1])
        mod_revision = 0 if current is None else current[1]
        if input.cas is not None and input.cas != mod_revision:
            return Conflict(mod_revision)
        if isinstance(input, Delete) and current is None:
            return Written(self.revision)
        self.revision += 1
        if self.bug == "lost-write" and self._misbehave():
            return Written(self.revision)
        self._write(input)
        return Written(self.revision)

    def _write(self, input: Put | Delete) -> None:
        current = self.keys.get(input.key)
        self.previous[input.key] = current
        if isinstance(input, Put):
            self.keys[input.key] = (input.value, self.revision)
            self.versions[input.key] = 1 if current is None else self.versions[input.key] + 1
        elif current is not None:
            del self.keys[input.key]

    def _txn(self, txn: Txn) -> TxnDone:
        self.revision += 1
        held = all(self._holds(c) for c in txn.compares)
        if not held and self.bug == "txn-ignores-compares" and self.rng.random() < 0.3:
            held = True
        results: list[Read | None] = []
        for op in txn.success if held else txn.failure:
            if isinstance(op, Get):
                current = self.keys.get(op.key)
                results.append(Read(None, 0) if current is None else Read(*current))
            else:
                self._write(op)
                results.append(None)
        return TxnDone(held, self.revision, tuple(results))

    def _holds(self, c: Cmp) -> bool:
        current = self.keys.get(c.key)
        if c.target == "value":
            if current is None:
                return False
            ours: Value | int = current[0]
        elif current is None:
            ours = 0
        else:
            ours = {"mod": current[1], "version": self.versions[c.key], "create": 1}[c.target]
            if c.target == "create":  # not kept: only compared with 0 here
                assert c.operand == 0, c
        return compare_values(ours, c.op, c.operand)

    def _misbehave(self) -> bool:
        return self.rng.random() < _BUG_P


@dataclass(slots=True)
class _Client:
    """One client's memory: the mod revision (and value) it last saw per key."""

    seen: dict[str, int] = field(default_factory=dict)
    values: dict[str, Value] = field(default_factory=dict)
    writes: int = 0


def random_history(
    rng: random.Random,
    *,
    operations: int = 1000,
    keys: int = 5,
    clients: int = 5,
    timeout_p: float = 0.05,
    bug: str | None = None,
    txn_p: float = 0.0,
) -> list[Operation]:
    """A history of `clients` concurrent clients against a `ReferenceStore`.

    Each client calls, waits for its answer (0 to 10 ms later, effect at a
    drawn instant in between) and calls again after 0 to 2 ms. A timed-out
    call takes effect or not, and its client moves on after 20 ms.
    """
    assert bug is None or bug in BUGS + TXN_BUGS, bug
    store = ReferenceStore(rng, bug)
    names = [f"k{i}" for i in range(keys)]
    memory = [_Client() for _ in range(clients)]
    ops: list[Operation] = []
    # (at, seq, client, call_at, input): the instant the call takes effect
    effects: list[tuple[float, int, int, float, Input]] = []
    for client in range(clients):
        _call(rng, effects, client, rng.uniform(0, 0.002), names, memory[client], len(effects),
              txn_p)  # fmt: skip
    seq = len(effects)
    while effects and len(ops) < operations:
        effect_at, _, client, call_at, input = heapq.heappop(effects)
        timed_out = rng.random() < timeout_p
        if timed_out and rng.random() < 0.5:
            output = None  # never took effect
        else:
            output = store.apply(input)
        if timed_out:
            ops.append(Operation(client, call_at, None, input, None))
            next_at = call_at + 0.02
        else:
            return_at = effect_at + rng.uniform(0, 0.005)
            ops.append(Operation(client, call_at, return_at, input, output))
            _remember(memory[client], input, output)
            next_at = return_at + rng.uniform(0, 0.002)
        seq += 1
        _call(rng, effects, client, next_at, names, memory[client], seq, txn_p)
    return ops


def _call(
    rng: random.Random,
    effects: list[tuple[float, int, int, float, Input]],
    client: int,
    call_at: float,
    names: list[str],
    memory: _Client,
    seq: int,
    txn_p: float = 0.0,
) -> None:
    """Schedule a client's next call: its effect 0 to 5 ms after it."""
    key = rng.choice(names)
    draw = rng.random()
    input: Input
    if rng.random() < txn_p:
        memory.writes += 1
        input = _txn(rng, client, names, memory)
    elif draw < 0.4:
        input = Get(key)
    elif draw < 0.9:
        memory.writes += 1
        cas = memory.seen.get(key, 0) if draw >= 0.7 else None
        input = Put(key, f"c{client}w{memory.writes}", cas)
    else:
        input = Delete(key, memory.seen.get(key) if draw >= 0.97 else None)
    heapq.heappush(effects, (call_at + rng.uniform(0, 0.005), seq, client, call_at, input))


def _txn(rng: random.Random, client: int, names: list[str], memory: _Client) -> Txn:
    """One of four transactions over two keys (the module docstring)."""
    a, b = rng.sample(names, 2) if len(names) > 1 else (names[0], names[0])
    va, vb = f"c{client}w{memory.writes}a", f"c{client}w{memory.writes}b"
    shape = rng.randrange(4)
    if shape == 0 and a != b:
        compares = (
            Cmp(a, "mod", "=", memory.seen.get(a, 0)),
            Cmp(b, "mod", "=", memory.seen.get(b, 0)),
        )
        return Txn(compares, (Put(a, va), Put(b, vb), Get(a)), (Get(a), Get(b)))
    if shape == 1:
        return Txn((Cmp(a, "create", "=", 0),), (Put(a, va), Get(b)), (Delete(a), Get(b)))
    if shape == 2:
        seen = memory.values.get(a, "none")
        return Txn((Cmp(a, "value", "=", seen),), (Put(a, va),), (Put(b, vb), Get(a)))
    return Txn((Cmp(a, "version", ">", rng.randrange(1, 4)),), (Delete(a),), (Get(a),))


def _remember(memory: _Client, input: Input, output: object) -> None:
    """What a client learns of a key's mod revision from an answer."""
    if isinstance(input, Txn):
        if isinstance(output, TxnDone):
            branch = input.success if output.succeeded else input.failure
            for op, result in zip(branch, output.results, strict=True):
                if isinstance(result, Read):
                    memory.seen[op.key] = result.mod_revision
                    if result.value is not None:
                        memory.values[op.key] = result.value
                elif isinstance(op, Put):
                    memory.seen[op.key], memory.values[op.key] = output.revision, op.value
                else:
                    memory.seen[op.key] = 0
        return
    match output:
        case Read(_, mod_revision) | Conflict(mod_revision):
            memory.seen[input.key] = mod_revision
        case Written(revision) if isinstance(input, Put):
            memory.seen[input.key] = revision
        case Written():
            memory.seen[input.key] = 0
