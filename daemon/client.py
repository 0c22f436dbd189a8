"""A small client of the agent's HTTP API, for the CLI (stdlib only, so that
client commands start fast)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

from daemon.errors import ApiError
from membership.output import Address


class ApiClient:
    """Talks to one agent at `addr`."""

    def __init__(self, addr: Address, timeout_s: float = 15.0) -> None:
        self.base = f"http://{addr[0]}:{addr[1]}"
        self.timeout_s = timeout_s

    def get(self, path: str) -> Any:
        """GET `path` and return its JSON body."""
        return self._call(urllib.request.Request(self.base + path))

    def request(self, method: str, path: str, data: bytes | None = None) -> Any:
        """`method` on `path` with a raw body; the JSON answer."""
        return self._call(urllib.request.Request(self.base + path, data=data, method=method))

    def post(self, path: str, body: Any = None) -> Any:
        """POST `body` as JSON to `path` and return the JSON answer."""
        data = json.dumps(body if body is not None else {}).encode()
        req = urllib.request.Request(
            self.base + path, data=data, headers={"Content-Type": "application/json"}
        )
        return self._call(req)

    def stream(self, path: str) -> Iterator[dict[str, Any]]:
        """Follow a newline-delimited JSON stream until the agent ends it."""
        try:
            with urllib.request.urlopen(self.base + path) as resp:
                for line in resp:
                    if line.strip():
                        yield json.loads(line)
        except (urllib.error.URLError, ConnectionError) as exc:
            raise ApiError(f"cannot reach the agent at {self.base}: {_reason(exc)}") from None

    def _call(self, req: urllib.request.Request) -> Any:
        try:
            with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
                return json.loads(resp.read())
        except urllib.error.HTTPError as exc:
            try:
                message = json.loads(exc.read()).get("error", exc.reason)
            except (ValueError, AttributeError):
                message = exc.reason
            if exc.code == 404:
                raise NotFoundError(message) from None
            raise ApiError(f"the agent refused: {message}") from None
        except (urllib.error.URLError, ConnectionError, TimeoutError) as exc:
            raise ApiError(f"cannot reach the agent at {self.base}: {_reason(exc)}") from None


class NotFoundError(ApiError):
    """The agent answered 404 (for `shoal kv get`, a missing key)."""


def _reason(exc: Exception) -> str:
    reason = getattr(exc, "reason", exc)
    return getattr(reason, "strerror", None) or str(reason)
