"""Queries (`shoal query NAME PAYLOAD`): ask members, collect their answers.

Serf floods a query by gossip, collects acks and responses until a timeout
computed from the cluster size (6.4 s for 20 members on this machine) and
cannot say who it expected. Here the querying agent fixes the set of
members expected to answer when the query is sent (the members alive or
suspect in its view that match the filters, itself included), asks each
one directly over a stream (sealed when the cluster is encrypted), and
returns as soon as every one of them has answered, or at the timeout. The
result names each expected member: `answered` (with its answer),
`no-handler` (acknowledged without an answer), `error` (its handler
failed or its answer was too large), `silent` (no answer in time), or
`failed`/`left` when membership saw it go during the query.

A member answers with its `query:NAME=COMMAND` handler: the payload on
stdin, `SHOAL_QUERY_NAME` (and Serf's `SERF_EVENT=query`,
`SERF_QUERY_NAME`) in the environment; its stdout is the answer when it
exits 0, at most `MAX_ANSWER_BYTES` (a larger one is an `error` that says
so, on both sides).
"""

from __future__ import annotations

import asyncio
import base64
import os
import re
import time
from collections.abc import Callable
from typing import Any, ClassVar

import msgspec
import structlog

from shoal.daemon.config import AgentConfig
from shoal.daemon.handlers import run_command
from shoal.daemon.network.ask import NoAnswer, ask
from shoal.daemon.network.first_contact import FirstContact
from shoal.daemon.network.wire import Wire
from shoal.kernel import codec
from shoal.kernel.codec import DecodeError, u64
from shoal.membership.member import MemberState
from shoal.node.composition import ShoalNode

MAX_PAYLOAD_BYTES = 64 * 1024
MAX_ANSWER_BYTES = 64 * 1024
MAX_TIMEOUT_S = 300.0
FANOUT_CONCURRENCY = 64
_STATUSES = ("answered", "no-handler", "error")
log = structlog.get_logger("shoal")


class QueryRequest(msgspec.Struct, frozen=True):
    """Querying agent -> member, on a stream: run your handler for `name`."""

    id: int
    name: str
    payload: bytes
    timeout_ms: int
    expects_reply: ClassVar[bool] = True


class QueryReply(msgspec.Struct, frozen=True):
    """Member -> querying agent: `status` is one of _STATUSES."""

    id: int
    status: str
    answer: bytes
    error: str


def _text(v: object, limit: int) -> str:
    if type(v) is not str or len(v) > limit:
        raise DecodeError("shape", "bad text")
    return v


def _blob(v: object, limit: int) -> bytes:
    if type(v) is not bytes or len(v) > limit:
        raise DecodeError("shape", "bad bytes")
    return v


def _status(v: object) -> str:
    if v not in _STATUSES:
        raise DecodeError("shape", "bad query status")
    return str(v)


def _encode(msg: Any) -> list[Any] | None:
    match msg:
        case QueryRequest(ident, name, payload, timeout_ms):
            return [64, ident, name, payload, timeout_ms]
        case QueryReply(ident, status, answer, error):
            return [65, ident, status, answer, error]
    return None


codec.register(64, 5, lambda f: QueryRequest(
    u64(f[1]), _text(f[2], 128), _blob(f[3], MAX_PAYLOAD_BYTES), u64(f[4])), _encode)  # fmt: skip
codec.register(65, 5, lambda f: QueryReply(
    u64(f[1]), _status(f[2]), _blob(f[3], MAX_ANSWER_BYTES), _text(f[4], 4096)),
    _encode)  # fmt: skip


class QueryService:
    """Runs queries from this agent and answers those of others."""

    def __init__(self, wire: Wire, contact: FirstContact, node: Callable[[], ShoalNode],
                 config: Callable[[], AgentConfig]) -> None:  # fmt: skip
        self._wire = wire
        self._contact = contact
        self._node = node
        self._config = config
        self.asked = self.answered = 0
        # Internal requests between agents, by a name a user query cannot
        # have (it starts with "_"): name -> what answers it here.
        self.internal: dict[str, Callable[[bytes], QueryReply]] = {}

    async def ask_one(self, addr: tuple[str, int], name: str, payload: bytes,
                      timeout_s: float) -> QueryReply:  # fmt: skip
        """Send one request to the agent at `addr` (an internal one, say)."""
        ident = int.from_bytes(os.urandom(8), "big")
        request = QueryRequest(ident, name, payload, int(timeout_s * 1000))
        try:
            return await self._ask(addr, request, timeout_s)
        except TimeoutError:
            return QueryReply(ident, "error", b"", f"no answer within {timeout_s:g} s")

    async def run(self, name: str, payload: bytes, node_re: re.Pattern[str] | None,
                  tag_res: dict[str, re.Pattern[str]],
                  timeout_s: float) -> dict[str, Any]:  # fmt: skip
        """Ask every matching member; the outcome per member (module docstring)."""
        node = self._node()
        started = time.monotonic()
        ident = int.from_bytes(os.urandom(8), "big")
        request = QueryRequest(ident, name, payload, int(timeout_s * 1000))
        live = (MemberState.ALIVE, MemberState.SUSPECT)
        expected = {m.name: m.addr for m in node.members() if m.state in live
                    and (node_re is None or node_re.search(m.name))
                    and all(p.search(dict(m.tags).get(k, "")) and k in dict(m.tags)
                            for k, p in tag_res.items())}  # fmt: skip
        me = node.name
        limit = asyncio.Semaphore(FANOUT_CONCURRENCY)

        async def ask(member: str, addr: tuple[str, int]) -> tuple[str, QueryReply]:
            if member == me:
                return member, await self.answer(request)
            async with limit:
                return member, await self._ask(addr, request, timeout_s)

        tasks = [asyncio.ensure_future(ask(n, a)) for n, a in expected.items()]
        done, pending = await asyncio.wait(tasks, timeout=timeout_s) if tasks else (set(), set())
        for task in pending:
            task.cancel()
        replies = dict(t.result() for t in done if not t.cancelled() and t.exception() is None)
        states = {m.name: m.state for m in node.members()}
        members: dict[str, dict[str, Any]] = {}
        for member in sorted(expected):
            reply = replies.get(member)
            state = states.get(member)
            if reply is not None:
                members[member] = _reply_json(reply)
            elif state in (MemberState.DEAD, MemberState.LEFT):
                members[member] = {"status": "failed" if state is MemberState.DEAD else "left"}
            else:
                members[member] = {"status": "silent"}
        answered = sum(1 for v in members.values() if v["status"] == "answered")
        self.asked += 1
        return {"id": f"{ident:016x}", "name": name, "expected": len(expected),
                "answered": answered, "duration_s": round(time.monotonic() - started, 4),
                "complete": not pending, "members": members}  # fmt: skip

    async def answer(self, request: QueryRequest) -> QueryReply:
        """Run this member's handler for `request` (no handler: say so)."""
        internal = self.internal.get(request.name)
        if internal is not None:
            return internal(request.payload)
        cfg = self._config()
        commands = [c for f, c in cfg.event_handlers if f == f"query:{request.name}"]
        if not commands:
            return QueryReply(request.id, "no-handler", b"", "")
        self.answered += 1
        me = cfg.node_name
        env = {"SHOAL_EVENT": "query", "SHOAL_QUERY_NAME": request.name, "SHOAL_SELF_NAME": me,
               "SHOAL_QUERY_ID": f"{request.id:016x}", "SERF_EVENT": "query",
               "SERF_QUERY_NAME": request.name, "SERF_SELF_NAME": me}  # fmt: skip
        timeout_s = max(0.1, min(request.timeout_ms / 1000, MAX_TIMEOUT_S))
        try:
            done = await run_command(commands[0], env, request.payload, timeout_s,
                                     merge_stderr=False)  # fmt: skip
        except OSError as exc:
            return QueryReply(request.id, "error", b"", f"the handler could not start: {exc}")
        if done.returncode is None:
            return QueryReply(request.id, "error", b"", f"the handler ran over {timeout_s:g} s")
        out = done.stdout
        if done.returncode != 0:
            tail = done.stderr.decode(errors="replace")[-500:]
            return QueryReply(request.id, "error", b"", f"exit {done.returncode}: {tail}")
        if len(out) > MAX_ANSWER_BYTES:
            log.error("query answer too large", query=request.name, bytes=len(out))
            return QueryReply(request.id, "error", b"", f"the answer is {len(out)} bytes, over "
                              f"the {MAX_ANSWER_BYTES}-byte limit")  # fmt: skip
        return QueryReply(request.id, "answered", out, "")

    async def _ask(self, addr: tuple[str, int], request: QueryRequest,
                   timeout_s: float) -> QueryReply:  # fmt: skip
        """The member's answer (TimeoutError: it stays silent)."""
        try:
            return await ask(self._wire, self._contact, addr, request, QueryReply, timeout_s)
        except NoAnswer as exc:
            return QueryReply(request.id, "error", b"", str(exc))


def _reply_json(reply: QueryReply) -> dict[str, Any]:
    out: dict[str, Any] = {"status": reply.status}
    if reply.status == "answered":
        try:
            out["answer"] = reply.answer.decode()
        except UnicodeDecodeError:
            out["answer"] = None
        out["answer_base64"] = base64.b64encode(reply.answer).decode()
    if reply.error:
        out["error"] = reply.error
    return out
