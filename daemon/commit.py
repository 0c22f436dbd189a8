"""GroupCommit: many waiting writes share one fsync.

A client's write is acknowledged only once it is durable. Syncing the
write-ahead log once per write caps throughput at the disk's fsync rate
(a few thousand per second, the rate of sqlite with synchronous=FULL);
instead, every write applied before a sync *starts* is covered by it, so
the writes that arrive while one sync runs wait together for the next one
(the group commit of databases since IMS FastPath). The fsync runs in a
worker thread; rocksdict releases the GIL during it, so the event loop
keeps answering probes meanwhile.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable


class GroupCommit:
    """Runs `sync` for groups of waiters, one sync at a time."""

    def __init__(self, sync: Callable[[], None]) -> None:
        """Commit with `sync`, a blocking call that makes all writes so far durable."""
        self._sync = sync
        self._running: asyncio.Future[None] | None = None
        self._next: asyncio.Future[None] | None = None
        self.syncs = 0
        self.waits = 0

    async def wait(self) -> None:
        """Return once every write made before this call is durable.

        Raises:
            OSError: the sync failed (disk full, IO error); the write may
                not be durable.
        """
        loop = asyncio.get_running_loop()
        self.waits += 1
        if self._running is None:
            fut = self._running = loop.create_future()
            self._start(loop)
        else:
            # The running sync may have started before our write: wait for
            # the next one, which every waiter arriving now shares.
            if self._next is None:
                self._next = loop.create_future()
            fut = self._next
        await asyncio.shield(fut)

    def _start(self, loop: asyncio.AbstractEventLoop) -> None:
        self.syncs += 1
        job = loop.run_in_executor(None, self._sync)
        job.add_done_callback(lambda done: self._finished(loop, done))

    def _finished(self, loop: asyncio.AbstractEventLoop, done: asyncio.Future[None]) -> None:
        fut, self._running = self._running, None
        assert fut is not None
        exc = done.exception()
        if exc is None:
            fut.set_result(None)
        else:
            fut.set_exception(exc)
            fut.exception()  # retrieved here, so a group with no waiter left logs nothing
        if self._next is not None:
            self._running, self._next = self._next, None
            self._start(loop)
