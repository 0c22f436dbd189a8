"""`client.meta.txn(...)`: a transaction of the metadata log, its parts and
its result (docs/metadata.md, `POST /v1/meta/txn`).

    from shoal.client import Compare, TxnGet, TxnPut
    result = client.meta.txn(
        compare=[Compare.absent("topics/orders"),
                 Compare("topic-count", "mod_revision", "=", 12)],
        success=[TxnPut("topics/orders", "partitions=3"), TxnPut("topic-count", "4")],
        failure=[TxnGet("topics/orders")])
    if not result.succeeded:
        print(result.results[0].value)

Either branch committed is a `TxnResult`; not applied raises `NotApplied`
(safe to retry), no answer in time `Unknown` (it may have been committed).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import msgspec

from shoal.client.calls import Call, typed

TXN_PATH = "/v1/meta/txn"

TARGETS = ("value", "version", "create_revision", "mod_revision")
OPS = ("=", "!=", "<", ">")


@dataclass(frozen=True, slots=True)
class Compare:
    """`key`'s `target` compared with `value` by `op` (etcd's compare).

    Attributes:
        target: "value" (compared as bytes; an absent key's value compares
            false, whatever `op`), "version", "create_revision" or
            "mod_revision" (0 for an absent key).
        op: "=", "!=", "<" or ">".
        value: bytes or text for a value, an int otherwise.
    """

    key: str
    target: str
    op: str
    value: bytes | str | int

    def __post_init__(self) -> None:
        if self.target not in TARGETS or self.op not in OPS:
            raise ValueError(f"a compare's target is one of {TARGETS} and its op one of {OPS}: "
                             f"got {self.target!r} {self.op!r}")  # fmt: skip
        numeric = isinstance(self.value, int) and not isinstance(self.value, bool)
        if numeric is (self.target == "value"):
            raise ValueError(f"compare {self.target}: a value is bytes or text, a revision "
                             f"or version an int; got {self.value!r}")  # fmt: skip

    @classmethod
    def absent(cls, key: str) -> Compare:
        """Holds when `key` does not exist (its create revision is 0)."""
        return cls(key, "create_revision", "=", 0)


@dataclass(frozen=True, slots=True)
class TxnPut:
    """Set `key` to `value` (text as UTF-8); with `session` (an id), owned by
    that session: deleted when it ends."""

    key: str
    value: bytes | str
    session: str | None = None


@dataclass(frozen=True, slots=True)
class TxnGet:
    """Read `key` as the transaction has it (after its operations before)."""

    key: str


@dataclass(frozen=True, slots=True)
class TxnDelete:
    """Delete `key` (nothing if absent)."""

    key: str


TxnOp = TxnPut | TxnGet | TxnDelete


class TxnItem(msgspec.Struct, frozen=True, kw_only=True):
    """The result of one operation of the branch that ran.

    Attributes:
        op: "put", "get" or "delete".
        found: a get's key exists (then `value` and its revisions are set).
        revision: a put's (the transaction's).
        deleted: a delete's count, 0 or 1.
    """

    op: str
    key: str
    found: bool = False
    value: bytes = msgspec.field(default=b"", name="value_base64")
    create_revision: int = 0
    mod_revision: int = 0
    version: int = 0
    revision: int = 0
    deleted: int = 0


class TxnResult(msgspec.Struct, frozen=True, kw_only=True):
    """A committed transaction: `succeeded` (its compares held: the success
    branch ran, else the failure branch), at `revision`, and one item per
    operation of the branch that ran."""

    succeeded: bool
    revision: int
    results: list[TxnItem]


def _text(doc: dict[str, Any], name: str, value: bytes | str) -> None:
    if isinstance(value, str):
        doc[name] = value
    else:
        doc[name + "_base64"] = base64.b64encode(bytes(value)).decode()


def _op_json(op: TxnOp) -> dict[str, Any]:
    if not isinstance(op, TxnPut | TxnGet | TxnDelete):
        raise TypeError(f"a transaction's operation is a TxnPut, TxnGet or TxnDelete: {op!r}")
    kind = "put" if isinstance(op, TxnPut) else "get" if isinstance(op, TxnGet) else "delete"
    doc: dict[str, Any] = {"op": kind, "key": op.key}
    if isinstance(op, TxnPut):
        _text(doc, "value", op.value)
        if op.session is not None:
            doc["session"] = op.session
    return doc


def txn_call(compare: Sequence[Compare], success: Sequence[TxnOp],
             failure: Sequence[TxnOp]) -> Call[TxnResult]:  # fmt: skip
    """`POST /v1/meta/txn`."""
    compares = []
    for c in compare:
        doc: dict[str, Any] = {"key": c.key, "target": c.target, "op": c.op}
        if isinstance(c.value, int):
            doc["value"] = c.value
        else:
            _text(doc, "value", c.value)
        compares.append(doc)
    body = {"compare": compares, "success": [_op_json(o) for o in success],
            "failure": [_op_json(o) for o in failure]}  # fmt: skip
    return Call("POST", TXN_PATH, typed(TxnResult), json.dumps(body).encode(), needs=TXN_PATH,
                unknown_unanswered=True)  # fmt: skip


def txn_document_call(body: bytes) -> Call[Any]:
    """`POST /v1/meta/txn` with a JSON document as it is (the CLI's), answered as JSON."""
    return Call("POST", TXN_PATH, json.loads, body, needs=TXN_PATH, unknown_unanswered=True)
