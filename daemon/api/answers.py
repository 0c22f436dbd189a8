"""What an API route takes and returns, and how an answer is rendered as
HTTP/1.1 bytes: the vocabulary shared by the routes and the server
(api/http.py), kept apart so that each stays one job and under the size
the style guide asks.

A handler returns `(status, object)`, or an awaitable of it, or a `Stream`,
a `Deferred` or a `Raw`. Raising `HttpError` answers with its status and
`{"error": message}`.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import msgspec

REASONS = {200: b"OK", 400: b"Bad Request", 401: b"Unauthorized", 404: b"Not Found",
            405: b"Method Not Allowed",
            408: b"Request Timeout", 409: b"Conflict", 410: b"Gone", 413: b"Payload Too Large",
            429: b"Too Many Requests",
            431: b"Request Header Fields Too Large", 500: b"Internal Server Error",
            503: b"Service Unavailable", 504: b"Gateway Timeout"}  # fmt: skip


class HttpError(Exception):
    """A request answered with a 4xx/5xx JSON error."""

    def __init__(self, status: int, message: str, **fields: Any) -> None:
        super().__init__(message)
        self.status = status
        self.fields = fields  # more members of the JSON error body

    def body(self) -> dict[str, Any]:
        """The JSON error body: `error` and the fields."""
        return {"error": str(self), **self.fields}


class Request(msgspec.Struct):
    """One parsed request."""

    method: str
    path: str  # still percent-encoded
    query: dict[str, list[str]]
    body: bytes
    authorization: str = ""  # the Authorization header, if any


class Raw(msgspec.Struct):
    """A non-JSON answer (the Prometheus text format)."""

    status: int
    content_type: str
    body: bytes


class Deferred(msgspec.Struct):
    """An answer ready when `future` completes: `status` and `body`, a
    rendered JSON object, are sent then (a failed future is a 500). The
    key-value writes of a group commit share one future, and one callback
    on it answers all of them (`DeferredGroups`)."""

    future: asyncio.Future[Any]
    status: int
    body: bytes


class Stream(msgspec.Struct):
    """A streaming answer: each item of `lines` is sent as one JSON line
    (bytes items as they are: a line already rendered)."""

    lines: AsyncIterator[Any]


Result = tuple[int, Any] | Stream | Deferred | Raw
Handler = Callable[[Request], Result | Awaitable[Result]]


def json_response(status: int, obj: Any, keep_alive: bool = True) -> bytes:
    """A complete HTTP/1.1 response with a JSON body."""
    return body_response(status, json.dumps(obj).encode(), keep_alive)


def body_response(status: int, body: bytes, keep_alive: bool = True) -> bytes:
    """A complete HTTP/1.1 response with `body`, rendered JSON."""
    return b"HTTP/1.1 %d %s\r\ncontent-type: application/json\r\ncontent-length: %d\r\n%s\r\n%s" % (
        status, REASONS.get(status, b""), len(body),
        b"" if keep_alive else b"connection: close\r\n", body,
    )  # fmt: skip
