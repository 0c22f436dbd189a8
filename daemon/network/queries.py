"""Queries (`shoal query NAME PAYLOAD`): ask members, collect their answers.

Serf floods a query by gossip, collects acks and responses until a timeout
computed from the cluster size (6.4 s for 20 members on this machine) and
cannot say who it expected. Here the querying agent asks each expected
member directly over a stream (sealed when the cluster is encrypted) and
returns as soon as every one of them has answered, or at the timeout. The
round's state, its messages and its result are pure (services/queries.py);
this module is the IO: the streams and the handler processes.

A member answers with its `query:NAME=COMMAND` handler: the payload on
stdin, `SHOAL_QUERY_NAME` (and Serf's `SERF_EVENT=query`,
`SERF_QUERY_NAME`) in the environment; its stdout is the answer when it
exits 0, at most `MAX_ANSWER_BYTES` (a larger one is an `error` that says
so, on both sides).
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from typing import Any

import structlog

from shoal.daemon.config import AgentConfig
from shoal.daemon.handlers import run_command
from shoal.daemon.network.ask import NoAnswer, ask
from shoal.daemon.network.first_contact import FirstContact
from shoal.daemon.network.wire import Wire
from shoal.node.composition import ShoalNode
from shoal.services.queries import (
    MAX_ANSWER_BYTES,
    MAX_TIMEOUT_S,
    QueryReply,
    QueryRequest,
    QueryRound,
)

FANOUT_CONCURRENCY = 64
log = structlog.get_logger("shoal")


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
        ident = self._node().services.rng.getrandbits(64)
        request = QueryRequest(ident, name, payload, int(timeout_s * 1000))
        try:
            return await self._ask(addr, request, timeout_s)
        except TimeoutError:
            return QueryReply(ident, "error", b"", f"no answer within {timeout_s:g} s")

    async def run(self, name: str, payload: bytes, node_re: re.Pattern[str] | None,
                  tag_res: dict[str, re.Pattern[str]],
                  timeout_s: float) -> dict[str, Any]:  # fmt: skip
        """Ask every matching member; the outcome per member (services/queries.py)."""
        node = self._node()
        loop = asyncio.get_running_loop()
        request = QueryRequest(node.services.rng.getrandbits(64), name, payload,
                               int(timeout_s * 1000))  # fmt: skip
        query = QueryRound(request, node.members(), node_re, tag_res, loop.time())
        me = node.name
        limit = asyncio.Semaphore(FANOUT_CONCURRENCY)

        async def ask(member: str, addr: tuple[str, int]) -> None:
            if member == me:
                query.answered(member, await self.answer(request))
                return
            async with limit:
                try:
                    query.answered(member, await self._ask(addr, request, timeout_s))
                except TimeoutError:
                    pass  # silent

        tasks = [asyncio.ensure_future(ask(n, a)) for n, a in query.expected.items()]
        if tasks:
            _, pending = await asyncio.wait(tasks, timeout=timeout_s)
            for task in pending:
                task.cancel()
        self.asked += 1
        return query.outcome({m.name: m.state for m in node.members()}, loop.time())

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
