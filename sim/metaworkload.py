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
  not applied (acknowledged before it was durable on a majority).

Used by tests/unit/sim/test_linearizability.py, tests/sim/test_linearizability_random.py
and bench/linearizability.py.
"""

from __future__ import annotations

import heapq
import random
from dataclasses import dataclass, field

from shoal.sim.linearizability import Operation
from shoal.sim.metamodel import Conflict, Delete, Get, Put, Read, Value, Written

BUGS = ("stale-read", "lost-write")
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

    def apply(self, input: Get | Put | Delete) -> Read | Written | Conflict:
        """Apply one operation now; its answer."""
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
        self.previous[input.key] = current
        if isinstance(input, Put):
            self.keys[input.key] = (input.value, self.revision)
        else:
            del self.keys[input.key]
        return Written(self.revision)

    def _misbehave(self) -> bool:
        return self.rng.random() < _BUG_P


@dataclass(slots=True)
class _Client:
    """One client's memory: the mod revision it last saw per key (for its CAS)."""

    seen: dict[str, int] = field(default_factory=dict)
    writes: int = 0


def random_history(
    rng: random.Random,
    *,
    operations: int = 1000,
    keys: int = 5,
    clients: int = 5,
    timeout_p: float = 0.05,
    bug: str | None = None,
) -> list[Operation]:
    """A history of `clients` concurrent clients against a `ReferenceStore`.

    Each client calls, waits for its answer (0 to 10 ms later, effect at a
    drawn instant in between) and calls again after 0 to 2 ms. A timed-out
    call takes effect or not, and its client moves on after 20 ms.
    """
    assert bug is None or bug in BUGS, bug
    store = ReferenceStore(rng, bug)
    names = [f"k{i}" for i in range(keys)]
    memory = [_Client() for _ in range(clients)]
    ops: list[Operation] = []
    # (at, seq, client, call_at, input): the instant the call takes effect
    effects: list[tuple[float, int, int, float, Get | Put | Delete]] = []
    for client in range(clients):
        _call(rng, effects, client, rng.uniform(0, 0.002), names, memory[client], len(effects))
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
        _call(rng, effects, client, next_at, names, memory[client], seq)
    return ops


def _call(
    rng: random.Random,
    effects: list[tuple[float, int, int, float, Get | Put | Delete]],
    client: int,
    call_at: float,
    names: list[str],
    memory: _Client,
    seq: int,
) -> None:
    """Schedule a client's next call: its effect 0 to 5 ms after it."""
    key = rng.choice(names)
    draw = rng.random()
    input: Get | Put | Delete
    if draw < 0.4:
        input = Get(key)
    elif draw < 0.9:
        memory.writes += 1
        cas = memory.seen.get(key, 0) if draw >= 0.7 else None
        input = Put(key, f"c{client}w{memory.writes}", cas)
    else:
        input = Delete(key, memory.seen.get(key) if draw >= 0.97 else None)
    heapq.heappush(effects, (call_at + rng.uniform(0, 0.005), seq, client, call_at, input))


def _remember(memory: _Client, input: Get | Put | Delete, output: object) -> None:
    """What a client learns of a key's mod revision from an answer."""
    match output:
        case Read(_, mod_revision) | Conflict(mod_revision):
            memory.seen[input.key] = mod_revision
        case Written(revision) if isinstance(input, Put):
            memory.seen[input.key] = revision
        case Written():
            memory.seen[input.key] = 0
