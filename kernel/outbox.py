"""Outbox: what a core has produced since its driver last drained it.

Every core keeps one and returns `outbox.drain()` from its own `drain()`, so
the three cores build their `Output` the same way. `sends` and `events` are
plain lists that hot paths append to directly (a method call per message
costs the simulator measurably at 1,000 nodes); drain empties them in place,
so a core may keep references to them.
"""

from __future__ import annotations

from typing import Any

from shoal.kernel.contract import EMPTY, Output, Persist, Send


class Outbox:
    """The persist items, sends and events of one core, until drained."""

    __slots__ = ("_persist", "_releases", "_open", "sends", "events")

    def __init__(self) -> None:
        self._persist: list[Any] = []  # writes (None for a barrier), in order
        self._releases: list[list[Send]] = []  # each write's releases
        self._open = False  # the last item still takes releases
        self.sends: list[Send] = []
        self.events: list[Any] = []

    def persist(self, write: Any) -> None:
        """Make `write` durable; sends queued with `send_durable` after it
        wait for it."""
        self._persist.append(write)
        self._releases.append([])
        self._open = True

    def send(self, send: Send) -> None:
        """Send at once (depends on no pending write)."""
        self.sends.append(send)

    def send_durable(self, send: Send) -> None:
        """Send once every write made so far, here and in earlier batches,
        is durable: riding on this batch's last write, or on a barrier."""
        if not self._open:
            self._persist.append(None)
            self._releases.append([])
            self._open = True
        self._releases[-1].append(send)

    def event(self, event: Any) -> None:
        """Publish `event` (after this batch's writes and sends)."""
        self.events.append(event)

    def __bool__(self) -> bool:
        return bool(self._persist or self.sends or self.events)

    def drain(self) -> Output:
        """Everything since the last drain, in contract order (`EMPTY` when
        there is nothing, so callers can test identity)."""
        if not (self._persist or self.sends or self.events):
            return EMPTY
        persist = tuple(Persist(w, tuple(r)) for w, r in zip(self._persist, self._releases))
        out = Output(persist, tuple(self.sends), tuple(self.events))
        self._persist.clear()
        self._releases.clear()
        self._open = False
        self.sends.clear()
        self.events.clear()
        return out
