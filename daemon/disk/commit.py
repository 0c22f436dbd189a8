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

The thread syncs back to back while groups wait: a sync starts as soon as
the last one ends, covering every group handed to it meanwhile, not once
the loop has answered the last group and handed it the next. With the
loop in the path (one sync at a time, started by the loop), a sync cycle
was about 1.15 ms at 32 writers on this VM against a 0.2-0.3 ms fdatasync:
the rest was the loop finishing its pass before it noticed the sync had
ended (issue 25).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import deque
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
    """Runs `sync` for groups of waiters, back to back on one thread."""

    def __init__(self, loop: asyncio.AbstractEventLoop, sync: Callable[[], None]) -> None:
        """Commit with `sync`, a blocking call, run on the thread, that makes
        all writes so far durable (the store writes its staged records as
        one batch, then fsyncs: storage/engine.py)."""
        self._loop = loop
        self._sync = sync
        # The group that writes made in this pass of the loop join; it is
        # handed over at the end of the pass (`_hand_over`).
        self._open: asyncio.Future[None] | None = None
        # Groups handed over and not yet durable, oldest first, with their
        # numbers; `_handed` is the newest number, read by the sync thread.
        self._waiting: deque[tuple[int, asyncio.Future[None]]] = deque()
        self._handed = 0
        # One item per group handed over (False: stop). A SimpleQueue, not a
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
        # Called with a group's future as soon as its sync ends, in the
        # same pass of the loop (`after_sync`).
        self._calls: dict[asyncio.Future[None], list[Callable[[asyncio.Future[None]], None]]] = {}
        # Called when the open group is handed over, before the sync thread
        # is woken: writes deferred to then (`Persister`) go in first.
        self.before_hand_over: Callable[[], None] | None = None

    def waiter(self) -> asyncio.Future[None]:
        """A future that completes once every write made so far is durable
        (or fails with the sync's OSError). Shared: never cancel it."""
        self.waits += 1
        if self._open is None:
            self._open = self._loop.create_future()
            self._loop.call_soon(self._hand_over)
        return self._open

    def after_sync(self, fut: asyncio.Future[None],
                   call: Callable[[asyncio.Future[None]], None]) -> None:  # fmt: skip
        """Call `call(fut)` as soon as the sync of group `fut` (a `waiter()`)
        ends, in the pass of the loop that learns it, not in the next one as
        a done callback would: the sends a follower's acknowledgement rides
        on leave one loop pass sooner (docs/performance.md, "The metadata
        log")."""
        self._calls.setdefault(fut, []).append(call)

    async def wait(self) -> None:
        """Return once every write made before this call is durable.

        Raises:
            OSError: the sync failed (disk full, IO error).
        """
        await asyncio.shield(self.waiter())

    async def close(self) -> None:
        """Wait for the syncs in flight, then stop the thread."""
        while self._open is not None or self._waiting:
            fut = self._open if self._open is not None else self._waiting[-1][1]
            try:
                await asyncio.shield(fut)
            except OSError:
                pass
        self._wake.put(False)
        await asyncio.to_thread(self._syncer.join, 5)

    def hand_over_now(self) -> None:
        """Give the open group to the sync thread now, not at the end of
        this pass of the loop: called after a flush of the metadata log has
        sent its appends (daemon/meta.py, `MetaService.flush_soon`), so that a
        lone write's sync starts once its messages are out. Traced (p50 of a
        lone put, µs after the controller took it): its own write handed over
        at 407-431 before, 336-384 after; a follower's, after its append
        arrived, at 122-178 before, 112-133 after (docs/performance.md, "A
        lone put, leg by leg")."""
        if self._open is not None:
            self._hand_over()

    def _hand_over(self) -> None:
        """Give the open group (the writes of one pass of the loop, or of
        one flush: `hand_over_now`) to the sync thread."""
        fut, self._open = self._open, None
        if fut is None:
            return  # handed over already (`hand_over_now`)
        if self.before_hand_over is not None:
            try:
                self.before_hand_over()
            except Exception as exc:  # the deferred writes failed: so does the group
                log.error("write-ahead log write failed; writes not acknowledged", error=str(exc))
                fut.set_exception(OSError(str(exc)))
                fut.exception()
                self._call(fut)
                return
        self._handed += 1
        self._waiting.append((self._handed, fut))
        self._wake.put(True)

    def _worker(self) -> None:
        """Sync while groups are handed over: each sync covers every group
        handed over before it starts, and the next one starts at once,
        without waiting for the loop to answer the last group."""
        wake = self._wake
        synced = 0
        while wake.get():
            while not wake.empty():
                if not wake.get():
                    wake.put(False)
                    break
            upto = self._handed  # staged before it was counted
            if upto <= synced:
                continue  # a group the last sync covered already
            synced = upto
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
                self._loop.call_soon_threadsafe(self._finished, upto, error, took)
            except RuntimeError:  # the loop closed under us: shutting down
                return

    def _finished(self, upto: int, error: OSError | None, took: float) -> None:
        self.syncs += 1
        self.slowest_s = max(self.slowest_s, took)
        if took > SLOW_SYNC_S:
            self.slow_syncs += 1
            now = time.monotonic()
            if now - self._slow_logged_at >= _SLOW_LOG_EVERY_S:
                self._slow_logged_at = now
                log.warning("slow disk: a write-ahead log sync took over 100 ms",
                            ms=round(took * 1000, 1), slow_syncs=self.slow_syncs)  # fmt: skip
        if error is not None:
            log.error("write-ahead log sync failed; writes not acknowledged", error=str(error))
        waiting = self._waiting
        while waiting and waiting[0][0] <= upto:
            fut = waiting.popleft()[1]
            if error is None:
                fut.set_result(None)
            else:
                fut.set_exception(error)
                fut.exception()  # retrieved, so a group nobody awaits logs nothing
            self._call(fut)

    def _call(self, fut: asyncio.Future[None]) -> None:
        """Run the `after_sync` calls of group `fut`, now done."""
        for call in self._calls.pop(fut, ()):
            try:
                call(fut)
            except Exception:  # as the loop does for a done callback
                log.exception("a call after a write-ahead log sync failed")


def slowed(sync: Callable[[], None], delay_s: float) -> Callable[[], None]:
    """`sync`, then a pause of `delay_s` (fault injection: a slow disk)."""
    if not delay_s:
        return sync

    def slow_sync() -> None:
        sync()
        time.sleep(delay_s)  # on the group-commit thread, never the loop

    return slow_sync
