"""The API of sessions and health checks (daemon/sessions.py, daemon/health.py).

    POST   /v1/session {"ttl_s": 10, "name": "", "checks": []}   open a session
    PUT    /v1/session/<id>/renew      keep it alive another ttl_s (404: gone)
    GET    /v1/session/<id>            one session
    DELETE /v1/session/<id>            close it: its keys are deleted at once
    GET    /v1/sessions[?all]          the open sessions opened here (all: the cluster's)
    GET    /v1/checks                  this agent's checks and the member's health
    PUT    /v1/check/<id>/pass|warn|fail   a TTL check's status (body: a note)

Keys join a session with `PUT /v1/kv/<key>?session=<id>` (api/server.py).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable
from typing import Any

from shoal.daemon.api.answers import HttpError, Request, Result
from shoal.daemon.api.port import AgentPort
from shoal.daemon.health import CRITICAL, PASSING, WARNING
from shoal.daemon.logsessions import parse_id
from shoal.daemon.sessions import SessionError

SESSION_PREFIX = "/v1/session/"
CHECK_PREFIX = "/v1/check/"
_TTL_STATUS = {"pass": PASSING, "warn": WARNING, "fail": CRITICAL}
_NOTE_BYTES = 4096


def open_session(agent: AgentPort, request: Request) -> Result | Awaitable[Result]:
    """`POST /v1/session`."""
    usage = 'body must be JSON: {"ttl_s": SECONDS, "name": "...", "checks": ["ID", ...]}'
    try:
        body = json.loads(request.body or b"{}")
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise HttpError(400, usage) from None
    if not isinstance(body, dict):
        raise HttpError(400, usage)
    ttl = body.get("ttl_s", 10)
    name = body.get("name", "")
    checks = body.get("checks", [])
    if isinstance(ttl, bool) or not isinstance(ttl, (int, float)):
        raise HttpError(400, f"ttl_s must be a number of seconds, not {ttl!r}")
    if not isinstance(name, str) or len(name) > 128:
        raise HttpError(400, "name must be a string of at most 128 characters")
    if not isinstance(checks, list) or not all(isinstance(c, str) for c in checks):
        raise HttpError(400, usage)
    liveness = agent.liveness
    unknown = [c for c in checks if c not in liveness.checks.checks]
    if unknown:
        raise HttpError(400, f"no check {unknown[0]!r} on this agent (GET /v1/checks)")
    critical = [c for c in checks if liveness.checks.checks[c].status == CRITICAL]
    if critical:
        raise HttpError(409, f"check {critical[0]!r} is critical: a session bound to it "
                        "would end at once")  # fmt: skip
    in_log = agent.log_sessions
    if in_log is not None and in_log.active():  # replicated (daemon/logsessions.py)
        return _answered(in_log.open(float(ttl), name, tuple(checks)))
    if in_log is not None:  # the log is on here, the cluster's level not yet known
        return _settled_open(agent, float(ttl), name, tuple(checks))
    return 200, _open_here(agent, float(ttl), name, tuple(checks))


def _open_here(agent: AgentPort, ttl: float, name: str, checks: tuple[str, ...]) -> Any:
    """A session of this agent's own table (daemon/sessions.py), as JSON."""
    try:
        session = agent.liveness.open_session(ttl, name, checks)
    except SessionError as exc:
        raise HttpError(exc.status, str(exc)) from None
    return session.to_json(agent.loop_time())


async def _settled_open(agent: AgentPort, ttl: float, name: str,
                        checks: tuple[str, ...]) -> tuple[int, Any]:  # fmt: skip
    """Open in the log once this agent knows the cluster speaks it, else here."""
    in_log = agent.log_sessions
    assert in_log is not None
    if await in_log.settle():
        return 200, await in_log.open(ttl, name, checks)
    return 200, _open_here(agent, ttl, name, checks)


async def _answered(pending: Awaitable[dict[str, Any]]) -> tuple[int, Any]:
    return 200, await pending


def list_sessions(agent: AgentPort, request: Request) -> Result:
    """`GET /v1/sessions[?all]`: the sessions opened on this agent (its own
    table's and the log's); with `all`, the log's of every agent too."""
    now = agent.loop_time()
    own = [s.to_json(now) for s in agent.liveness.sessions.all()]
    in_log = agent.log_sessions
    logged = [] if in_log is None else in_log.all("all" in request.query)
    return 200, {"sessions": own + logged}


def session_op(agent: AgentPort, request: Request) -> Result | Awaitable[Result]:
    """`/v1/session/<id>[/renew]`: renew, read or close one session."""
    rest = request.path[len(SESSION_PREFIX) :]
    session_id, _, op = rest.partition("/")
    liveness = agent.liveness
    sid = parse_id(session_id)
    in_log = agent.log_sessions
    if sid is not None and in_log is not None:
        if op == "renew" and request.method == "PUT":
            return _answered(in_log.renew(sid))
        if not op and request.method == "GET":
            return 200, in_log.get(sid)
        if not op and request.method == "DELETE":
            return _answered(in_log.close(sid))
        raise HttpError(405 if op in ("", "renew") else 404, f"no {request.method} {request.path}")
    try:
        if op == "renew" and request.method == "PUT":
            return 200, liveness.renew(session_id).brief(agent.loop_time())
        elif not op and request.method == "GET":
            session = liveness.sessions.get(session_id)
        elif not op and request.method == "DELETE":
            session = liveness.close(session_id)
        else:
            raise HttpError(405 if op in ("", "renew") else 404,
                            f"no {request.method} {request.path}")  # fmt: skip
    except SessionError as exc:
        raise HttpError(exc.status, str(exc)) from None
    return 200, session.to_json(agent.loop_time())


def list_checks(agent: AgentPort, request: Request) -> Result:
    """`GET /v1/checks`."""
    checks = agent.liveness.checks
    return 200, {"health": checks.health or PASSING,
                 "checks": [s.to_json() for s in checks.checks.values()]}  # fmt: skip


def check_op(agent: AgentPort, request: Request) -> Result:
    """`PUT /v1/check/<id>/pass|warn|fail`: the application reports."""
    check_id, _, op = request.path[len(CHECK_PREFIX) :].partition("/")
    if request.method != "PUT" or op not in _TTL_STATUS:
        raise HttpError(404 if op not in _TTL_STATUS else 405,
                        f"no {request.method} {request.path}: PUT {CHECK_PREFIX}<id>/pass, "
                        "warn or fail")  # fmt: skip
    if len(request.body) > _NOTE_BYTES:
        raise HttpError(413, f"a note is at most {_NOTE_BYTES} bytes")
    note = request.body.decode(errors="replace")
    try:
        state = agent.liveness.checks.update_ttl(check_id, _TTL_STATUS[op], note)
    except KeyError:
        raise HttpError(404, f"no ttl check {check_id[:64]!r} on this agent "
                        "(GET /v1/checks)") from None  # fmt: skip
    out: dict[str, Any] = state.to_json()
    return 200, out
