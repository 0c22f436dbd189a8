"""Every call the client makes, as data: what to send and how to read the
answer. No I/O here: `Client` (http.client) and `AsyncClient` (asyncio) send
the same `Call`s, and a call that takes several requests (a listing that
pages, a wait that long-polls) is a generator of them, `Steps`, which each
client drives the same way: it sends the yielded call and sends the
decoded answer back in, until the generator returns the result (the sans-I/O
shape of h11).
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Generator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar
from urllib.parse import quote, urlencode

import msgspec

from shoal.client.errors import IncompatibleAgent, ShoalError, Unavailable, Unknown, error_for
from shoal.client.types import (
    CheckListing,
    Controller,
    EventSent,
    JoinResult,
    KeyListing,
    KeyValue,
    Member,
    MemberListing,
    MetaValue,
    MetaWritten,
    QueryResult,
    SelfInfo,
    SessionInfo,
    SessionListing,
    TagsAnswer,
    Written,
)

T = TypeVar("T")
KV_PAGE = 1000
# The agent refuses a controller wait above 300 s: a longer one is several.
MAX_WAIT_S = 300.0
# A query's timeout: the agent's bounds (daemon/network/queries.py).
MAX_QUERY_TIMEOUT_S = 300.0
CHECK_STATUSES = {"pass": "pass", "warn": "warn", "fail": "fail", "passing": "pass",
                  "warning": "warn", "critical": "fail"}  # fmt: skip
Pattern = str | re.Pattern[str]


def _raw(body: bytes) -> Any:
    return json.loads(body)


@dataclass(frozen=True, slots=True)
class Call(Generic[T]):
    """One request and how to read its answer.

    Attributes:
        wait_s: how long the agent may hold the answer back (a long poll),
            on top of the client's timeout.
        needs: the endpoint an older agent lacks, named when it answers 404/405.
    """

    method: str
    path: str
    decode: Callable[[bytes], T]
    body: bytes | None = None
    wait_s: float = 0.0
    needs: str = ""
    # A metadata write: when no answer comes, its outcome is unknown.
    unknown_unanswered: bool = False


Steps = Generator[Call[Any], Any, T]


def typed(cls: type[T]) -> Callable[[bytes], T]:
    """A decoder of a JSON answer into `cls`."""
    return lambda body: msgspec.json.decode(body, type=cls)


def answer(call: Call[T], status: int, reason: str, body: bytes) -> T:
    """The decoded answer to `call`, or the exception for a refusal.

    Raises:
        ShoalError: a subclass for the status (errors.py); IncompatibleAgent
            when the agent lacks `call.needs` or its answer does not parse.
    """
    if status >= 400:
        try:
            parsed = json.loads(body) if body else None
        except ValueError:
            parsed = None
        refused = isinstance(parsed, dict) and parsed.get("outcome") == "no_session"
        if call.needs and status in (404, 405) and not refused:
            raise IncompatibleAgent(f"the agent has no {call.needs} (it runs an older shoal; "
                                    "upgrade it)", status)  # fmt: skip
        raise error_for(status, parsed, reason)
    try:
        return call.decode(body)
    except (msgspec.MsgspecError, ValueError) as exc:
        raise IncompatibleAgent(f"unreadable answer to {call.method} {call.path}: {exc}",
                                status) from None  # fmt: skip


def one(call: Call[T]) -> Steps[T]:
    """Steps of a single request."""
    result: T = yield call
    return result


def raw(method: str, path: str, body: Any = None, wait_s: float = 0.0) -> Call[Any]:
    """Any route, JSON in and out (the escape hatch the CLI uses for `keys`)."""
    data = None if body is None else json.dumps(body).encode()
    return Call(method, path, _raw, data, wait_s=wait_s)


def stream(path: str) -> Call[Any]:
    """A streaming GET (`/v1/watch`, `/v1/events`, a metadata watch), for
    `answer` to read its refusal: an agent without /v1/watch is named as
    older (IncompatibleAgent); a metadata watch's 404 is its own error."""
    needs = path.partition("?")[0] if path.startswith("/v1/watch") else ""
    return Call("GET", path, _raw, needs=needs)


def _json(obj: Any) -> bytes:
    return json.dumps(obj).encode()


def members_listing(status: str | None = None, health: str | None = None) -> Call[MemberListing]:
    """`GET /v1/members[?status=S][&health=H]`."""
    fields = {k: v for k, v in (("status", status), ("health", health)) if v}
    query = "?" + urlencode(fields) if fields else ""
    return Call("GET", "/v1/members" + query, typed(MemberListing))


def member_filter(tags: Mapping[str, Pattern] | None = None,
                  name: Pattern | None = None) -> Callable[[Member], bool]:  # fmt: skip
    """A predicate: True for members whose tag KEY matches each `tags[KEY]` in
    full (a member without the tag fails), and whose name matches `name`, as
    Serf's `members -tag` does.

    Raises:
        re.error: a pattern given as text does not compile.
    """
    wanted = [(k, re.compile(p) if isinstance(p, str) else p) for k, p in (tags or {}).items()]
    named = re.compile(name) if isinstance(name, str) else name

    def selected(member: Member) -> bool:
        if named is not None and not named.fullmatch(member.name):
            return False
        for key, pattern in wanted:
            value = member.tags.get(key)
            if value is None or not pattern.fullmatch(value):
                return False
        return True

    return selected


def members(status: str | None, tags: Mapping[str, Pattern] | None, name: Pattern | None,
            health: str | None = None) -> Steps[list[Member]]:  # fmt: skip
    """The members (in the agent's order) that pass `member_filter`."""
    selected = member_filter(tags, name)
    listing: MemberListing = yield members_listing(status, health)
    return [m for m in listing.members if selected(m)]


def self_info() -> Call[SelfInfo]:
    """`GET /v1/self`."""
    return Call("GET", "/v1/self", typed(SelfInfo))


def join(addrs: Sequence[str]) -> Call[JoinResult]:
    """`POST /v1/join`."""
    if isinstance(addrs, str):
        raise TypeError("join() takes a list of addresses, not one string")
    return Call("POST", "/v1/join", typed(JoinResult), _json({"addrs": list(addrs)}))


def leave() -> Call[Any]:
    """`POST /v1/leave`."""
    return Call("POST", "/v1/leave", _raw, b"{}")


def change_tags(set_tags: Mapping[str, str], delete: Sequence[str]) -> Steps[dict[str, str]]:
    """`POST /v1/tags`: this agent's tags afterwards."""
    body = _json({"set": dict(set_tags), "delete": list(delete)})
    result: TagsAnswer = yield Call("POST", "/v1/tags", typed(TagsAnswer), body)
    return result.tags


def force_leave(node: str) -> Call[Any]:
    """`POST /v1/force-leave`: remove a failed voter (from any agent)."""
    return Call("POST", "/v1/force-leave", _raw, _json({"node": node}))


def controller() -> Call[Controller]:
    """`GET /v1/controller`."""
    return Call("GET", "/v1/controller", typed(Controller))


def wait_controller(after_epoch: int | None, timeout_s: float,
                    clock: Callable[[], float] = time.monotonic) -> Steps[Controller]:  # fmt: skip
    """Long-poll until a controller is known whose epoch is above `after_epoch`
    (None: any controller, the current one if there is one).

    Raises:
        TimeoutError: none within `timeout_s`.
    """
    deadline_at = clock() + timeout_s
    info: Controller = yield controller()
    while info.controller is None or (after_epoch is not None and (info.epoch or 0) <= after_epoch):
        remaining_s = deadline_at - clock()
        if remaining_s <= 0:
            wanted = "a controller" if after_epoch is None else f"an epoch above {after_epoch}"
            raise TimeoutError(
                f"no controller with {wanted} within {timeout_s} s "
                f"(now: {info.controller or 'none'}, epoch {info.epoch})"
            )
        wait_s = min(remaining_s, MAX_WAIT_S)
        query = urlencode({"wait": f"{wait_s:.3f}"} if info.epoch is None else
                          {"wait": f"{wait_s:.3f}", "epoch": info.epoch})  # fmt: skip
        info = yield Call("GET", f"/v1/controller?{query}", typed(Controller), wait_s=wait_s)
    return info


def _key_path(key: str, query: dict[str, Any]) -> str:
    if not key:
        raise ValueError("a key must not be empty")
    path = "/v1/kv/" + quote(key, safe="/")
    return path + ("?" + urlencode(query) if query else "")


def kv_get(key: str) -> Call[KeyValue]:
    """`GET /v1/kv/<key>` (NotFound when absent)."""
    return Call("GET", _key_path(key, {}), typed(KeyValue))


def kv_put(key: str, value: bytes | str, fence: int | None = None, ephemeral: bool = False,
           session: str | None = None) -> Call[Written]:  # fmt: skip
    """`PUT /v1/kv/<key>[?fence=E][&ephemeral=1][&session=ID]`."""
    data = value.encode() if isinstance(value, str) else bytes(value)
    query: dict[str, Any] = {} if fence is None else {"fence": _fence(fence)}
    if ephemeral:
        query["ephemeral"] = 1
    if session is not None:
        query["session"] = session
    return Call("PUT", _key_path(key, query), typed(Written), data)


def kv_delete(key: str, fence: int | None = None) -> Call[Written]:
    """`DELETE /v1/kv/<key>[?fence=E]`."""
    query = {} if fence is None else {"fence": _fence(fence)}
    return Call("DELETE", _key_path(key, query), typed(Written))


def _fence(fence: int) -> int:
    if isinstance(fence, bool) or not isinstance(fence, int) or fence < 0:
        raise ValueError(f"a fence is an epoch, a non-negative int: got {fence!r}")
    return fence


def kv_listing(prefix: str = "") -> Steps[KeyListing]:
    """Every key under `prefix`, following the pages; the position is the
    first page's (the oldest), so a watch from it misses nothing."""
    items: list[KeyValue] = []
    first: KeyListing | None = None
    after = ""
    while True:
        query = urlencode({"prefix": prefix, "after": after, "limit": KV_PAGE})
        page: KeyListing = yield Call("GET", f"/v1/kv/?{query}", typed(KeyListing))
        first = first or page
        items.extend(page.items)
        if page.next_after is None:
            return KeyListing(items=items, index=first.index, run=first.run)
        after = page.next_after


def kv_list(prefix: str = "") -> Steps[list[KeyValue]]:
    """The keys under `prefix`, in key order."""
    listing: KeyListing = yield from kv_listing(prefix)
    return listing.items


def session_open(ttl_s: float, name: str = "", checks: Sequence[str] = ()) -> Call[SessionInfo]:
    """`POST /v1/session`.

    Raises:
        ValueError: `ttl_s` is not a number of seconds, or `checks` is one string.
    """
    if isinstance(ttl_s, bool) or not isinstance(ttl_s, (int, float)) or ttl_s <= 0:
        raise ValueError(f"ttl is a positive number of seconds: got {ttl_s!r}")
    if isinstance(checks, str):
        raise TypeError("checks is a list of check ids, not one string")
    body = _json({"ttl_s": ttl_s, "name": name, "checks": list(checks)})
    return Call("POST", "/v1/session", typed(SessionInfo), body, needs="/v1/session")


def _session_path(session_id: str, suffix: str = "") -> str:
    if not session_id:
        raise ValueError("a session id must not be empty")
    return "/v1/session/" + quote(session_id, safe="") + suffix


def session_renew(session_id: str) -> Call[SessionInfo]:
    """`PUT /v1/session/<id>/renew` (NotFound: the session is gone)."""
    return Call("PUT", _session_path(session_id, "/renew"), typed(SessionInfo), b"")


def session_info(session_id: str) -> Call[SessionInfo]:
    """`GET /v1/session/<id>`."""
    return Call("GET", _session_path(session_id), typed(SessionInfo))


def session_close(session_id: str) -> Call[SessionInfo]:
    """`DELETE /v1/session/<id>`: its keys are deleted at once."""
    return Call("DELETE", _session_path(session_id), typed(SessionInfo))


def sessions_listing() -> Steps[list[SessionInfo]]:
    """`GET /v1/sessions`: the open sessions."""
    listing: SessionListing = yield Call("GET", "/v1/sessions", typed(SessionListing),
                                         needs="/v1/sessions")  # fmt: skip
    return listing.sessions


def checks_listing() -> Call[CheckListing]:
    """`GET /v1/checks`."""
    return Call("GET", "/v1/checks", typed(CheckListing), needs="/v1/checks")


def check_update(check_id: str, status: str, note: str = "") -> Call[Any]:
    """`PUT /v1/check/<id>/pass|warn|fail` with `note` as the body.

    Raises:
        ValueError: `status` is none of pass, warn, fail (or passing,
            warning, critical), or `check_id` is empty.
    """
    op = CHECK_STATUSES.get(status)
    if op is None:
        raise ValueError(f"a check's status is pass, warn or fail: got {status!r}")
    if not check_id:
        raise ValueError("a check id must not be empty")
    path = f"/v1/check/{quote(check_id, safe='')}/{op}"
    return Call("PUT", path, _raw, note.encode())


def _payload(payload: bytes | str) -> bytes:
    return payload.encode() if isinstance(payload, str) else bytes(payload)


def _name_path(route: str, name: str) -> str:
    if not name:
        raise ValueError("a name must not be empty")
    return route + quote(name, safe="")


def user_event(name: str, payload: bytes | str = b"") -> Call[EventSent]:
    """`POST /v1/event/<name>`, the payload as the body."""
    return Call("POST", _name_path("/v1/event/", name), typed(EventSent), _payload(payload),
                needs="/v1/event")  # fmt: skip


def query(name: str, payload: bytes | str = b"", node: Pattern | None = None,
          tags: Mapping[str, Pattern] | None = None,
          timeout_s: float = 5.0) -> Call[QueryResult]:  # fmt: skip
    """`POST /v1/query/<name>?node=RE&tag=K=RE&timeout=S`; the agent holds
    the answer up to `timeout_s`.

    Raises:
        re.error: a pattern given as text does not compile (nothing is sent).
        ValueError: `timeout_s` is not in (0, 300], or a tag key is empty.
    """
    if isinstance(timeout_s, bool) or not isinstance(timeout_s, (int, float)) \
            or not 0 < timeout_s <= MAX_QUERY_TIMEOUT_S:  # fmt: skip
        raise ValueError(f"timeout is seconds above 0, at most {MAX_QUERY_TIMEOUT_S:g}: "
                         f"got {timeout_s!r}")  # fmt: skip
    params: list[tuple[str, str]] = []
    if node is not None:
        params.append(("node", _pattern_text(node)))
    for key, pattern in (tags or {}).items():
        if not key or "=" in key:
            raise ValueError(f"a tag key is not empty and has no '=': got {key!r}")
        params.append(("tag", f"{key}={_pattern_text(pattern)}"))
    params.append(("timeout", f"{timeout_s:g}"))
    path = _name_path("/v1/query/", name) + "?" + urlencode(params)
    return Call("POST", path, typed(QueryResult), _payload(payload), wait_s=timeout_s,
                needs="/v1/query")  # fmt: skip


def _pattern_text(pattern: Pattern) -> str:
    """The text of `pattern`, compiled first so that a bad one raises here."""
    return pattern.pattern if isinstance(pattern, re.Pattern) else re.compile(pattern).pattern


def unreachable(base: str, exc: BaseException, call: Call[Any] | None = None) -> ShoalError:
    """The error for an agent that gave no answer: Unavailable, or Unknown
    for a metadata write that may have reached it (anything but a refused
    connection: it may have been committed)."""
    reason = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
    if call is not None and call.unknown_unanswered and not isinstance(
            exc, ConnectionRefusedError | FileNotFoundError):  # fmt: skip
        return Unknown(f"no answer from the agent at {base} ({reason}): the write may have "
                       "been committed; read it back or retry with cas")  # fmt: skip
    return Unavailable(f"cannot reach the agent at {base}: {reason}")


def _meta_path(key: str, query: dict[str, Any]) -> str:
    if not key:
        raise ValueError("a key must not be empty")
    path = "/v1/meta/" + quote(key, safe="/")
    return path + ("?" + urlencode(query) if query else "")


def _cas(cas: int | None) -> dict[str, Any]:
    if cas is None:
        return {}
    if isinstance(cas, bool) or not isinstance(cas, int) or cas < 0:
        raise ValueError(f"cas is a mod revision, a non-negative int: got {cas!r}")
    return {"cas": cas}


def meta_get(key: str, stale: bool = False) -> Call[MetaValue]:
    """`GET /v1/meta/<key>[?stale]` (NotFound when absent)."""
    return Call("GET", _meta_path(key, {"stale": 1} if stale else {}), typed(MetaValue))


def meta_put(key: str, value: bytes | str, cas: int | None = None,
             session: str | None = None) -> Call[MetaWritten]:  # fmt: skip
    """`PUT /v1/meta/<key>[?cas=R][&session=ID]`."""
    data = value.encode() if isinstance(value, str) else bytes(value)
    query = _cas(cas)
    if session is not None:
        query["session"] = session
    return Call("PUT", _meta_path(key, query), typed(MetaWritten), data, needs="/v1/meta",
                unknown_unanswered=True)  # fmt: skip


def meta_delete(key: str, cas: int | None = None) -> Call[MetaWritten]:
    """`DELETE /v1/meta/<key>[?cas=R]`."""
    return Call("DELETE", _meta_path(key, _cas(cas)), typed(MetaWritten), needs="/v1/meta",
                unknown_unanswered=True)  # fmt: skip
