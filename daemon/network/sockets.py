"""The agent's sockets: one UDP socket and one TCP listener on the gossip
port, the API's listening socket, and the datagram path.

A datagram is decoded inline (no task, no thread hop per packet) and handed
to the node; a message that answers with a large state transfer is accepted
on streams only, so a spoofed datagram cannot make us send one to somebody
else. A rejected packet is counted by reason; the first per (reason, host)
is logged at info (a key or clock problem at warning, with what to check),
later ones at debug (zeroconf's QuietLogger, with a bounded seen-set).
"""

from __future__ import annotations

import asyncio
import socket
from collections import Counter
from collections.abc import Callable

import msgspec.structs
import structlog

from shoal.daemon.config import AgentConfig
from shoal.daemon.keys import load_keyring
from shoal.daemon.network.first_contact import FirstContact
from shoal.daemon.network.streams import Receive, Streams
from shoal.daemon.network.transport import (
    DatagramHandler,
    FaultInjector,
    PacketProtocol,
    open_tcp_listener,
    open_udp_socket,
)
from shoal.daemon.network.wire import Wire
from shoal.kernel import codec
from shoal.kernel.contract import Address, Channel, Send
from shoal.kernel.errors import ConfigError
from shoal.kernel.sealing import OVERHEAD_BYTES, KeyCommand, KeyReply
from shoal.kernel.versions import THIS_BUILD, Versions
from shoal.membership.messages import PushPull
from shoal.membership.profiles import SwimConfig
from shoal.storage.messages import SyncDigests, SyncRecords, SyncTree, SyncTreeDiff

UDP_RECEIVE_BUFFER_BYTES = 2 * 1024 * 1024
MAX_DROP_KEYS = 1024
# Messages that answer with a large state transfer: accepted on streams only.
_STREAM_ONLY = {PushPull, SyncTree, SyncTreeDiff, SyncDigests, SyncRecords, KeyCommand, KeyReply}
_DROP_HINTS = {
    "auth": "no installed key opens it: that node has another key (or this one does)",
    "plaintext": "that node does not encrypt: give it the cluster key",
    "encrypted": "that node encrypts and this one has no key: set encryption.key",
}
log = structlog.get_logger("shoal")


class Network:
    """One agent's sockets, its datagram input and its sends."""

    def __init__(self, config: AgentConfig, wire: Wire, counters: Counter[str],
                 receive: Receive, unreachable: Callable[[Address], None],
                 failed: Callable[[Address], None],
                 apply_key: Callable[[KeyCommand], KeyReply]) -> None:  # fmt: skip
        """Args:
        config: the agent's configuration (`bind`, `api`, `faults`, `swim`).
        wire: encodes and decodes datagrams and frames.
        counters: the agent's counters.
        receive: hands decoded messages from a peer to the node (and flushes).
        unreachable: nothing listens at an address (ICMP port unreachable).
        failed: a stream to a peer failed.
        apply_key: applies a key command here.
        """
        self._config = config
        self._wire = wire
        self._counters = counters
        self._receive = receive
        self._unreachable = unreachable
        self.contact = FirstContact(wire, self._send_datagram, self.send, counters)
        self.streams = Streams(wire, self.contact, config.swim.stream_timeout_s, counters, receive,
                               failed, apply_key, self.dropped)  # fmt: skip
        self.faults: FaultInjector | None = None
        self.api_sock: socket.socket  # bound in `open`, served by the API
        self._udp: asyncio.DatagramTransport | None = None
        self._packets: PacketProtocol | None = None
        self._server: asyncio.Server | None = None
        self._drop_seen: set[tuple[str, str]] = set()

    async def open(self) -> None:
        """Bind the gossip port (UDP and TCP) and the API's address.

        Raises:
            ConfigError: an address cannot be bound (in use, not ours...).
        """
        cfg = self._config
        loop = asyncio.get_running_loop()
        handler: DatagramHandler = self._on_datagram
        if cfg.faults.enabled:
            f = cfg.faults
            self.faults = FaultInjector(loop, f.drop, f.duplicate, f.delay_s, f.seed)
            handler = self.faults.wrap(handler)
        try:
            sock = open_udp_socket(cfg.bind[0], cfg.bind[1])
            packets = self._packets = PacketProtocol(handler, sock, self._unreachable)
            self._udp, _ = await loop.create_datagram_endpoint(lambda: packets, sock=sock)
            _grow_receive_buffer(self._udp)
            self._server = await asyncio.start_server(
                self.streams.accept, sock=open_tcp_listener(cfg.bind[0], cfg.bind[1])
            )
        except OSError as exc:
            raise ConfigError(f"bind: cannot listen on {cfg.bind[0]}:{cfg.bind[1]}: "
                              f"{exc.strerror}") from None  # fmt: skip
        # The API's address is taken here too, before the join: an agent
        # whose API cannot listen must fail before anybody has heard of it
        # (serving starts later, once the node is up).
        try:
            self.api_sock = open_tcp_listener(cfg.api[0], cfg.api[1])
        except OSError as exc:
            raise ConfigError(f"api: cannot listen on {cfg.api[0]}:{cfg.api[1]}: "
                              f"{exc.strerror}") from None  # fmt: skip

    @property
    def sending(self) -> bool:
        """Whether sends still go out (False once the agent closes)."""
        return self._udp is not None and not self._udp.is_closing()

    def send(self, send: Send) -> None:
        """Send one `Send`: a datagram, or a frame on a stream."""
        if send.channel is Channel.STREAM:
            self.streams.send(send)
            return
        to = self.contact.to(send.to)
        if to is None:  # not bound yet: held until the hello is answered
            self.contact.hold(send)
            return
        self._send_datagram(self._wire.datagram(send.messages, to), send.to)

    def _send_datagram(self, data: bytes, addr: Address) -> None:
        assert self._packets is not None
        self._packets.send(data, addr)
        self._counters["datagrams_out"] += 1
        self._counters["bytes_out"] += len(data)

    def close(self) -> None:
        """Close the sockets (the API's is the API server's to close)."""
        if self._udp is not None:
            self._udp.close()
        if self._server is not None:
            self._server.close()

    def dropped(self, reason: str, addr: Address, detail: str = "") -> None:
        """Count a rejected packet; log the first per (reason, host) at info
        (a key or clock problem at warning, with what to check)."""
        self._counters["dropped_" + reason] += 1
        key = (reason, addr[0])
        if key not in self._drop_seen and len(self._drop_seen) < MAX_DROP_KEYS:
            self._drop_seen.add(key)
            hint = _DROP_HINTS.get(reason)
            (log.warning if hint else log.info)(
                "dropped a packet", reason=reason, peer=f"{addr[0]}:{addr[1]}", detail=detail,
                **({"hint": hint} if hint else {}))  # fmt: skip
        else:
            log.debug("dropped a packet", reason=reason, peer=f"{addr[0]}:{addr[1]}")

    def _on_datagram(self, data: bytes, addr: Address) -> None:
        self._counters["datagrams_in"] += 1
        self._counters["bytes_in"] += len(data)
        try:
            received = self._wire.decode(data)
        except codec.DecodeError as exc:
            self.dropped(exc.reason, addr, str(exc))
            if exc.reason == "misdirected":
                self.contact.misdirected(addr)  # it may hold our previous run
            return
        if self.contact.arrived(received, addr):
            return  # a hello or a welcome
        messages = received.messages
        if any(type(msg) in _STREAM_ONLY for msg in messages):
            self.dropped("stream_only_datagram", addr)  # state exchanges only over streams
            return
        self._receive(messages, addr)


def open_wire(cfg: AgentConfig, node_id: bytes, run: int,
              versions: Versions = THIS_BUILD) -> tuple[Wire, SwimConfig]:  # fmt: skip
    """The wire of node `node_id` in `run`, with the keyring (if any) loaded;
    the SWIM config with the MTU budget left after sealing."""
    enc = cfg.encryption
    ring = load_keyring(enc, cfg.data_dir, cfg.cluster)
    wire = Wire(cfg.cluster, ring, node_id=node_id, run=run, verify_incoming=enc.verify_incoming,
                verify_outgoing=enc.verify_outgoing, versions=versions)  # fmt: skip
    if ring is None:
        log.warning("encryption is off: anyone on this network can join and gossip "
                    "(see docs/security.md)")  # fmt: skip
        return wire, cfg.swim
    if not (enc.verify_incoming and enc.verify_outgoing):
        log.warning("encryption migration mode: plaintext is still "
                    + ("accepted" if not enc.verify_incoming else "sent"),
                    verify_incoming=enc.verify_incoming,
                    verify_outgoing=enc.verify_outgoing)  # fmt: skip
    return wire, msgspec.structs.replace(cfg.swim, mtu_bytes=cfg.swim.mtu_bytes - OVERHEAD_BYTES)


def _grow_receive_buffer(transport: asyncio.BaseTransport) -> None:
    # A burst (a mass join, a flood of garbage) must not overflow the socket
    # before the loop reads it: memberlist asks for 2 MB for the same reason.
    # The kernel caps the value at net.core.rmem_max; best effort.
    sock = transport.get_extra_info("socket")
    if sock is not None:
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, UDP_RECEIVE_BUFFER_BYTES)
        except OSError:
            pass
