#!/usr/bin/env python3
"""What encryption costs an agent at steady state: shoal plaintext against
shoal with AES-256-GCM, in the same run, and Serf both ways beside it.

For each system and mode: N agents join through one seed (LAN profile),
settle, then over a quiet window we read each agent's CPU time from /proc
(% of one core per agent), its RSS, and UDP datagrams and loopback bytes
out per agent per second. The figure the issue asks for is shoal's
encrypted/plaintext CPU ratio (target <= 1.25). Also prints the cost of
sealing and opening one 1,400-byte datagram.

Runs in a private network namespace (`unshare --net`), so the UDP counters
are only these agents'. Needs root; Serf rows need `apt-get install serf`.

    .venv/bin/python bench/encryption.py [--nodes 20] [--steady-s 30] [--no-serf]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from detect_vs_serf import (  # noqa: E402
    SerfAgents,
    ShoalAgents,
    all_joined,
    fmt,
    launch_cluster,
    steady_state,
    wait_for,
)

from shoal.daemon.keys import generate_key  # noqa: E402
from shoal.kernel import codec  # noqa: E402
from shoal.kernel.sealing import Keyring  # noqa: E402

KEY = generate_key()


class EncryptedShoal(ShoalAgents):
    def command(self, name: str, ip: str, seed: str | None) -> list[str]:  # type: ignore[override]
        return [*super().command(name, ip, seed), "--encrypt", KEY, "--no-discovery"]


class PlainShoal(ShoalAgents):
    def command(self, name: str, ip: str, seed: str | None) -> list[str]:  # type: ignore[override]
        return [*super().command(name, ip, seed), "--no-discovery"]


class EncryptedSerf(SerfAgents):
    def command(self, name: str, ip: str, seed: str | None) -> list[str]:  # type: ignore[override]
        return [*super().command(name, ip, seed), "-encrypt", KEY]


def measure(cls: type, n: int, steady_s: float, subnet: int) -> dict:
    workdir = Path(tempfile.mkdtemp(prefix="bench-enc-"))
    a = cls(workdir, subnet)
    try:
        launch_cluster(a, n)
        if not wait_for(lambda: all_joined(a), 60):
            raise SystemExit(f"bench: {cls.__name__} did not converge")
        return steady_state(a, n, steady_s)
    finally:
        a.stop_all()
        shutil.rmtree(workdir, ignore_errors=True)


def per_packet_us() -> tuple[float, float]:
    ring = Keyring([os.urandom(32)], "bench")
    head = bytes((codec.PROTOCOL_VERSION, 0)) + codec.cluster_tag("bench")
    payload = os.urandom(1400 - len(head) - 36)
    n = 20000
    t0 = time.perf_counter()
    for _ in range(n):
        data = ring.seal(head, payload, 1, os.urandom(12))
    t1 = time.perf_counter()
    for _ in range(n):
        ring.open(data)
    t2 = time.perf_counter()
    return (t1 - t0) / n * 1e6, (t2 - t1) / n * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, default=20)
    parser.add_argument("--steady-s", type=float, default=30.0)
    parser.add_argument("--rounds", type=int, default=2, help="alternating runs per mode")
    parser.add_argument("--no-serf", action="store_true")
    args = parser.parse_args()
    if os.environ.get("SHOAL_BENCH_NETNS") != "1":
        env = {**os.environ, "SHOAL_BENCH_NETNS": "1"}
        script = f"ip link set lo up && exec {sys.executable} {' '.join(sys.argv)}"
        sys.exit(subprocess.call(["unshare", "--net", "sh", "-c", script], env=env))
    systems = [("shoal", PlainShoal, EncryptedShoal)]
    if not args.no_serf and shutil.which("serf"):
        systems.append(("serf", SerfAgents, EncryptedSerf))
    print(f"configuration: {args.nodes} agents per run, LAN profile, steady window "
          f"{args.steady_s} s, {args.rounds} alternating rounds per mode, loopback in a "
          f"private netns, {os.cpu_count()} cores, AES-256-GCM (cryptography)")  # fmt: skip
    seal_us, open_us = per_packet_us()
    print(f"one 1,400-byte datagram: seal {seal_us:.1f} us, open {open_us:.1f} us")
    subnet = 30
    for name, plain, sealed in systems:
        runs: dict[str, list[dict]] = {"plaintext": [], "encrypted": []}
        for _ in range(args.rounds):  # alternate, so drift on the host hits both modes
            for mode, cls in (("plaintext", plain), ("encrypted", sealed)):
                subnet += 1
                print(f"running {name} {mode} ...", file=sys.stderr, flush=True)
                runs[mode].append(measure(cls, args.nodes, args.steady_s, subnet))
        print(f"\n{name}: {'figure':30} {'plaintext':>10} {'encrypted':>10} {'ratio':>7}")
        for key, label in (("cpu_pct", "CPU % of a core per agent"), ("rss_mb", "RSS MB per agent"),
                           ("datagrams_s", "datagrams out /agent/s"),
                           ("bytes_s", "bytes out /agent/s")):  # fmt: skip
            p = statistics.mean(r[key] for r in runs["plaintext"])
            e = statistics.mean(r[key] for r in runs["encrypted"])
            print(f"{'':{len(name) + 2}}{label:30} {fmt(p):>10} {fmt(e):>10} {e / p:>7.2f}")


if __name__ == "__main__":
    main()
