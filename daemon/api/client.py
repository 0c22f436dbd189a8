"""The API client's old name, kept for the tests and benches that use it:
`ApiClient` is a thin adapter over `shoal.client.Client` (where the client
lives now, docs/client.md) that raises the CLI's `ApiError` and
`NotFoundError`, as it did before."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from shoal.client import Client, NotFound, ShoalError
from shoal.kernel.errors import ApiError


class NotFoundError(ApiError):
    """The agent answered 404 (for `shoal kv get`, a missing key)."""


class ApiClient:
    """Talks to one agent (new code: use `shoal.client.Client`).

    Args:
        where: "ADDR:PORT" as (host, port), or a unix socket path as a str.
        timeout_s: per request.
        token: the API token, sent as `Authorization: Bearer`.
    """

    def __init__(self, where: tuple[str, int] | str, timeout_s: float = 15.0,
                 token: str = "") -> None:  # fmt: skip
        addr = f"unix:{where}" if isinstance(where, str) else f"{where[0]}:{where[1]}"
        self.client = Client(addr, token=token, timeout=timeout_s)
        self.base = self.client.base

    def get(self, path: str) -> Any:
        """GET `path` and return its JSON body."""
        return self.request("GET", path)

    def post(self, path: str, body: Any = None) -> Any:
        """POST `body` as JSON to `path` and return the JSON answer."""
        return self.request("POST", path, None, body if body is not None else {})

    def request(self, method: str, path: str, data: bytes | None = None, body: Any = None) -> Any:
        """`method` on `path` with a raw body (or `body` as JSON); the JSON answer.

        Raises:
            NotFoundError: a 404. ApiError: any other refusal, or no agent.
        """
        from shoal.client import calls

        call = calls.Call(method, path, calls._raw, data) if body is None else \
            calls.raw(method, path, body)  # fmt: skip
        with _translated():
            return self.client.send(call)

    def stream(self, path: str) -> Iterator[dict[str, Any]]:
        """Follow `/v1/events` until the agent ends it."""
        assert path == "/v1/events", path
        with _translated():
            yield from self.client.events()


@contextmanager
def _translated() -> Iterator[None]:
    try:
        yield
    except NotFound as exc:
        raise NotFoundError(exc.message) from None
    except ShoalError as exc:
        refused = exc.status is not None
        raise ApiError(f"the agent refused: {exc.message}" if refused else exc.message) from None
