#!/usr/bin/env python3
"""The least a Python agent on shoal's stack does before it can join anybody.

It imports what DESIGN.md prescribes (asyncio on uvloop, structlog, cbor2)
and what the agent's core uses (msgspec, rocksdict), opens a RocksDB, binds
a UDP and a TCP socket on ADDR, logs one JSON line ("ready") and waits. No
protocol, no configuration, none of shoal's own modules. bench/detect_vs_serf.py
starts N - 1 of these at once, as it starts N - 1 agents: no agent written on
this stack can have joined before they are all ready.

    .venv/bin/python bench/stack_floor.py 127.0.0.1
"""

import asyncio
import socket
import sys
import tempfile

import cbor2
import msgspec  # noqa: F401 (imported for its cost: the agent's structs)
import rocksdict
import structlog
import uvloop


async def main(addr: str) -> None:
    structlog.configure(processors=[structlog.processors.TimeStamper(fmt="iso"),
                                    structlog.processors.JSONRenderer()])  # fmt: skip
    options = rocksdict.Options(raw_mode=True)
    options.create_if_missing(True)
    with tempfile.TemporaryDirectory() as tmp:
        db = rocksdict.Rdict(f"{tmp}/db", options)
        loop = asyncio.get_running_loop()
        udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        udp.bind((addr, 0))
        tcp = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        tcp.bind((addr, 0))
        await loop.create_datagram_endpoint(asyncio.DatagramProtocol, sock=udp)
        server = await asyncio.start_server(lambda r, w: None, sock=tcp)
        structlog.get_logger().info("ready", probe=cbor2.dumps({"ping": 1}).hex())
        sys.stdout.flush()
        try:
            await asyncio.Event().wait()  # until killed
        finally:
            server.close()
            db.close()


if __name__ == "__main__":
    uvloop.run(main(sys.argv[1] if len(sys.argv) > 1 else "127.0.0.1"))
