"""The agent's UDP socket on real loopback sockets: ICMP reports and the
datagrams they would otherwise eat."""

import asyncio
import socket

import uvloop

from shoal.daemon.network.transport import PacketProtocol, open_udp_socket


def _dead_address() -> tuple[str, int]:
    """A loopback UDP port nobody listens on (bound, then closed)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()


def _exchange(rounds: int) -> tuple[int, list[tuple[str, int]], tuple[str, int], int]:
    """Send `rounds` pairs (one to a dead port, one to a live socket)."""
    dead = _dead_address()
    live = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    live.bind(("127.0.0.1", 0))
    live.setblocking(False)
    reports: list[tuple[str, int]] = []
    got = 0

    def drain_live() -> int:
        n = 0
        while True:
            try:
                live.recv(64)
            except BlockingIOError:
                return n
            n += 1

    async def main() -> int:
        nonlocal got
        sock = open_udp_socket("127.0.0.1", 0)
        proto = PacketProtocol(lambda data, addr: None, sock, reports.append)
        transport, _ = await asyncio.get_running_loop().create_datagram_endpoint(
            lambda: proto, sock=sock
        )
        try:
            for k in range(rounds):
                proto.send(b"to the dead %d" % k, dead)
                proto.send(b"to the living %d" % k, live.getsockname())
                await asyncio.sleep(0)  # let the loop read the reports
                got += drain_live()
            loop = asyncio.get_running_loop()
            deadline = loop.time() + 5.0
            while got < rounds and loop.time() < deadline:  # poll with a deadline
                await asyncio.sleep(0.001)
                got += drain_live()
            assert not transport.is_closing()
            return proto.resent
        finally:
            transport.close()

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        resent = runner.run(main())
    live.close()
    return got, reports, dead, resent


def test_a_datagram_to_a_dead_port_is_reported_and_the_next_one_still_arrives():
    """With IP_RECVERR, Linux fails the send after an ICMP report with that
    report's error and drops the datagram; the protocol sends it again, and
    every report names the dead address."""
    got, reports, dead, resent = _exchange(200)
    assert got == 200  # not one datagram to the live socket lost
    assert reports and set(reports) == {dead}
    assert resent >= 1  # the case the retry exists for did happen
