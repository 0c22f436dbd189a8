"""A packet flood for the hostile-input tests: run as its own process
(`python -m tests.integration.flood HOST PORT RATE SECONDS CLUSTER`) so it
uses the other core, and print how many packets it sent.

The mix, in equal parts: random bytes; packets with our header and the
encrypted flag but random contents; packets sealed under a wrong key (they
cost the target a real AES-GCM attempt); well-formed plaintext gossip (an
Alive of a stranger, a Dead of a member) that an encrypted agent must refuse.
"""

from __future__ import annotations

import os
import random
import socket
import sys
import time

from shoal.daemon.network.wire import Wire
from shoal.kernel import codec
from shoal.kernel.sealing import Keyring
from shoal.membership.member import NodeIdentity
from shoal.membership.messages import Alive, Dead

BATCH = 50


def packets(cluster: str, victim: str, n: int) -> list[bytes]:
    """`n` hostile packets, a few hundred distinct ones repeated."""
    rng = random.Random(7)
    tag = codec.cluster_tag(cluster)
    wrong = Wire(cluster, node_id=bytes(16), run=1, keyring=Keyring([os.urandom(32)], cluster))
    plain = Wire(cluster, node_id=bytes(16), run=1, keyring=None)
    stranger = NodeIdentity("intruder", b"i" * 16, ("127.0.0.1", 9))
    kinds = [
        lambda: rng.randbytes(rng.randrange(1, 1400)),
        lambda: bytes([codec.PROTOCOL_VERSION, 1]) + tag + rng.randbytes(rng.randrange(40, 1400)),
        lambda: wrong.datagram([Alive(rng.randrange(1, 9), stranger), Dead(9, victim, "x")]),
        lambda: plain.datagram([Dead(rng.randrange(1, 1 << 40), victim, "intruder")]),
    ]
    distinct = [kinds[i % 4]() for i in range(400)]
    return [distinct[i % len(distinct)] for i in range(n)]


def flood(host: str, port: int, rate: int, seconds: float, cluster: str, victim: str) -> int:
    """Send at `rate` packets/s for `seconds`; return how many were sent."""
    data = packets(cluster, victim, 4000)
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    start = time.monotonic()
    sent = 0
    while (elapsed := time.monotonic() - start) < seconds:
        due = int(elapsed * rate) + BATCH
        while sent < due:
            try:
                sock.sendto(data[sent % len(data)], (host, port))
            except OSError:  # a full socket buffer: count it as not sent
                break
            sent += 1
        time.sleep(BATCH / rate / 2)  # pacing the sender, not waiting for a condition
    return sent


if __name__ == "__main__":
    h, p, r, s, c, v = sys.argv[1:7]
    print(flood(h, int(p), int(r), float(s), c, v), flush=True)
