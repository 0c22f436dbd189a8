"""The swarm's transactions as the checker sees them: the log's `MetaTxn`
and its `TxnApplied` turned into the model's `Txn` and `TxnDone`
(sim/metamodel.py), byte keys and values as text."""

from __future__ import annotations

from shoal.metalog.state import Compare, MetaDelete, MetaGet, MetaPut, MetaTxn, TxnApplied, TxnOp
from shoal.sim.metamodel import Cmp, Delete, Get, NotApplied, Put, Read, Txn, TxnDone

# The keys the swarm's transactions use, and no other operation: their
# partition is the transactions' alone.
TXN_KEYS = (b"acct/a", b"acct/b")

_TARGETS = ("value", "version", "create", "mod")
_CMPS = ("=", "!=", "<", ">")


def txn_input(txn: MetaTxn) -> Txn:
    """The model's form of a transaction."""
    return Txn(tuple(_cmp(c) for c in txn.compares), tuple(_op(o) for o in txn.success),
               tuple(_op(o) for o in txn.failure))  # fmt: skip


def txn_output(txn: MetaTxn, done: TxnApplied | None, outcome: str) -> TxnDone | NotApplied | None:
    """The model's output for a transaction's `outcome` ("ok": `done`
    committed; "not_applied"; anything else: unknown, None)."""
    if outcome == "not_applied":
        return NotApplied()
    if outcome != "ok":
        return None
    assert done is not None
    branch = txn.success if done.succeeded else txn.failure
    results: list[Read | None] = []
    for op, held in zip(branch, done.results, strict=True):
        if isinstance(op, MetaGet):
            results.append(
                Read(None, 0) if held is None else Read(held.value.decode(), held.mod_revision)
            )
        else:
            results.append(None)
    return TxnDone(done.succeeded, done.revision, tuple(results))


def _cmp(c: Compare) -> Cmp:
    operand = c.value.decode() if c.target == 0 else c.number
    return Cmp(c.key.decode(), _TARGETS[c.target], _CMPS[c.cmp], operand)


def _op(op: TxnOp) -> Get | Put | Delete:
    if isinstance(op, MetaPut):
        return Put(op.key.decode(), op.value.decode())
    if isinstance(op, MetaDelete):
        return Delete(op.key.decode())
    return Get(op.key.decode())
