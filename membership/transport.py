"""IO: UDP datagrams and TCP stream frames for the agent, plus fault injection.

This is the only membership module that touches sockets. Datagrams are
handed to a callback as bytes; frames are read with a size limit and a
deadline. `FaultInjector` drops, delays and duplicates incoming datagrams
from a seeded `Random`: this kernel has no netem, and tests and benchmarks
need loss. It is off unless configured, and the agent logs a warning when on.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable

from membership import codec
from membership.output import Address

DatagramHandler = Callable[[bytes, Address], None]


class PacketProtocol(asyncio.DatagramProtocol):
    """Feeds every datagram to `handler`; counts socket errors."""

    def __init__(self, handler: DatagramHandler) -> None:
        self.handler = handler
        self.transport: asyncio.DatagramTransport | None = None
        self.errors = 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's UDPTransport does not subclass asyncio.DatagramTransport.
        self.transport = transport  # type: ignore[assignment]

    def datagram_received(self, data: bytes, addr: tuple[str | object, ...]) -> None:
        self.handler(data, (str(addr[0]), int(addr[1])))  # type: ignore[call-overload]

    def error_received(self, exc: Exception) -> None:
        # ICMP port unreachable from a dead peer surfaces here; it is normal.
        self.errors += 1


class FaultInjector:
    """Seeded loss, duplication and delay applied to incoming datagrams."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        drop: float,
        duplicate: float,
        delay_s: float,
        seed: int,
    ) -> None:
        self.loop = loop
        self.drop = drop
        self.duplicate = duplicate
        self.delay_s = delay_s
        self.rng = random.Random(seed)
        self.dropped = 0

    def wrap(self, handler: DatagramHandler) -> DatagramHandler:
        """A handler that applies the faults before calling `handler`."""

        def faulty(data: bytes, addr: Address) -> None:
            if self.drop and self.rng.random() < self.drop:
                self.dropped += 1
                return
            copies = 2 if self.duplicate and self.rng.random() < self.duplicate else 1
            for _ in range(copies):
                if self.delay_s:
                    delay = self.rng.expovariate(1.0 / self.delay_s)
                    self.loop.call_later(delay, handler, data, addr)
                else:
                    handler(data, addr)

        return faulty


async def read_frame(reader: asyncio.StreamReader, timeout_s: float) -> bytes | None:
    """One frame body, or None at a clean end of stream.

    Raises:
        codec.DecodeError: the announced size is out of bounds.
        asyncio.TimeoutError, asyncio.IncompleteReadError, OSError.
    """
    async with asyncio.timeout(timeout_s):
        try:
            prefix = await reader.readexactly(codec.FRAME_PREFIX_BYTES)
        except asyncio.IncompleteReadError as exc:
            if not exc.partial:
                return None
            raise
        length = codec.frame_length(prefix)
        return await reader.readexactly(length)
