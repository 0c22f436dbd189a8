"""The metadata log's routes (docs/metadata.md says what they promise).

    PUT    /v1/meta/<key>[?cas=R][&session=ID]
                                     set <key> to the body, through the controller
                                     (owned by session ID: deleted when it ends)
    DELETE /v1/meta/<key>[?cas=R]    delete <key>
    GET    /v1/meta/<key>[?stale]    the key, read through the controller (or,
                                     with ?stale, from this agent's applied state)
    POST   /v1/meta/txn              a transaction (api/metatxn.py)

Every answer tells the outcome. A write: committed (200, with its
revision); refused by its `cas` (409, with the key's current mod
revision); not applied (503: nobody appended it, safe to retry); unknown
(504: handed to the controller, no answer in time, so it may have been
committed). A read: 200 with the key, 404 when absent, 503 when not
served. Bad input: 400, 404, 405 or 413 with a JSON error.
"""

from __future__ import annotations

import base64
from collections.abc import Awaitable
from typing import Any
from urllib.parse import unquote_to_bytes

from shoal.daemon.api.answers import HttpError, Request
from shoal.daemon.api.metatxn import TXN_ROUTE, txn_route
from shoal.daemon.api.port import AgentPort
from shoal.daemon.logsessions import parse_id
from shoal.daemon.meta import MetaService
from shoal.metalog.core import ProposalDone
from shoal.metalog.messages import (
    MAX_KEY_BYTES,
    MAX_VALUE_BYTES,
    OUTCOME_COMMITTED,
    OUTCOME_CONFLICT,
    OUTCOME_NO_SESSION,
    OUTCOME_NOT_APPLIED,
)
from shoal.metalog.state import KeyState, MetaDelete, MetaOp, MetaPut

META_PREFIX = "/v1/meta/"
_SKIP = len(META_PREFIX)
NOT_APPLIED = "not applied: safe to retry"
UNKNOWN = "unknown: may have been committed; read it back or retry with cas"


def meta_route(agent: AgentPort, request: Request) -> Any:
    """The metadata routes: one key each."""
    service = agent.meta
    method, path = request.method, request.path
    if method == "POST" and path == TXN_ROUTE:
        if service is None:
            raise HttpError(503, f"{NOT_APPLIED} (the metadata log is off on this agent: "
                            "[meta] enabled, docs/metadata.md)", outcome="not_applied")  # fmt: skip
        return txn_route(service, request.body)
    key = unquote_to_bytes(path[_SKIP:]) if "%" in path else path[_SKIP:].encode()
    if not key:
        raise HttpError(405 if method in ("PUT", "DELETE") else 404,
                        f"{method} needs a key: {META_PREFIX}<key>")  # fmt: skip
    if len(key) > MAX_KEY_BYTES:
        raise HttpError(400, f"a key is at most {MAX_KEY_BYTES} bytes")
    if method not in ("PUT", "DELETE", "GET"):
        raise HttpError(405, f"no {method} {META_PREFIX}<key>")
    if service is None:
        raise HttpError(503, f"{NOT_APPLIED} (the metadata log is off on this agent: "
                        "[meta] enabled, docs/metadata.md)", outcome="not_applied")  # fmt: skip
    if method == "GET":
        if "stale" in request.query:
            return 200, _stale(service, key)
        return _read(service, key)
    if len(request.body) > MAX_VALUE_BYTES:
        raise HttpError(413, f"a value is at most {MAX_VALUE_BYTES} bytes")
    cas = _cas(request.query)
    op: MetaOp = (MetaPut(key, request.body, cas, _session(request.query)) if method == "PUT"
                  else MetaDelete(key, cas))  # fmt: skip
    return _write(key, service.submit(op))  # proposed now, in this pass of the loop


def _cas(query: dict[str, list[str]]) -> int | None:
    if not query or "cas" not in query:
        return None
    text = query["cas"][0]
    if not (text.isdigit() and int(text) < 2**63):
        raise HttpError(400, f"cas must be a mod revision (an integer, 0: only if absent), "
                        f"not {text[:40]!r}")  # fmt: skip
    return int(text)


def _session(query: dict[str, list[str]]) -> bytes:
    """The session a put names (b"": none)."""
    if not query or "session" not in query:
        return b""
    text = query["session"][0]
    sid = parse_id(text)
    if sid is None:
        raise HttpError(400, f"session must be a session id of the metadata log (32 hex "
                        f"digits, POST /v1/session), not {text[:40]!r}")  # fmt: skip
    return sid


async def _write(key: bytes, pending: Awaitable[ProposalDone | None]) -> tuple[int, Any]:
    done = await pending
    name = key.decode(errors="replace")
    if done is None:
        raise HttpError(504, UNKNOWN, outcome="unknown", key=name)
    if done.outcome == OUTCOME_COMMITTED:
        return 200, {"key": name, "revision": done.revision, "outcome": "committed"}
    if done.outcome == OUTCOME_CONFLICT:
        raise HttpError(409, f"cas did not match: {name!r} is at mod revision {done.revision}"
                        if done.revision else f"cas did not match: {name!r} is absent",
                        outcome="conflict", key=name, current=done.revision)  # fmt: skip
    if done.outcome == OUTCOME_NOT_APPLIED:
        raise HttpError(503, f"{NOT_APPLIED} (no controller known, or it was not the "
                        "controller any more)", outcome="not_applied", key=name)  # fmt: skip
    if done.outcome == OUTCOME_NO_SESSION:
        raise HttpError(404, "no such session: it ended (expired or closed), or never was; "
                        "nothing was written", outcome="no_session", key=name)  # fmt: skip
    raise HttpError(504, UNKNOWN, outcome="unknown", key=name)


async def _read(service: MetaService, key: bytes) -> tuple[int, Any]:
    done = await service.read(key)
    name = key.decode(errors="replace")
    if done is None or not done.ok:
        raise HttpError(503, "not served: no controller confirmed its leadership in time; "
                        "safe to retry (or read ?stale)", outcome="not_applied")  # fmt: skip
    # Answered from this agent's state once it has applied as far as the
    # controller's read revision (any later state is a correct answer too:
    # it was committed before this answer); if it has not in time, from
    # the controller's value and mod revision alone.
    applied, revision = service.stale(key)
    if revision >= done.revision:
        if applied is None:
            raise HttpError(404, f"no key {name!r}", revision=revision)
        return 200, key_json(key, applied, revision)
    if done.value is None:
        raise HttpError(404, f"no key {name!r}", revision=done.revision)
    return 200, key_json(key, KeyState(done.value, 0, done.mod_revision, 0), done.revision)


def _stale(service: MetaService, key: bytes) -> dict[str, Any]:
    held, revision = service.stale(key)
    if held is None:
        raise HttpError(404, f"no key {key.decode(errors='replace')!r}", revision=revision,
                        stale=True)  # fmt: skip
    return {**key_json(key, held, revision), "stale": True}


def key_json(key: bytes, held: KeyState, revision: int) -> dict[str, Any]:
    """One key as the API answers it: `value` as text (null when it is not
    UTF-8) and always `value_base64`, as kv does."""
    out: dict[str, Any] = {"key": key.decode(errors="replace")}
    try:
        out["value"] = held.value.decode()
    except UnicodeDecodeError:
        out["value"] = None
    out["value_base64"] = base64.b64encode(held.value).decode()
    out.update(revision=revision, create_revision=held.create_revision,
               mod_revision=held.mod_revision, version=held.version)  # fmt: skip
    if held.session:
        out["session"] = held.session.hex()
    return out
