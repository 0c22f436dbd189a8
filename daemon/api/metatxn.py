"""`POST /v1/meta/txn`: a transaction of the metadata log (docs/metadata.md).

The body, in the shape of etcd's v3 JSON gateway made simple (keys and
values as text when UTF-8, else `key_base64`/`value_base64`, as the other
metadata routes answer them):

    {"compare": [{"key": "topics/orders", "target": "absent"},
                 {"key": "topic-count", "target": "mod_revision", "op": "=", "value": 12}],
     "success": [{"op": "put", "key": "topics/orders", "value": "partitions=3"},
                 {"op": "put", "key": "topic-count", "value": "4"}],
     "failure": [{"op": "get", "key": "topics/orders"}]}

A compare's `target` is `value`, `version`, `create_revision`,
`mod_revision` (with `op` `=`, `!=`, `<` or `>` and a `value`), or `absent`
(`create_revision = 0`). The answer: `{"succeeded", "revision", "results"}`,
one result per operation of the branch that ran. Outcomes as the other
writes: 200 committed (either branch), 503 not applied, 504 unknown; bad
input 400, over a limit 413 (`MAX_TXN_OPS`, key and value sizes, `MAX_TXN_BYTES`).
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any

from shoal.daemon.api.answers import HttpError
from shoal.daemon.meta import MetaService
from shoal.metalog.messages import (
    MAX_KEY_BYTES,
    MAX_VALUE_BYTES,
    OUTCOME_COMMITTED,
    OUTCOME_NO_SESSION,
    SESSION_ID_BYTES,
)
from shoal.metalog.messages import OUTCOME_NOT_APPLIED as _NOT_APPLIED
from shoal.metalog.state import (
    MAX_TXN_BYTES,
    MAX_TXN_OPS,
    TARGET_CREATE,
    Compare,
    MetaDelete,
    MetaGet,
    MetaPut,
    MetaTxn,
    TxnApplied,
    TxnOp,
    txn_bytes,
)

TXN_ROUTE = "/v1/meta/txn"
# The largest body taken: the limit on keys and values, as base64 in JSON, and room.
TXN_BODY_BYTES = MAX_TXN_BYTES * 2 + 64 * 1024
_TARGETS = {"value": 0, "version": 1, "create_revision": 2, "mod_revision": 3}
_CMPS = {"=": 0, "!=": 1, "<": 2, ">": 3}
_OPS = ("put", "get", "delete")


async def txn_route(service: MetaService, body: bytes) -> tuple[int, Any]:
    """Parse, check and propose one transaction; its outcome (module docstring)."""
    txn = parse_txn(body)
    done = await service.propose(txn)
    if done is not None and done.outcome == OUTCOME_NO_SESSION:
        raise HttpError(404, "no such session: a put names a session that ended (expired or "
                        "closed), or never was; nothing ran", outcome="no_session")  # fmt: skip
    if done is None or done.outcome not in (OUTCOME_COMMITTED, _NOT_APPLIED):
        raise HttpError(504, "unknown: the transaction may have been committed; read its keys "
                        "back, or retry it with compares that tell", outcome="unknown")  # fmt: skip
    if done.outcome == _NOT_APPLIED:
        raise HttpError(503, "not applied: safe to retry (no controller known, or it was not "
                        "the controller any more)", outcome="not_applied")  # fmt: skip
    assert done.txn is not None
    return 200, txn_json(txn, done.txn)


def parse_txn(body: bytes) -> MetaTxn:
    """The transaction a request's body describes.

    Raises:
        HttpError: 400 for what is not a transaction, 413 over a limit.
    """
    try:
        doc = json.loads(body or b"null")
    except (ValueError, UnicodeDecodeError):
        raise HttpError(400, "the body must be a JSON transaction: {\"compare\": [...], "
                        "\"success\": [...], \"failure\": [...]}") from None  # fmt: skip
    _fields(doc, "the transaction", {"compare", "success", "failure"})
    parts = [doc.get(name, []) for name in ("compare", "success", "failure")]
    for name, part in zip(("compare", "success", "failure"), parts, strict=True):
        if not isinstance(part, list):
            raise HttpError(400, f"{name} must be a list")
    if sum(len(part) for part in parts) > MAX_TXN_OPS:
        raise HttpError(413, f"a transaction has at most {MAX_TXN_OPS} compares and "
                        "operations together")  # fmt: skip
    txn = MetaTxn(tuple(_compare(c) for c in parts[0]), _branch(parts[1], "success"),
                  _branch(parts[2], "failure"))  # fmt: skip
    if txn_bytes(txn) > MAX_TXN_BYTES:
        raise HttpError(413, f"a transaction's keys and values are at most {MAX_TXN_BYTES} "
                        "bytes together")  # fmt: skip
    return txn


def _fields(doc: object, what: str, allowed: set[str]) -> dict[str, Any]:
    if not isinstance(doc, dict):
        raise HttpError(400, f"{what} must be a JSON object")
    unknown = sorted(set(doc) - allowed)
    if unknown:
        raise HttpError(400, f"{what}: unknown field {unknown[0]!r} (known: "
                        f"{', '.join(sorted(allowed))})")  # fmt: skip
    return doc


def _bytes(doc: dict[str, Any], name: str, what: str, required: bool = True) -> bytes:
    """`name` as text, or `name_base64`."""
    text, b64 = doc.get(name), doc.get(name + "_base64")
    if (text is None) == (b64 is None):
        if text is None and not required:
            return b""
        raise HttpError(400, f"{what}: give {name} (text) or {name}_base64, one of them")
    if text is not None:
        if not isinstance(text, str):
            raise HttpError(400, f"{what}: {name} must be a string")
        return text.encode()
    try:
        if not isinstance(b64, str):
            raise ValueError(b64)
        return base64.b64decode(b64, validate=True)
    except (binascii.Error, ValueError):
        raise HttpError(400, f"{what}: {name}_base64 is not base64") from None


def _key(doc: dict[str, Any], what: str) -> bytes:
    key = _bytes(doc, "key", what)
    if not key:
        raise HttpError(400, f"{what}: the key must not be empty")
    if len(key) > MAX_KEY_BYTES:
        raise HttpError(400, f"{what}: a key is at most {MAX_KEY_BYTES} bytes")
    return key


def _compare(doc: object) -> Compare:
    c = _fields(doc, "a compare", {"key", "key_base64", "target", "op", "value", "value_base64"})
    key, target = _key(c, "a compare"), c.get("target")
    if target == "absent":
        if "op" in c or "value" in c or "value_base64" in c:
            raise HttpError(400, "a compare: target absent takes no op and no value")
        return Compare(key, TARGET_CREATE, 0, 0)
    if target not in _TARGETS:
        raise HttpError(400, f"a compare: target must be one of {', '.join(_TARGETS)}, absent")
    op = c.get("op")
    if op not in _CMPS:
        raise HttpError(400, f"a compare: op must be one of {' '.join(_CMPS)}")
    if target == "value":
        value = _bytes(c, "value", "a compare")
        if len(value) > MAX_VALUE_BYTES:
            raise HttpError(413, f"a value is at most {MAX_VALUE_BYTES} bytes")
        return Compare(key, 0, _CMPS[op], 0, value)
    number = c.get("value")
    if type(number) is not int or not 0 <= number < 2**63:
        raise HttpError(400, f"a compare of {target}: value must be a non-negative integer")
    return Compare(key, _TARGETS[target], _CMPS[op], number)


def _branch(ops: list[Any], name: str) -> tuple[TxnOp, ...]:
    parsed = tuple(_op(o, name) for o in ops)
    written = [o.key for o in parsed if not isinstance(o, MetaGet)]
    if len(set(written)) != len(written):
        raise HttpError(400, f"{name}: a key is put or deleted at most once in a branch")
    return parsed


def _op(doc: object, branch: str) -> TxnOp:
    what = f"an operation of {branch}"
    o = _fields(doc, what, {"op", "key", "key_base64", "value", "value_base64", "session"})
    kind = o.get("op")
    if kind not in _OPS:
        raise HttpError(400, f"{what}: op must be put, get or delete")
    key = _key(o, what)
    if kind == "put":
        value = _bytes(o, "value", what)
        if len(value) > MAX_VALUE_BYTES:
            raise HttpError(413, f"a value is at most {MAX_VALUE_BYTES} bytes")
        return MetaPut(key, value, None, _session(o.get("session"), what))
    if "value" in o or "value_base64" in o or "session" in o:
        raise HttpError(400, f"{what}: {kind} takes no value and no session")
    return MetaGet(key) if kind == "get" else MetaDelete(key)


def _session(text: object, what: str) -> bytes:
    """A put's session (b"": none): 32 hex digits (POST /v1/session)."""
    if text is None:
        return b""
    try:
        sid = bytes.fromhex(text) if isinstance(text, str) else b""
    except ValueError:
        sid = b""
    if len(sid) != SESSION_ID_BYTES:
        raise HttpError(400, f"{what}: session must be a session id of the metadata log "
                        "(32 hex digits)")  # fmt: skip
    return sid


def txn_json(txn: MetaTxn, done: TxnApplied) -> dict[str, Any]:
    """A committed transaction as the API answers it: one result per
    operation of the branch that ran (a get's key as GET answers it, with
    `found`; a put's revision; a delete's `deleted`, 0 or 1)."""
    results: list[dict[str, Any]] = []
    branch = txn.success if done.succeeded else txn.failure
    for op, held in zip(branch, done.results, strict=True):
        name = op.key.decode(errors="replace")
        if isinstance(op, MetaPut):
            results.append({"op": "put", "key": name, "revision": done.revision})
        elif isinstance(op, MetaDelete):
            results.append({"op": "delete", "key": name, "deleted": int(held is not None)})
        elif held is None:
            results.append({"op": "get", "key": name, "found": False})
        else:
            results.append(
                {
                    "op": "get",
                    "key": name,
                    "found": True,
                    **_value_json(held.value),
                    "create_revision": held.create_revision,
                    "mod_revision": held.mod_revision,
                    "version": held.version,
                }
            )
    return {"succeeded": done.succeeded, "revision": done.revision, "outcome": "committed",
            "results": results}  # fmt: skip


def _value_json(value: bytes) -> dict[str, Any]:
    """`value` as text (null when it is not UTF-8) and `value_base64`, as
    GET /v1/meta/<key> answers it (api/meta.py, `key_json`)."""
    try:
        text: str | None = value.decode()
    except UnicodeDecodeError:
        text = None
    return {"value": text, "value_base64": base64.b64encode(value).decode()}
