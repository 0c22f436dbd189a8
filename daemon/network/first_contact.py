"""First contact, the IO half: the pure handshake (services/handshake.py)
driven from the agent's sockets.

The protocol state — which run a packet to an address is bound to, the
hellos said and held sends, hello/welcome, the version refusal — is the
`Handshake` core's; this module seals and sends what it drains, answers the
coroutines awaiting a binding (`bound`, for streams), and logs a refusal
once per peer and versions. It keeps no timer of its own: the agent's one
timer is armed on the earliest of the node's and this core's deadlines
(`next_deadline`, `tick`; daemon/agent.py), and `rearm` tells the agent
when this core's deadline moved.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable

import structlog

from shoal.daemon.network.wire import Received, Wire
from shoal.kernel.contract import Address, Send
from shoal.kernel.sealing import UNBOUND
from shoal.services.handshake import HELLO_RETRY_S, Handshake, Refused, Released

log = structlog.get_logger("shoal")


class FirstContact:
    """Receiver bindings by address (the `Handshake` core), driven by IO."""

    def __init__(self, wire: Wire, send_datagram: Callable[[bytes, Address], None],
                 resend: Callable[[Send], None], counters: Counter[str]) -> None:  # fmt: skip
        """Args:
        wire: the agent's wire (its `sessions` hold every peer's run).
        send_datagram: puts bytes on the UDP socket.
        resend: sends a held `Send` once it can be bound (`Network.send`).
        counters: the agent's counters (`hellos_out`, `held_dropped`, ...).
        """
        self._wire = wire
        self._send_datagram = send_datagram
        self._resend = resend
        self.core = Handshake(wire.sessions, wire.versions, True, counters)
        self._waiters: dict[Address, list[asyncio.Future[bytes]]] = {}
        self._deadline: float | None = None  # the core's, as the agent last heard it
        # The agent re-arms its timer (set once the agent has its node).
        self.rearm: Callable[[], None] = lambda: None

    def to(self, addr: Address) -> bytes | None:
        """The binding for a packet to `addr`, or None until a hello is answered."""
        if not self._wire.sealing:
            return UNBOUND
        return self.core.to(addr)

    def hold(self, send: Send) -> None:
        """Keep `send` until `send.to` answers a hello (sent now if due)."""
        self.core.hold(send, _now())
        self._flush()

    async def bound(self, addr: Address, timeout_s: float) -> bytes:
        """The binding for `addr`, saying hello first if needed.

        Raises:
            TimeoutError: no welcome within `timeout_s`.
        """
        found = self.to(addr)
        if found is not None:
            return found
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[bytes] = loop.create_future()
        self._waiters.setdefault(addr, []).append(waiter)
        self.core.want(addr, loop.time())
        self._flush()
        try:
            async with asyncio.timeout(timeout_s):
                return await waiter
        except TimeoutError:
            raise TimeoutError(f"no answer to hello from {addr[0]}:{addr[1]}") from None
        finally:
            if not waiter.done():
                waiter.cancel()
            waiters = self._waiters.get(addr)
            if waiters is not None and waiter in waiters:  # not released: give up
                waiters.remove(waiter)
                if not waiters:
                    del self._waiters[addr]
                self.core.unwant(addr)

    def arrived(self, received: Received, addr: Address) -> bool:
        """Learn from an accepted sealed datagram from `addr`; whether it was a
        hello or a welcome (consumed here, not for the node)."""
        envelope = received.envelope
        if envelope is None:
            return False
        consumed = self.core.receive(envelope.sender, received.messages, addr, _now())
        self._flush()
        return consumed

    def misdirected(self, addr: Address) -> None:
        """A packet from `addr` was bound to an earlier run of ours (or to
        someone else): say hello (the core limits how often)."""
        if not self._wire.sealing:
            return
        self.core.misdirected(addr, _now())
        self._flush()

    def next_deadline(self) -> float | None:
        """When `tick` is next due (None: nothing held or awaited)."""
        return self._deadline

    def tick(self, now: float) -> None:
        """Say hello again where due, drop what waited too long (the agent's timer)."""
        if self._deadline is not None and now >= self._deadline:
            self.core.tick(now)
            self._flush()

    def _flush(self) -> None:
        """Send what the core drained, act on its events, re-arm the timer."""
        out = self.core.drain()
        wire = self._wire
        for sealed in out.send:
            self._send_datagram(wire.datagram([sealed.message], sealed.binding), sealed.to)
        for event in out.events:
            if type(event) is Released:
                for waiter in self._waiters.pop(event.to, ()):
                    if not waiter.done():
                        waiter.set_result(event.binding)
                for send in event.sends:
                    self._resend(send)
            elif type(event) is Refused and event.first:
                addr = event.address
                log.warning("member-refused", address=f"{addr[0]}:{addr[1]}",
                            protocols=list(event.protocols), theirs=event.theirs.describe(),
                            mine=event.mine.describe(),
                            why="no common version: upgrade one release at a time "
                                "(docs/operations.md, 'An upgrade')")  # fmt: skip
        at = self.core.next_deadline()
        if at != self._deadline:
            self._deadline = at
            self.rearm()


def _now() -> float:
    return asyncio.get_running_loop().time()


__all__ = ["HELLO_RETRY_S", "FirstContact"]
