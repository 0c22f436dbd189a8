"""Query rounds (`shoal query NAME PAYLOAD`): the messages and the state of a round.

Theory of operation. The querying member fixes the set of members expected
to answer when the query is sent (the members alive or suspect in its
view that match the filters, itself included) and a deadline; it then
holds each answer as it comes. The round is complete when every expected
member has answered, and over at the deadline. Its outcome names each
expected member: `answered` (with its answer), `no-handler` (acknowledged
without an answer), `error` (its handler failed or its answer was too
large), `silent` (no answer in time), or `failed`/`left` when membership
saw it go during the query. Asking over streams and running the handler
are IO (daemon/network/queries.py); this module is told each answer and
the time.
"""

from __future__ import annotations

import base64
import re
from typing import Any, ClassVar

import msgspec

from shoal.kernel import codec
from shoal.kernel.codec import DecodeError, u64
from shoal.kernel.contract import Address
from shoal.membership.member import MemberState, MemberView

MAX_PAYLOAD_BYTES = 64 * 1024
MAX_ANSWER_BYTES = 64 * 1024
MAX_TIMEOUT_S = 300.0
FANOUT_CONCURRENCY = 64
_STATUSES = ("answered", "no-handler", "error")


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


class QueryRound:
    """One query from this member: who is expected, who answered, the deadline.

    Args:
        request: what is asked.
        members: this member's view when the query is sent.
        node_re: only members whose name matches (None: all).
        tag_res: only members with each tag, its value matching.
        now: when the query is sent.
    """

    def __init__(self, request: QueryRequest, members: list[MemberView],
                 node_re: re.Pattern[str] | None, tag_res: dict[str, re.Pattern[str]],
                 now: float) -> None:  # fmt: skip
        self.request = request
        live = (MemberState.ALIVE, MemberState.SUSPECT)
        self.expected: dict[str, Address] = {
            m.name: m.addr for m in members if m.state in live
            and (node_re is None or node_re.search(m.name))
            and all(k in dict(m.tags) and p.search(dict(m.tags)[k]) for k, p in tag_res.items())
        }  # fmt: skip
        self.started_at = now
        self.deadline_at = now + request.timeout_ms / 1000
        self.replies: dict[str, QueryReply] = {}

    def answered(self, member: str, reply: QueryReply) -> None:
        """`member` answered (an answer from one not expected is ignored)."""
        if member in self.expected and member not in self.replies:
            self.replies[member] = reply

    @property
    def complete(self) -> bool:
        """Whether every expected member has answered."""
        return len(self.replies) == len(self.expected)

    def outcome(self, states: dict[str, MemberState], now: float) -> dict[str, Any]:
        """The result `shoal query` shows (module docstring), with the
        members' states in this member's view at the end."""
        members: dict[str, dict[str, Any]] = {}
        for member in sorted(self.expected):
            reply = self.replies.get(member)
            state = states.get(member)
            if reply is not None:
                members[member] = _reply_json(reply)
            elif state in (MemberState.DEAD, MemberState.LEFT):
                members[member] = {"status": "failed" if state is MemberState.DEAD else "left"}
            else:
                members[member] = {"status": "silent"}
        answered = sum(1 for v in members.values() if v["status"] == "answered")
        return {"id": f"{self.request.id:016x}", "name": self.request.name,
                "expected": len(self.expected), "answered": answered,
                "duration_s": round(now - self.started_at, 4), "complete": self.complete,
                "members": members}  # fmt: skip


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
