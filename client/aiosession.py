"""`AsyncSession`: a session kept alive by an asyncio task (the schedule and
its reasons: session.py). It knows its client only as `AsyncSessionClient`."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Sequence
from types import TracebackType
from typing import Protocol, TypeVar

from shoal.client import calls
from shoal.client.errors import NotFound, ShoalError
from shoal.client.session import Keepalive
from shoal.client.types import MetaWritten, SessionInfo, Written

T = TypeVar("T")


class AsyncSessionClient(Protocol):
    """What an `AsyncSession` asks of the client that opened it (`AsyncClient`)."""

    timeout: float  # seconds a call may take

    async def send(self, call: calls.Call[T]) -> T:
        """One request and its decoded answer (ShoalError on a refusal)."""
        ...


class AsyncSession:
    """`Session` for asyncio: it opens at `async with` (or `await
    session.open()`), and a task renews it until `close()`.

    Attributes: as `Session`'s; `on_lost` is called in the event loop.
    """

    def __init__(self, client: AsyncSessionClient, ttl: float = 10.0, name: str = "",
                 checks: Sequence[str] = (),
                 on_lost: Callable[[AsyncSession], object] | None = None) -> None:  # fmt: skip
        self._client = client
        self._open_call = calls.session_open(ttl, name, checks)  # bad arguments raise here
        self.id = ""
        self.ttl_s = float(ttl)
        self.name = name
        self.on_lost = on_lost
        self.reason = ""
        self._lost = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._closed = False

    async def open(self) -> AsyncSession:
        """Open the session on the agent and start renewing it (once)."""
        if self._task is None:
            info = await self._client.send(self._open_call)
            self.id, self.ttl_s = info.id, info.ttl_s
            keepalive = Keepalive(info.ttl_s, asyncio.get_running_loop().time())
            self._task = asyncio.create_task(self._run(keepalive),
                                             name=f"shoal-session-{self.id[:8]}")  # fmt: skip
        return self

    @property
    def lost(self) -> bool:
        """See `Session.lost`."""
        return self._lost.is_set()

    async def wait_lost(self) -> None:
        """Return once the session is lost (wrap in asyncio.timeout to bound it)."""
        await self._lost.wait()

    async def put(self, key: str, value: bytes | str) -> Written:
        """See `Session.put`."""
        try:
            return await self._client.send(calls.kv_put(key, value, session=self.id))
        except NotFound as exc:
            self._lose(f"the agent no longer holds the session: {exc.message}")
            raise

    async def meta_put(self, key: str, value: bytes | str, cas: int | None = None) -> MetaWritten:
        """See `Session.meta_put`."""
        try:
            return await self._client.send(calls.meta_put(key, value, cas, session=self.id))
        except NotFound as exc:
            self._lose(f"the session has ended: {exc.message}")
            raise

    async def info(self) -> SessionInfo:
        """See `Session.info`."""
        return await self._client.send(calls.session_info(self.id))

    async def close(self) -> None:
        """See `Session.close`."""
        if self._closed or self._task is None:
            self._closed = True
            return
        self._closed = True
        if self._task is not asyncio.current_task():
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if not self.lost:
            with contextlib.suppress(NotFound):
                await self._client.send(calls.session_close(self.id))

    async def __aenter__(self) -> AsyncSession:
        return await self.open()

    async def __aexit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:  # fmt: skip
        await self.close()

    def __repr__(self) -> str:
        state = f"lost: {self.reason}" if self.lost else "open" if self._task else "not open"
        return f"<AsyncSession {self.id or '?'} ttl={self.ttl_s:g}s {state}>"

    async def _run(self, keepalive: Keepalive) -> None:
        loop = asyncio.get_running_loop()
        delay_s = keepalive.interval_s
        renew_timeout_s = min(self._client.timeout, max(1.0, keepalive.interval_s))
        while True:
            await asyncio.sleep(delay_s)
            try:
                async with asyncio.timeout(renew_timeout_s):
                    await self._client.send(calls.session_renew(self.id))
            except NotFound as exc:
                self._lose(f"the agent no longer holds the session: {exc.message}")
                return
            except (ShoalError, TimeoutError) as exc:
                now = loop.time()
                if keepalive.expired(now):
                    last = getattr(exc, "message", "") or "timed out"
                    self._lose(f"no renewal reached the agent within the TTL ({self.ttl_s:g} s; "
                               f"last: {last}): it has ended the session")  # fmt: skip
                    return
                delay_s = keepalive.retry_delay(now)
                continue
            keepalive.renewed(loop.time())
            delay_s = keepalive.interval_s

    def _lose(self, reason: str) -> None:
        if self._lost.is_set():
            return
        self.reason = reason
        self._lost.set()
        if self.on_lost is not None:
            self.on_lost(self)
