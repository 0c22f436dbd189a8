"""Transactions in the metadata model: their parts, their compares, and
how they are written out (sim/metamodel.py says how they are checked)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from shoal.sim.metamodel import Delete, Get, MetaState, Put, Read, Value


@dataclass(frozen=True, slots=True)
class Cmp:
    """A transaction's compare: `key`'s `target` ("value", "version",
    "create" or "mod") against `operand` with `op` ("=", "!=", "<", ">")."""

    key: str
    target: str
    op: str
    operand: Value | int


@dataclass(frozen=True, slots=True)
class Txn:
    """If every compare holds run `success`, else `failure` (no cas inside)."""

    compares: tuple[Cmp, ...]
    success: tuple[Get | Put | Delete, ...]
    failure: tuple[Get | Put | Delete, ...] = ()

    @property
    def keys(self) -> list[str]:
        """Every key it compares or touches."""
        return [c.key for c in self.compares] + [o.key for o in (*self.success, *self.failure)]


@dataclass(frozen=True, slots=True)
class TxnDone:
    """A transaction committed at `revision`, its branch, and per operation
    of that branch a `Read` for a get (None for a put or a delete)."""

    succeeded: bool
    revision: int
    results: tuple[Read | None, ...]


def holds(state: MetaState, c: Cmp) -> bool | None:
    """Whether a compare holds in a key's state (None: the state cannot say)."""
    value, mod_revision, exact = state
    if c.target == "value":
        return False if value is None else compare_values(value, c.op, c.operand)
    if value is None:
        return compare_values(0, c.op, c.operand)  # absent: version and revisions 0
    if c.target == "mod" and exact:
        return compare_values(mod_revision, c.op, c.operand)
    # The least it can be: an unknown mod revision's bound; 1 for a version
    # or create revision, which are not tracked.
    least = mod_revision if c.target == "mod" else 1
    number = int(c.operand)
    if number < least:
        return c.op in ("!=", ">")
    if number == least and c.op == "<":
        return False
    return None


def compare_values(ours: Value | int, op: str, theirs: Value | int) -> bool:
    """`ours op theirs`, for op `=`, `!=`, `<` or `>`."""
    if op == "=":
        return ours == theirs
    if op == "!=":
        return ours != theirs
    if op == "<":
        return ours < theirs  # type: ignore[operator]
    return ours > theirs  # type: ignore[operator]


def describe_txn(txn: Txn, output: object | None, describe: Callable[[object], str]) -> str:
    """`txn(mod('a') = 3; put('a', 'x') | get('a')) -> success(7) [-, ('x', 7)]`,
    each operation as `describe` puts it."""

    def ops(branch: tuple[Get | Put | Delete, ...]) -> str:
        return ", ".join(describe(o) for o in branch)

    compares = " and ".join(f"{c.target}({c.key!r}) {c.op} {c.operand!r}" for c in txn.compares)
    call = f"txn({compares}; {ops(txn.success)} | {ops(txn.failure)})"
    if isinstance(output, TxnDone):
        results = ", ".join("-" if r is None else f"({r.value!r}, {r.mod_revision})"
                            for r in output.results)  # fmt: skip
        branch = "success" if output.succeeded else "failure"
        return f"{call} -> {branch}({output.revision}) [{results}]"
    return f"{call} -> {'unknown' if output is None else repr(output)}"
