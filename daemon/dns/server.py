"""The DNS server of one agent: UDP and TCP on `[dns] bind`, answers from `Zone`.

Every packet is answered inline from a `ClusterView` (daemon/dns/view.py),
which is built from the agent's status snapshot (daemon/api/port.py) when
the agent's change log has moved on since the last one, or the last is
older than `VIEW_MAX_AGE_S`: a query costs a parse, a few dict lookups and
a pack, never a walk of the member table. Nothing is asked of any peer.

TCP follows RFC 7766: two-byte length prefixes, several queries per
connection, answers in order; a connection idle for `TCP_IDLE_S` is closed,
and at most `MAX_TCP_CONNECTIONS` are open at once (more are closed on
accept). A malformed packet is counted (`shoal_agent_dns_malformed_total`)
and dropped; over TCP it also ends the connection, since the stream can no
longer be trusted to be in step.
"""

from __future__ import annotations

import asyncio
import os
import random
import socket
from typing import TYPE_CHECKING, cast

from shoal.daemon.dns.config import DnsConfig
from shoal.daemon.dns.view import ClusterView, build_view
from shoal.daemon.dns.zone import Verdict, Zone
from shoal.kernel.errors import ConfigError

if TYPE_CHECKING:
    from shoal.daemon.api.port import AgentPort

VIEW_MAX_AGE_S = 1.0
TCP_IDLE_S = 10.0
MAX_TCP_CONNECTIONS = 64
UDP_RECEIVE_BUFFER_BYTES = 1 << 20
# Exported from the start, at 0 (`shoal_agent_dns_<name>_total`).
COUNTERS = tuple(f"dns_{v.value}" for v in Verdict) + ("dns_queries", "dns_truncated",
                                                       "dns_tcp_refused")  # fmt: skip


class DnsServer:
    """Answers DNS for one agent (module docstring).

    Args:
        agent: what the API reads too: status snapshots, counters, the change log.
        cfg: the `[dns]` settings (`bind` set).
    """

    def __init__(self, agent: AgentPort, cfg: DnsConfig) -> None:
        assert cfg.bind is not None
        self.agent = agent
        self.cfg = cfg
        self.zone = Zone(cfg, random.Random(int.from_bytes(os.urandom(8), "big")))
        self._view: ClusterView | None = None
        self._view_key: tuple[str, int] | None = None
        self._view_at = 0.0
        self._udp_sock: socket.socket | None = None
        self._tcp_sock: socket.socket | None = None
        self._udp: asyncio.DatagramTransport | None = None
        self._tcp: asyncio.Server | None = None
        self.connections: set[DnsStream] = set()

    def bind(self) -> None:
        """Bind both sockets now, before the agent joins, so that a taken
        port is a one-line error and not a member that fails at once.

        Raises:
            ConfigError: naming `dns.bind`.
        """
        host, port = self.cfg.bind or ("", 0)
        udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        tcp = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            tcp.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            udp.bind((host, port))
            tcp.bind((host, port))
            tcp.listen(128)
        except OSError as exc:
            udp.close()
            tcp.close()
            raise ConfigError(f"dns.bind: cannot listen on {host}:{port}: "
                              f"{exc.strerror or exc}") from None  # fmt: skip
        # A burst of queries waits in the socket while the loop is busy with
        # gossip (the kernel caps this at net.core.rmem_max).
        udp.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, UDP_RECEIVE_BUFFER_BYTES)
        udp.setblocking(False)
        tcp.setblocking(False)
        self._udp_sock, self._tcp_sock = udp, tcp

    async def start(self) -> None:
        """Serve on the bound sockets."""
        loop = asyncio.get_running_loop()
        if self._udp_sock is None:
            self.bind()
        assert self._udp_sock is not None and self._tcp_sock is not None
        self._udp, _ = await loop.create_datagram_endpoint(lambda: DnsPackets(self),
                                                           sock=self._udp_sock)  # fmt: skip
        self._tcp = await loop.create_server(lambda: DnsStream(self), sock=self._tcp_sock)

    async def stop(self) -> None:
        """Close both listeners and every open connection."""
        if self._udp is not None:
            self._udp.close()
        if self._tcp is not None:
            self._tcp.close()
        for conn in list(self.connections):
            conn.close()
        if self._tcp is not None:
            await self._tcp.wait_closed()

    def view(self) -> ClusterView:
        """The view to answer from, rebuilt when the agent's view changed."""
        changes = self.agent.changes
        key = (changes.run, changes.index)
        now = self.agent.loop_time()
        if self._view is None or key != self._view_key or now - self._view_at > VIEW_MAX_AGE_S:
            node = self.agent.status().node
            view = build_view(node.members, node.controller, node.epoch, self.cfg)
            if view != self._view:  # the same one kept: the zone keeps its built replies
                self._view = view
            self._view_key, self._view_at = key, now
        return self._view

    def answer(self, packet: bytes, udp: bool) -> bytes | None:
        """The reply to one packet, counted; None to drop it."""
        data, verdict, cut = self.zone.answer(packet, self.view(), udp)
        count = self.agent.count
        count(f"dns_{verdict.value}")
        if verdict is not Verdict.MALFORMED:
            count("dns_queries")
        if cut:
            count("dns_truncated")
        return data


class DnsPackets(asyncio.DatagramProtocol):
    """UDP: one answer per query, inline."""

    def __init__(self, server: DnsServer) -> None:
        self.server = server
        self.transport: asyncio.DatagramTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.DatagramTransport, transport)  # (uvloop's is no subclass)

    def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:
        reply = self.server.answer(data, udp=True)
        if reply is not None and self.transport is not None:
            self.transport.sendto(reply, addr)

    def error_received(self, exc: Exception) -> None:
        pass  # an ICMP error for an earlier answer: the asker is gone


class DnsStream(asyncio.Protocol):
    """TCP: length-prefixed queries (RFC 1035 4.2.2, RFC 7766)."""

    def __init__(self, server: DnsServer) -> None:
        self.server = server
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.idle: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)
        if len(self.server.connections) >= MAX_TCP_CONNECTIONS:
            self.server.agent.count("dns_tcp_refused")
            self.transport.close()
            return
        self.server.connections.add(self)
        self._touch()

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        self._touch()
        while len(self.buffer) >= 2 and self.transport is not None:
            size = int.from_bytes(self.buffer[:2], "big")
            if len(self.buffer) < 2 + size:
                return
            packet = bytes(self.buffer[2 : 2 + size])
            del self.buffer[: 2 + size]
            reply = self.server.answer(packet, udp=False)
            if reply is None:
                self.close()
                return
            self.transport.write(len(reply).to_bytes(2, "big") + reply)

    def connection_lost(self, exc: Exception | None) -> None:
        self.server.connections.discard(self)
        if self.idle is not None:
            self.idle.cancel()

    def _touch(self) -> None:
        if self.idle is not None:
            self.idle.cancel()
        self.idle = asyncio.get_running_loop().call_later(TCP_IDLE_S, self.close)

    def close(self) -> None:
        """End the connection."""
        if self.transport is not None:
            self.transport.close()
            self.transport = None
