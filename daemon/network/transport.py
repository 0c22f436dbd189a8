"""IO: UDP datagrams and TCP stream frames for the agent, plus fault injection.

The sockets membership traffic goes through (the core, membership/, has
none). Datagrams are handed to a callback as bytes; frames are read with a
size limit and a deadline. `FaultInjector` drops, delays and duplicates incoming datagrams
from a seeded `Random`: this kernel has no netem, and tests and benchmarks
need loss. It is off unless configured, and the agent logs a warning when on.

The UDP socket asks the kernel for ICMP errors (IP_RECVERR, ip(7)): when a
peer's agent has died but its host runs on, the host answers our datagrams
with "port unreachable", and the protocol hears of it in microseconds rather
than at a probe timeout (see `SwimNode.unreachable`). Without IP_RECVERR,
Linux reports ICMP errors only on connected sockets. Two kernel behaviours
come with it, and `PacketProtocol` handles both:

- each report also sets the socket's pending error, and the next send on
  the socket fails with it *without sending* (sock_error() in
  sock_alloc_send_pskb): `send` tries such a datagram again;
- the reports queue up until read with MSG_ERRQUEUE, and while the queue is
  not empty the socket polls as in error: libuv then spins, and uvloop 0.23
  was seen to crash. `error_received` empties the queue every time.
"""

from __future__ import annotations

import asyncio
import errno
import random
import socket
import struct
from collections.abc import Callable
from typing import cast

from shoal.kernel import codec
from shoal.kernel.contract import Address

DatagramHandler = Callable[[bytes, Address], None]
UnreachableHandler = Callable[[Address], None]

# linux/in.h, linux/in6.h and linux/errqueue.h; Python's socket module does
# not export them.
IP_RECVERR = 11
IPV6_RECVERR = 25
_SO_EE_ORIGIN_ICMP = 2
_SO_EE_ORIGIN_ICMP6 = 3
# struct sock_extended_err: ee_errno (u32), ee_origin, ee_type, ee_code (u8).
_EXTENDED_ERR = struct.Struct("=IBBB")
# A send that fails on a pending ICMP error is tried again, this many times
# in all (each failure clears the error; only another report can fail it).
_SEND_ATTEMPTS = 3


def open_udp_socket(host: str, port: int) -> socket.socket:
    """A bound, non-blocking UDP socket that queues ICMP errors for us.

    Raises:
        OSError: the address cannot be bound.
    """
    v6 = ":" in host
    level, option = (socket.IPPROTO_IPV6, IPV6_RECVERR) if v6 else (socket.IPPROTO_IP, IP_RECVERR)
    return _bound(socket.SOCK_DGRAM, host, port, level, option)


def open_tcp_listener(host: str, port: int) -> socket.socket:
    """A bound TCP socket for the event loop's `create_server(sock=...)`,
    which listens on it. Handed a host and port instead, the loop resolves
    the address itself, and uvloop encodes the host with the idna codec
    first: importing that codec (with stringprep and unicodedata) cost every
    agent's start about 2 ms of CPU, for an address that is already an IP.
    SO_REUSEADDR as asyncio sets it, so that a restart binds at once.

    Raises:
        OSError: the address cannot be bound.
    """
    return _bound(socket.SOCK_STREAM, host, port, socket.SOL_SOCKET, socket.SO_REUSEADDR)


def _bound(kind: int, host: str, port: int, level: int, option: int) -> socket.socket:
    """A non-blocking socket of `kind` with `option` set (where the system
    has it), bound to (host, port); closed again if that fails."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, kind)
    try:
        try:
            sock.setsockopt(level, option, 1)
        except OSError:
            pass  # IP_RECVERR is Linux's: elsewhere probes time out as in memberlist
        sock.bind((host, port))
        sock.setblocking(False)
    except BaseException:
        sock.close()
        raise
    return sock


def port_unreachable(ancdata: list[tuple[int, int, bytes]]) -> bool:
    """Whether an error-queue entry is an ICMP (or ICMPv6) port unreachable."""
    for level, kind, data in ancdata:
        if (level, kind) in ((socket.IPPROTO_IP, IP_RECVERR), (socket.IPPROTO_IPV6, IPV6_RECVERR)):
            if len(data) >= _EXTENDED_ERR.size:
                err, origin, _, _ = _EXTENDED_ERR.unpack_from(data)
                icmp = origin in (_SO_EE_ORIGIN_ICMP, _SO_EE_ORIGIN_ICMP6)
                if icmp and err == errno.ECONNREFUSED:
                    return True
    return False


class PacketProtocol(asyncio.DatagramProtocol):
    """Feeds every datagram to `handler`, and every "port unreachable" for a
    datagram we sent to `on_unreachable`; counts socket errors."""

    def __init__(
        self,
        handler: DatagramHandler,
        sock: socket.socket | None = None,
        on_unreachable: UnreachableHandler | None = None,
    ) -> None:
        self.handler = handler
        self.sock = sock
        self.on_unreachable = on_unreachable
        self.transport: asyncio.DatagramTransport | None = None
        self.errors = 0
        self.resent = 0  # datagrams sent again after a pending error failed them
        self._refused = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's UDPTransport does not subclass asyncio.DatagramTransport.
        self.transport = transport  # type: ignore[assignment]

    def datagram_received(self, data: bytes, addr: tuple[str | object, ...]) -> None:
        # The port is an int for every address family asyncio and uvloop report.
        self.handler(data, (str(addr[0]), int(cast("int", addr[1]))))

    def send(self, data: bytes, addr: Address) -> None:
        """`transport.sendto`, and again if a pending ICMP error failed it
        (see the module docstring). The transports report a failed send
        through `error_received` before `sendto` returns."""
        assert self.transport is not None
        for _ in range(_SEND_ATTEMPTS):
            self._refused = False
            self.transport.sendto(data, addr)
            if not self._refused:
                return
            self.resent += 1

    def error_received(self, exc: Exception) -> None:
        # ICMP port unreachable from a dead peer surfaces here, from a
        # receive or from a send that it failed; it is normal.
        self.errors += 1
        self._refused = isinstance(exc, ConnectionRefusedError)
        if self.sock is not None:
            self._read_error_queue(self.sock)

    def _read_error_queue(self, sock: socket.socket) -> None:
        # All of it: the queue is bounded by the receive buffer, and one
        # left behind keeps the socket polling as in error.
        while True:
            try:
                _, ancdata, _, addr = sock.recvmsg(1, 512, socket.MSG_ERRQUEUE)
            except OSError:
                return  # empty (EAGAIN), or closed
            if self.on_unreachable is not None and port_unreachable(ancdata):
                self.on_unreachable((str(addr[0]), int(addr[1])))


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
