"""Listing and watching the metadata log (docs/metadata.md, "Listing", "Watching").

    GET /v1/meta/?prefix=P[&limit=N][&after=K][&stale]   the keys under P, in
        key order, a page at a time: `items` (each as GET /v1/meta/<key>
        answers it), the `revision` the page was read at, and `more` with
        `next_after` (pass it as `after`) while keys remain
    GET /v1/meta/?prefix=P&watch[&from=R]   every committed change to a key
        under P from revision R on (none: from the next), in revision order,
        as JSON lines (daemon/metawatch.py): a hello line, then one line per
        revision, a ping line every 5 s of quiet; 410 with
        `compacted_revision` when R's changes are no longer kept

A listing is linearizable like a GET: the controller confirms its
leadership (ReadIndex) and names the revision it has applied; the page is
answered from this agent's state once it has applied as far (503 when it
has not in time). With `?stale`, from this agent's state at once. A watch
is served from this agent's applied state, on any agent.

Like a kv watch (api/changes.py, /v1/watch) it is a Kubernetes-style watch
on the collection (`?watch`), so no key name is taken by a route.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import unquote_to_bytes

from shoal.daemon.api.answers import HttpError, Request, Result, Stream
from shoal.daemon.api.meta import NOT_APPLIED, key_json
from shoal.daemon.api.port import AgentPort
from shoal.daemon.meta import MetaService
from shoal.daemon.metawatch import Compacted
from shoal.metalog.messages import MAX_KEY_BYTES

DEFAULT_LIMIT = 1000
MAX_LIMIT = 10_000


def collection_route(agent: AgentPort, request: Request) -> Any:
    """`GET /v1/meta/?prefix=P...`: a page of keys, or a watch (`?watch`)."""
    service = agent.meta
    if service is None:
        raise HttpError(503, f"{NOT_APPLIED} (the metadata log is off on this agent: "
                        "[meta] enabled, docs/metadata.md)", outcome="not_applied")  # fmt: skip
    query = request.query
    prefix = _bytes(query, "prefix")
    if "watch" in query:
        start = _revision(query, "from")
        if start == 0:
            raise HttpError(400, "from must be a revision (revisions start at 1)")
        return _watch(service, prefix, start)
    limit = _revision(query, "limit")
    if limit is not None and not 1 <= limit <= MAX_LIMIT:
        raise HttpError(400, f"limit must be 1 to {MAX_LIMIT}, not {limit}")
    after = _bytes(query, "after")
    if after and not after.startswith(prefix):
        raise HttpError(400, "after must be a key under the prefix (a page's next_after)")
    page = _Page(prefix, after, limit or DEFAULT_LIMIT)
    if "stale" in query:
        return 200, {**page.render(service), "stale": True}
    return _linearizable(service, page)


def _bytes(query: dict[str, list[str]], name: str) -> bytes:
    value = unquote_to_bytes(query.get(name, [""])[0])
    if len(value) > MAX_KEY_BYTES:
        raise HttpError(400, f"{name} is at most {MAX_KEY_BYTES} bytes")
    return value


def _revision(query: dict[str, list[str]], name: str) -> int | None:
    if name not in query:
        return None
    text = query[name][0]
    if not (text.isdigit() and len(text) < 19):
        raise HttpError(400, f"{name} must be a non-negative integer, not {text[:40]!r}")
    return int(text)


class _Page:
    """One page of a listing: keys under `prefix` after `after`, `limit` at most."""

    def __init__(self, prefix: bytes, after: bytes, limit: int) -> None:
        self.prefix, self.after, self.limit = prefix, after, limit

    def render(self, service: MetaService) -> dict[str, Any]:
        """The page from this agent's applied state."""
        keys, revision = service.applied_keys()
        prefix, after = self.prefix, self.after
        under = sorted(k for k in keys if k.startswith(prefix) and k > after)
        page = under[: self.limit]
        items = [key_json(k, keys[k], revision) for k in page]
        for item in items:
            del item["revision"]  # the page's
        out: dict[str, Any] = {"prefix": prefix.decode(errors="replace"), "items": items,
                               "revision": revision, "more": len(under) > len(page)}  # fmt: skip
        if out["more"]:
            out["next_after"] = page[-1].decode(errors="replace")
        return out


async def _linearizable(service: MetaService, page: _Page) -> tuple[int, Any]:
    """The page once the controller confirmed its leadership and this agent
    applied as far as the controller had (any key would do for ReadIndex)."""
    done = await service.read(b"\x00")
    if done is None or not done.ok:
        raise HttpError(503, "not served: no controller confirmed its leadership in time; "
                        "safe to retry (or list ?stale)", outcome="not_applied")  # fmt: skip
    if service.stale(b"")[1] < done.revision:
        raise HttpError(503, f"not served: this agent has not yet applied revision "
                        f"{done.revision} (it is behind the controller); safe to retry, "
                        "here or on another agent", outcome="not_applied")  # fmt: skip
    return 200, page.render(service)


def _watch(service: MetaService, prefix: bytes, start: int | None) -> Result:
    watches = service.watches
    try:
        stream = watches.subscribe(prefix, start)
    except Compacted as exc:
        raise HttpError(410, str(exc), compacted_revision=exc.floor,
                        revision=watches.revision) from None  # fmt: skip

    async def lines() -> AsyncIterator[Any]:
        try:
            yield {"type": "hello", "revision": watches.revision,
                   "compacted_revision": watches.floor, "from": stream.start}  # fmt: skip
            while (line := await stream.queue.get()) is not None:
                yield line
        finally:
            watches.close(stream)

    return Stream(lines())
