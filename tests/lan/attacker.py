"""An attacker on a virtual LAN who holds no key: it captures every frame on
the segment and sends copies later.

The bridge is made to flood like a hub (`ageing_time 0`: it forgets every
MAC address at once, so every unicast frame goes out of every port), and the
attacker, one more host on the bridge, reads its wire with an AF_PACKET
socket in its own namespace. What it keeps is opaque bytes, never parsed
beyond what a sniffer on any network sees:

- per UDP datagram to the gossip port: (time, source, destination, payload);
- per TCP connection to or from the gossip port: each direction's byte
  stream, put back together by sequence number and cut into length-prefixed
  frames (4-byte big-endian length + body), kept with the prefix.

It sends copies two ways: a datagram with its original source address and
port (a raw IPv4 socket, headers built here, UDP checksum 0) to any address;
a stream frame on a new TCP connection of its own to any member's gossip
port, reading whatever comes back until the member closes.

A datagram copy meant for the member that first sent it cannot carry that
member's own address: its kernel drops a packet from one of its own
addresses arriving from outside (a martian) before any agent sees it. That
copy goes out from the attacker's own address instead (a reflection).

Times are `time.monotonic()` of the test process (the capture runs on a
thread of it).
"""

from __future__ import annotations

import os
import socket
import struct
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from tests.lan.netlab import Host, VirtualLan, sh, socket_in

Address = tuple[str, int]
GOSSIP_PORT = 7946
ATTACKER_INDEX = 99  # 10.<net>.0.99, namespace <tag>-h99
ETH_P_ALL = 0x0003
ETH_P_IP = 0x0800
PACKET_OUTGOING = 4  # what this host itself sent (sll_pkttype)
_SYN, _ACK = 0x02, 0x10
_CAPTURE_BUFFER_BYTES = 8 * 1024 * 1024


@dataclass(frozen=True)
class Datagram:
    """One captured UDP datagram to a gossip port."""

    at: float
    src: Address
    dst: Address
    payload: bytes


@dataclass(frozen=True)
class StreamFrame:
    """One length-prefixed frame out of a TCP byte stream (prefix included)."""

    at: float
    src: Address  # the side that wrote it
    dst: Address
    data: bytes
    request: bool  # written by the side that opened the connection


@dataclass
class _Direction:
    """One direction of a TCP connection, put back together."""

    base: int | None = None  # sequence number of the first byte of the stream
    delivered: int = 0  # bytes of the stream put together so far
    pending: dict[int, bytes] = field(default_factory=dict)  # offset -> bytes, out of order
    buffer: bytes = b""  # put together, not yet a whole frame
    request: bool = True


class Attacker:
    """A host without the key on `lan`'s bridge that records and replays.

    Args:
        lan: the virtual LAN; the attacker becomes its host 99.
    """

    def __init__(self, lan: VirtualLan) -> None:
        self.lan = lan
        self.host: Host = lan.add_host(ATTACKER_INDEX)
        self.ip = self.host.ip
        # A hub: the bridge forgets where every MAC address lives at once and
        # floods every frame to every port, ours included.
        sh("ip", "-n", lan.bridge_ns, "link", "set", "br0", "type", "bridge", "ageing_time", "0")
        self.host.run("ip", "link", "set", "eth0", "promisc", "on")
        self.datagrams: list[Datagram] = []
        self.frames: list[StreamFrame] = []
        self.skipped_fragments = 0
        self._flows: dict[tuple[Address, Address], _Direction] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._sniffer = socket_in(self.host.ns, socket.AF_PACKET, socket.SOCK_RAW,
                                  socket.htons(ETH_P_ALL))  # fmt: skip
        self._sniffer.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, _CAPTURE_BUFFER_BYTES)
        self._sniffer.bind(("eth0", ETH_P_ALL))
        self._sniffer.settimeout(0.1)
        self._raw = socket_in(self.host.ns, socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW)
        self._raw.setsockopt(socket.IPPROTO_IP, socket.IP_HDRINCL, 1)
        self._thread = threading.Thread(target=self._capture, name="attacker-capture",
                                        daemon=True)  # fmt: skip
        self._thread.start()

    def close(self) -> None:
        """Stop capturing and close the sockets (the LAN removes the host)."""
        self._stop.set()
        self._thread.join(5)
        self._sniffer.close()
        self._raw.close()

    # -- what was captured ---------------------------------------------------------

    def captured_datagrams(self, since: float = 0.0, until: float = float("inf"),
                           src: str | None = None) -> list[Datagram]:  # fmt: skip
        """The datagrams captured in [since, until], from host `src` if given."""
        with self._lock:
            return [d for d in self.datagrams
                    if since <= d.at <= until and (src is None or d.src[0] == src)]  # fmt: skip

    def captured_frames(self, since: float = 0.0, until: float = float("inf"),
                        request: bool | None = None) -> list[StreamFrame]:  # fmt: skip
        """The stream frames completed in [since, until]; only requests
        (client to server) or only replies if `request` is given."""
        with self._lock:
            frames = [f for f in self.frames if since <= f.at <= until]
        return [f for f in frames if request is None or f.request is request]

    # -- sending copies --------------------------------------------------------------

    def replay_datagram(self, datagram: Datagram, to: str, port: int = GOSSIP_PORT) -> None:
        """Send `datagram`'s payload to `to`:`port`, from its original source
        address and port (from ours if `to` is that source: see the module
        docstring)."""
        src_ip = self.ip if to == datagram.src[0] else datagram.src[0]
        self._raw.sendto(_ipv4_udp(src_ip, datagram.src[1], to, port, datagram.payload), (to, 0))

    def replay_frame(self, frame: StreamFrame, to: str, port: int = GOSSIP_PORT,
                     timeout_s: float = 5.0) -> bytes:  # fmt: skip
        """Write `frame` on a new TCP connection to `to`:`port`; return what
        came back before the member closed it (b"" if nothing)."""
        sock = socket_in(self.host.ns)
        sock.settimeout(timeout_s)
        answer = b""
        try:
            sock.connect((to, port))
            sock.sendall(frame.data)
            while chunk := sock.recv(65536):
                answer += chunk
        except (TimeoutError, ConnectionResetError, BrokenPipeError):
            pass
        finally:
            sock.close()
        return answer

    # -- capture -------------------------------------------------------------------

    def _capture(self) -> None:
        while not self._stop.is_set():
            try:
                packet, meta = self._sniffer.recvfrom(65536)
            except TimeoutError:
                continue
            except OSError:
                return  # closed
            if meta[2] == PACKET_OUTGOING or meta[1] != ETH_P_IP:
                continue
            self._on_ipv4(packet[14:], time.monotonic())

    def _on_ipv4(self, packet: bytes, now: float) -> None:
        if len(packet) < 20 or packet[0] >> 4 != 4:
            return
        ihl = (packet[0] & 0x0F) * 4
        total = struct.unpack_from(">H", packet, 2)[0] or len(packet)
        frag = struct.unpack_from(">H", packet, 6)[0]
        proto = packet[9]
        src_ip = socket.inet_ntoa(packet[12:16])
        dst_ip = socket.inet_ntoa(packet[16:20])
        if self.ip in (src_ip, dst_ip):
            return  # our own connections and what answers them
        if frag & 0x3FFF:  # more fragments, or not the first
            self.skipped_fragments += 1
            return
        body = packet[ihl:total]
        if proto == socket.IPPROTO_UDP and len(body) >= 8:
            sport, dport = struct.unpack_from(">HH", body)
            if dport == GOSSIP_PORT:
                with self._lock:
                    self.datagrams.append(Datagram(now, (src_ip, sport), (dst_ip, dport),
                                                   body[8:]))  # fmt: skip
        elif proto == socket.IPPROTO_TCP and len(body) >= 20:
            sport, dport, seq = struct.unpack_from(">HHI", body)
            if GOSSIP_PORT in (sport, dport):
                flags = body[13]
                payload = body[(body[12] >> 4) * 4 :]
                self._on_tcp((src_ip, sport), (dst_ip, dport), seq, flags, payload, now)

    def _on_tcp(self, src: Address, dst: Address, seq: int, flags: int, payload: bytes,
                now: float) -> None:  # fmt: skip
        key = (src, dst)
        if flags & _SYN:
            # A new connection on this pair of ports: its stream starts after the SYN.
            self._flows[key] = _Direction(base=(seq + 1) & 0xFFFFFFFF,
                                          request=not flags & _ACK)  # fmt: skip
            return
        flow = self._flows.setdefault(key, _Direction(request=dst[1] == GOSSIP_PORT))
        if not payload:
            return
        if flow.base is None:  # its SYN was missed: start where we came in
            flow.base = seq
        offset = (seq - flow.base) & 0xFFFFFFFF
        if offset + len(payload) <= flow.delivered or offset > 1 << 30:
            return  # a retransmission of what we have (or from before `base`)
        if len(payload) > len(flow.pending.get(offset, b"")):
            flow.pending[offset] = payload
        self._put_together(flow, src, dst, now)

    def _put_together(self, flow: _Direction, src: Address, dst: Address, now: float) -> None:
        progressed = True
        while progressed:
            progressed = False
            for offset in sorted(flow.pending):
                if offset > flow.delivered:
                    break
                data = flow.pending.pop(offset)
                new = data[flow.delivered - offset :]
                if new:
                    flow.buffer += new
                    flow.delivered += len(new)
                    progressed = True
        while len(flow.buffer) >= 4:
            length = struct.unpack_from(">I", flow.buffer)[0]
            if len(flow.buffer) < 4 + length:
                break
            data, flow.buffer = flow.buffer[: 4 + length], flow.buffer[4 + length :]
            with self._lock:
                self.frames.append(StreamFrame(now, src, dst, data, flow.request))


class ReplayWalk:
    """Sends captured datagrams again at the pace they were sent, on a thread.

    Every `period_s` it sends the next `period_s` of capture time (in capture
    order, empty stretches included), cycling through `first`; after
    `switch()`, through `then` once, and then through both, cycling. A walk
    through a dead controller's renewals delivers one the receiver has not
    seen about as often as the controller sent them.

    Args:
        send: sends one datagram (to wherever the test wants it).
        first: what to walk through until `switch()`.
        then: what to walk through after it.
        period_s: the pace.
    """

    def __init__(self, send: Callable[[Datagram], None], first: list[Datagram],
                 then: list[Datagram], period_s: float = 0.8) -> None:  # fmt: skip
        self.period_s = period_s
        self.rounds = 0
        self._send = send
        self._first = _slices(first, period_s)
        self._then = _slices(then, period_s)
        self._both = _slices(sorted(first + then, key=lambda d: d.at), period_s)
        self._switched = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="replay-walk", daemon=True)
        self._thread.start()

    def switch(self) -> None:
        """Go on with `then`."""
        self._switched.set()

    def stop(self) -> None:
        """Stop sending (returns once the thread has)."""
        self._stop.set()
        self._thread.join(10)

    def _rounds(self) -> Iterator[list[Datagram]]:
        while not self._switched.is_set():
            for batch in self._first or [[]]:
                yield batch
                if self._switched.is_set():
                    break
        yield from self._then
        while True:
            yield from self._both or [[]]

    def _run(self) -> None:
        rounds = self._rounds()
        while not self._stop.is_set():
            for datagram in next(rounds):
                self._send(datagram)
            self.rounds += 1
            self._stop.wait(self.period_s)


def _slices(datagrams: list[Datagram], width_s: float) -> list[list[Datagram]]:
    """`datagrams` cut into consecutive stretches of `width_s` of capture time."""
    if not datagrams:
        return []
    start = datagrams[0].at
    out: list[list[Datagram]] = [[] for _ in range(int((datagrams[-1].at - start) / width_s) + 1)]
    for datagram in datagrams:
        out[int((datagram.at - start) / width_s)].append(datagram)
    return out


def _checksum(header: bytes) -> int:
    total = sum(struct.unpack(f">{len(header) // 2}H", header))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


def _ipv4_udp(src_ip: str, src_port: int, dst_ip: str, dst_port: int, payload: bytes) -> bytes:
    """An IPv4 packet holding one UDP datagram (checksum 0: none, RFC 768)."""
    udp = struct.pack(">HHHH", src_port, dst_port, 8 + len(payload), 0) + payload
    ident = int.from_bytes(os.urandom(2), "big")
    header = struct.pack(">BBHHHBBH4s4s", 0x45, 0, 20 + len(udp), ident, 0x4000, 64,
                         socket.IPPROTO_UDP, 0, socket.inet_aton(src_ip),
                         socket.inet_aton(dst_ip))  # fmt: skip
    header = header[:10] + struct.pack(">H", _checksum(header)) + header[12:]
    return header + udp
