"""Session renewals through this agent, one `Keepalive` per pass of the loop.

Each `PUT /v1/session/ID/renew` of a session in the metadata log is a
renewal at the controller (metalog/sessionclock.py). One message each was
one datagram into the controller and one answer out per renewal: 10,000
sessions of a 30 s TTL, renewed every TTL/3 as the client library does,
are about 1,000 a second into the controller. Here the renewals that
arrive at this agent in one pass of its event loop leave as one
`Keepalive` naming every session (as many as fit a datagram,
`keepalive_ids_fitting`), answered by one `KeepaliveResult`: served or not (the
controller's, for all of them), and which of them are ended.

The first renewal of a pass leaves at once, so a lone renewal waits for
nothing; those after it in the same pass are held until the pass ends and
leave together (the pattern of daemon/meta.py's `flush_soon` and its
acknowledgements, `LocalDelivery._hold_ack`). Figures: bench/keepalive.py.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from shoal.daemon.meta import MetaService
from shoal.metalog.events import KeepaliveDone
from shoal.metalog.messages import keepalive_ids_fitting
from shoal.node.composition import ShoalNode

# A renewal's answer: the batch's (`ok`, and the ended ones), or None: no
# answer in time.
Answer = KeepaliveDone | None


class Renewals:
    """The renewals asked of this agent, batched per pass (module docstring)."""

    def __init__(self, meta: MetaService, node: Callable[[], ShoalNode]) -> None:
        self._meta = meta
        self._node = node
        self._fitting: tuple[str, int, int] = ("", 0, 1)  # (name, MTU) -> ids a message
        # Held until this pass ends: session id -> its callers' futures.
        self._held: dict[bytes, list[asyncio.Future[Answer]]] = {}
        self._passing = False  # a renewal left in this pass: the next ones are held

    def renew(self, sid: bytes) -> asyncio.Future[Answer]:
        """Renew session `sid` at the controller: the future holds the
        answer of the keepalive that carried it (None: none in time). It
        may be cancelled (its caller went away)."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[Answer] = loop.create_future()
        if self._passing:
            self._held.setdefault(sid, []).append(fut)
            return fut
        self._passing = True
        loop.call_soon(self._send_held)
        self._send({sid: [fut]})
        return fut

    def _send_held(self) -> None:
        """The pass has ended: what was held leaves, as many a message as
        fit a datagram."""
        held, self._held, self._passing = self._held, {}, False
        if not held:
            return
        ids, per = list(held), self._per_message()
        for first in range(0, len(ids), per):
            self._send({sid: held[sid] for sid in ids[first : first + per]})

    def _per_message(self) -> int:
        node = self._node()
        name, mtu = node.name, node.swim.config.mtu_bytes
        if self._fitting[:2] != (name, mtu):
            self._fitting = (name, mtu, keepalive_ids_fitting(name, mtu))
        return self._fitting[2]

    def _send(self, waiting: dict[bytes, list[asyncio.Future[Answer]]]) -> None:
        done = self._meta.submit_keepalive(tuple(waiting))
        done.add_done_callback(lambda d: _answer(waiting, d.result()))


def _answer(waiting: dict[bytes, list[asyncio.Future[Answer]]], answer: Answer) -> None:
    """Every caller of the keepalive gets its answer (one gone away, none)."""
    for futures in waiting.values():
        for fut in futures:
            if not fut.done():
                fut.set_result(answer)
