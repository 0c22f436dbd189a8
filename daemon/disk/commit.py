"""GroupCommit: many waiting writes share one fsync.

A client's write is acknowledged only once it is durable. Syncing the
write-ahead log once per write caps throughput at the disk's fsync rate
(a few thousand per second, the rate of sqlite with synchronous=FULL);
instead, every write applied before a sync *starts* is covered by it, so
the writes that arrive while one sync runs wait together for the next one
(the group commit of databases since IMS Fast Path).

The fsync runs on one dedicated thread (rocksdict releases the GIL during
it), so the event loop keeps answering probes meanwhile. Waiters get one
shared future per group and attach callbacks to it: a write costs a
callback, not a task, which matters at tens of thousands per second.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from queue import SimpleQueue

import structlog

log = structlog.get_logger("shoal")

# A sync slower than this is counted and logged (at most once a minute): the
# election waits for one before every grant, and needs two of them well
# within `election.request_timeout_s` (docs/operations.md, "Slow disks").
SLOW_SYNC_S = 0.1
_SLOW_LOG_EVERY_S = 60.0


class GroupCommit:
    """Runs `sync` for groups of waiters, one sync at a time."""

    def __init__(self, loop: asyncio.AbstractEventLoop, sync: Callable[[], None],
                 prepare: Callable[[], None] | None = None) -> None:  # fmt: skip
        """Commit with `sync`, a blocking call that makes all writes so far
        durable; `prepare`, if given, runs on the loop just before each sync
        starts (the store writes the group's staged records there, as one
        batch, while no fsync runs: storage/engine.py)."""
        self._loop = loop
        self._sync = sync
        self._prepare = prepare
        self._running: asyncio.Future[None] | None = None
        self._next: asyncio.Future[None] | None = None
        # One item per sync to start (False: stop). A SimpleQueue, not a
        # threading.Event: its put and get are single C calls, where
        # Event.set runs a Condition's Python code on the loop and its wait
        # wakes the thread into a second lock the loop still holds; that
        # hand-over was 8-9 % of the loop's samples under 32 writers
        # (py-spy; issue 25).
        self._wake: SimpleQueue[bool] = SimpleQueue()
        # (Not `_thread`: mypyc, which compiles this module, names the C
        # field after it, and `__thread` is a C keyword.)
        self._syncer = threading.Thread(target=self._worker, name="shoal-fsync", daemon=True)
        self._syncer.start()
        self.syncs = 0
        self.waits = 0
        self.slow_syncs = 0
        self.slowest_s = 0.0  # the longest sync so far
        self._slow_logged_at = -_SLOW_LOG_EVERY_S

    def waiter(self) -> asyncio.Future[None]:
        """A future that completes once every write made so far is durable
        (or fails with the sync's OSError). Shared: never cancel it."""
        self.waits += 1
        if self._running is None:
            fut = self._running = self._loop.create_future()
            self._start()
            return fut
        # The running sync may have started before our write: wait for the
        # next one, which every waiter arriving now shares.
        if self._next is None:
            self._next = self._loop.create_future()
        return self._next

    async def wait(self) -> None:
        """Return once every write made before this call is durable.

        Raises:
            OSError: the sync failed (disk full, IO error).
        """
        await asyncio.shield(self.waiter())

    async def close(self) -> None:
        """Wait for the syncs in flight, then stop the thread."""
        while self._running is not None:
            try:
                await asyncio.shield(self._running)
            except OSError:
                pass
        self._wake.put(False)
        await asyncio.to_thread(self._syncer.join, 5)

    def _start(self) -> None:
        self.syncs += 1
        if self._prepare is not None:
            try:
                self._prepare()
            except Exception as exc:  # rocksdict raises plain Exceptions on IO errors
                # This group fails as a failed sync would; the next one may start.
                self._loop.call_soon(self._finished, OSError(str(exc)), 0.0)
                return
        self._wake.put(True)

    def _worker(self) -> None:
        while self._wake.get():
            error: OSError | None = None
            started = time.monotonic()
            try:
                self._sync()
            except OSError as exc:
                error = exc
            except Exception as exc:  # rocksdict raises plain Exceptions on IO errors
                error = OSError(str(exc))
            took = time.monotonic() - started
            try:
                self._loop.call_soon_threadsafe(self._finished, error, took)
            except RuntimeError:  # the loop closed under us: shutting down
                return

    def _finished(self, error: OSError | None, took: float) -> None:
        self.slowest_s = max(self.slowest_s, took)
        if took > SLOW_SYNC_S:
            self.slow_syncs += 1
            now = time.monotonic()
            if now - self._slow_logged_at >= _SLOW_LOG_EVERY_S:
                self._slow_logged_at = now
                log.warning("slow disk: a write-ahead log sync took over 100 ms",
                            ms=round(took * 1000, 1), slow_syncs=self.slow_syncs)  # fmt: skip
        fut, self._running = self._running, None
        assert fut is not None
        if error is None:
            fut.set_result(None)
        else:
            log.error("write-ahead log sync failed; writes not acknowledged", error=str(error))
            fut.set_exception(error)
            fut.exception()  # retrieved, so a group nobody awaits logs nothing
        if self._next is not None:
            self._running, self._next = self._next, None
            self._start()


def slowed(sync: Callable[[], None], delay_s: float) -> Callable[[], None]:
    """`sync`, then a pause of `delay_s` (fault injection: a slow disk)."""
    if not delay_s:
        return sync

    def slow_sync() -> None:
        sync()
        time.sleep(delay_s)  # on the group-commit thread, never the loop

    return slow_sync
