"""A small client of the agent's HTTP API, for the CLI (stdlib only, so that
client commands start fast). It speaks TCP, or a unix socket given as
`unix:/path`, and sends the API token when it has one."""

from __future__ import annotations

import http.client
import json
import socket
from collections.abc import Iterator
from typing import Any

from shoal.kernel.errors import ApiError


class _UnixConnection(http.client.HTTPConnection):
    """HTTP over a unix stream socket (the agent's `api_socket`)."""

    def __init__(self, path: str, timeout: float | None) -> None:
        super().__init__("localhost", timeout=timeout)
        self.path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        try:
            sock.connect(self.path)
        except OSError:
            sock.close()
            raise
        self.sock = sock


class ApiClient:
    """Talks to one agent.

    Args:
        where: "ADDR:PORT" as (host, port), or a unix socket path as a str.
        timeout_s: per request; None for a stream.
        token: the API token, sent as `Authorization: Bearer`.
    """

    def __init__(self, where: tuple[str, int] | str, timeout_s: float = 15.0,
                 token: str = "") -> None:  # fmt: skip
        self.where = where
        self.base = f"unix:{where}" if isinstance(where, str) else f"http://{where[0]}:{where[1]}"
        self.timeout_s = timeout_s
        self.token = token

    def get(self, path: str) -> Any:
        """GET `path` and return its JSON body."""
        return self.request("GET", path)

    def post(self, path: str, body: Any = None) -> Any:
        """POST `body` as JSON to `path` and return the JSON answer."""
        return self.request("POST", path, json.dumps(body if body is not None else {}).encode())

    def request(self, method: str, path: str, data: bytes | None = None) -> Any:
        """`method` on `path` with a raw body; the JSON answer.

        Raises:
            NotFoundError: a 404. ApiError: any other refusal, or no agent.
        """
        conn = self._connect(self.timeout_s)
        try:
            conn.request(method, path, body=data, headers=self._headers(data))
            resp = conn.getresponse()
            body = resp.read()
        except (OSError, http.client.HTTPException) as exc:
            raise ApiError(f"cannot reach the agent at {self.base}: {_reason(exc)}") from None
        finally:
            conn.close()
        if resp.status >= 400:
            try:
                message = json.loads(body).get("error", resp.reason)
            except (ValueError, AttributeError):
                message = resp.reason
            if resp.status == 404:
                raise NotFoundError(message)
            raise ApiError(f"the agent refused: {message}")
        return json.loads(body)

    def stream(self, path: str) -> Iterator[dict[str, Any]]:
        """Follow a newline-delimited JSON stream until the agent ends it."""
        conn = self._connect(None)
        try:
            conn.request("GET", path, headers=self._headers(None))
            resp = conn.getresponse()
            if resp.status >= 400:
                raise ApiError(f"the agent refused: {resp.status} {resp.reason}")
            for line in resp:
                if line.strip():
                    yield json.loads(line)
        except (OSError, http.client.HTTPException) as exc:
            raise ApiError(f"cannot reach the agent at {self.base}: {_reason(exc)}") from None
        finally:
            conn.close()

    def _connect(self, timeout_s: float | None) -> http.client.HTTPConnection:
        if isinstance(self.where, str):
            return _UnixConnection(self.where, timeout_s)
        return http.client.HTTPConnection(self.where[0], self.where[1], timeout=timeout_s)

    def _headers(self, data: bytes | None) -> dict[str, str]:
        headers = {"Content-Type": "application/json"} if data is not None else {}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        return headers


class NotFoundError(ApiError):
    """The agent answered 404 (for `shoal kv get`, a missing key)."""


def _reason(exc: Exception) -> str:
    return getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
