"""Callers that wait on the agent: `/v1/events` streams and blocking
`/v1/controller?wait=` calls. The agent's publisher feeds both; the API
opens and closes them. Neither may block the loop: a stream's queue is
bounded and an overflow ends that stream, so the slowest client drops.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from shoal.daemon.api.changes import offer_or_end
from shoal.election.events import ControllerChanged

_WATCHER_QUEUE = 1024


class Watcher:
    """One `/v1/events` client: a bounded queue; overflow ends the stream."""

    def __init__(self) -> None:
        self.queue: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue(_WATCHER_QUEUE)

    def offer(self, record: dict[str, Any]) -> bool:
        """Queue `record`; on overflow, end the stream and return False."""
        return offer_or_end(self.queue, record)


class Watchers:
    """The open `/v1/events` streams."""

    def __init__(self) -> None:
        self._open: set[Watcher] = set()

    def __len__(self) -> int:
        return len(self._open)

    def open(self) -> Watcher:
        """A new stream, fed from the next event on."""
        watcher = Watcher()
        self._open.add(watcher)
        return watcher

    def close(self, watcher: Watcher) -> None:
        """Stop feeding `watcher` (its client went away)."""
        self._open.discard(watcher)

    def offer(self, record: dict[str, Any]) -> None:
        """Give `record` to every stream; one that overflows is ended."""
        for watcher in list(self._open):
            if not watcher.offer(record):
                self._open.discard(watcher)

    def end_all(self) -> None:
        """End every stream (the API is stopping)."""
        for watcher in list(self._open):
            watcher.queue.put_nowait(None)


class ControllerWatch:
    """Wakes API callers waiting for the controller to change."""

    def __init__(self) -> None:
        self._changed = asyncio.Event()
        self.since_wall_ms = int(time.time() * 1000)

    def changed(self, event: Any) -> None:
        """An election event was published."""
        if isinstance(event, ControllerChanged):
            self.since_wall_ms = int(time.time() * 1000)
            self._changed.set()
            self._changed = asyncio.Event()

    async def wait(self, timeout_s: float) -> None:
        """Return at the next controller change, or after `timeout_s`."""
        try:
            await asyncio.wait_for(self._changed.wait(), timeout_s)
        except TimeoutError:
            pass
