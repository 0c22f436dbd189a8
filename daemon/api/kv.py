"""The key-value routes of the API (docs/storage.md says what they promise).

    PUT    /v1/kv/<key>[?fence=E&ephemeral=1&session=ID]   store the body as the value
    GET    /v1/kv/<key>                the value and its version (404 if absent)
    DELETE /v1/kv/<key>[?fence=E]      delete <key> (a tombstone that replicates)
    GET    /v1/kv/?prefix=&after=&limit=   keys and values in key order

A write is answered once it is durable: the route returns a `Deferred` on
the group commit's shared future, with the answer already rendered, and the
HTTP layer answers every write of the group in one callback (api/http.py).

This is the agent's hottest path (32 writers at several thousand writes a
second each cost the agent's core 63-71 us of CPU per write before the
changes of issue 25; docs/performance.md, "The write path", has the
profile). So the answer to a write is built as bytes in one step, not as a
dict for json.dumps, and the query string is read only when there is one.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import unquote_to_bytes

import msgspec

from shoal.daemon.api.answers import Deferred, HttpError, Request
from shoal.daemon.api.changes import record_json
from shoal.daemon.api.port import AgentPort
from shoal.daemon.sessions import SessionError
from shoal.kernel.errors import FenceRefused, WriteRefused
from shoal.storage import hlc
from shoal.storage.records import MAX_KEY_BYTES, Record

KV_PREFIX = "/v1/kv/"
LIST_LIMIT_DEFAULT = 1000
LIST_LIMIT_MAX = 10_000
_SKIP = len(KV_PREFIX)
_FLAGS = ("0", "1", "true", "false")
_encode_str = msgspec.json.Encoder().encode


def kv_route(agent: AgentPort, request: Request) -> Any:
    """The key-value routes: one key, or a listing for an empty key."""
    method = request.method
    path = request.path
    key = unquote_to_bytes(path[_SKIP:]) if "%" in path else path[_SKIP:].encode()
    if len(key) > MAX_KEY_BYTES:
        raise HttpError(400, f"a key is at most {MAX_KEY_BYTES} bytes")
    if key[:1] == b"\x00":
        raise HttpError(400, "keys starting with a zero byte are reserved (user events)")
    if not key:
        if method != "GET":
            raise HttpError(405 if method in ("PUT", "DELETE") else 404,
                            f"{method} needs a key: {KV_PREFIX}<key>")  # fmt: skip
        return 200, kv_list(agent, request.query)
    if method == "PUT":
        return _write(agent, key, request.body, request.query)
    if method == "DELETE":
        return _write(agent, key, None, request.query)
    if method == "GET":
        rec = agent.read(key)
        if rec is None or rec.value is None or not agent.visible(rec):
            raise HttpError(404, f"no key {key.decode(errors='replace')!r}")
        return 200, _record_json(agent, rec)
    raise HttpError(405, f"no {method} {KV_PREFIX}<key>")


def _write(agent: AgentPort, key: bytes, value: bytes | None,
           query: dict[str, list[str]]) -> Deferred:  # fmt: skip
    fence: int | None = None
    ephemeral: str | None = None
    session: str | None = None
    if query:
        fence_text = query.get("fence", [None])[0]
        if fence_text is not None and not (fence_text.isdigit() and int(fence_text) < 2**63):
            raise HttpError(400, f"fence must be a controller epoch (an integer), not "
                            f"{fence_text[:40]!r}")  # fmt: skip
        fence = None if fence_text is None else int(fence_text)
        ephemeral = query.get("ephemeral", ["0"])[0]
        if ephemeral not in _FLAGS:
            raise HttpError(400, "ephemeral must be 1 or 0")
        session = query.get("session", [None])[0]
    try:
        rec, durable = agent.write(key, value, fence, ephemeral in ("1", "true"), session)
    except SessionError as exc:
        raise HttpError(exc.status, str(exc)) from None
    except WriteRefused as exc:
        raise HttpError(503, str(exc)) from None
    except FenceRefused as exc:
        raise HttpError(409, str(exc), fence=exc.fence, epoch=exc.epoch) from None
    return Deferred(durable, 200, written_json(rec))


def written_json(rec: Record) -> bytes:
    """The answer to a write, rendered: key, hlc, modified_wall_ms, epoch
    (and ephemeral, deleted when so). Lean on purpose: one per write."""
    stamp = rec.hlc
    body = b'{"key": %s, "hlc": %d, "modified_wall_ms": %d, "epoch": %d' % (
        _encode_str(rec.key.decode(errors="replace")), stamp, stamp >> hlc.LOGICAL_BITS,
        rec.epoch)  # fmt: skip
    if rec.owner:
        body += b', "ephemeral": true'
    if rec.value is None:
        body += b', "deleted": true'
    return body + b"}"


def _record_json(agent: AgentPort, rec: Record) -> dict[str, Any]:
    name_of = agent.member_name
    return record_json(rec, name_of(rec.writer), name_of(rec.owner) if rec.owner else None)


def kv_list(agent: AgentPort, query: dict[str, list[str]]) -> dict[str, Any]:
    """`GET /v1/kv/?prefix=&after=&limit=`: visible keys in key order, with
    the change index the listing was taken at."""
    prefix = query.get("prefix", [""])[0].encode()
    after = query.get("after", [""])[0].encode()
    limit_text = query.get("limit", [str(LIST_LIMIT_DEFAULT)])[0]
    if not limit_text.isdigit() or not 0 < int(limit_text) <= LIST_LIMIT_MAX:
        raise HttpError(400, f"limit must be 1 to {LIST_LIMIT_MAX}")
    limit = int(limit_text)
    items: list[dict[str, Any]] = []
    more = True
    visible = agent.visible
    while len(items) < limit and more:
        batch = agent.scan(prefix, after, limit)
        more = len(batch) == limit
        for rec in batch:
            after = rec.key
            if rec.value is not None and len(items) < limit and visible(rec) and \
                    rec.key[:1] != b"\x00":  # fmt: skip
                items.append(_record_json(agent, rec))
    next_after = items[-1]["key"] if len(items) == limit else None
    changes = agent.changes
    return {"items": items, "next_after": next_after, "index": changes.index, "run": changes.run}
