#!/usr/bin/env python3
"""What encryption costs an agent at steady state: shoal plaintext against
shoal with AES-256-GCM, in the same run, and Serf both ways beside it.

For each system and mode: N agents join through one seed (LAN profile),
settle, then over a quiet window we read each agent's CPU time from /proc
(% of one core per agent), its RSS, and UDP datagrams and loopback bytes
out per agent per second. The figure the issue asks for is shoal's
encrypted/plaintext CPU ratio (target <= 1.25). Also prints the bytes a
sealed datagram adds and the CPU to seal and to open-and-check one
1,400-byte datagram, for today's layout (bound to sender and receiver runs,
counter window) and, in the same run, for the layout of `--before REF`
(0.1's stamp and nonce memory; default 0d8755d, its last commit).

Runs in a private network namespace (`unshare --net`), so the UDP counters
are only these agents'. Needs root; Serf rows need `apt-get install serf`.

    .venv/bin/python bench/encryption.py [--nodes 20] [--steady-s 30] [--no-serf]
                                         [--before REF] [--packets-only]
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
import types
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
from shoal.kernel.sealing import (  # noqa: E402
    OVERHEAD_BYTES,
    Envelope,
    Keyring,
    Sessions,
    binding,
)

ROOT = Path(__file__).resolve().parent.parent
BEFORE = "0d8755d"

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
    """Today's layout: seal, then open and check (a fresh counter each)."""
    ring = Keyring([os.urandom(32)], "bench")
    head = bytes((codec.PROTOCOL_VERSION, 0)) + codec.cluster_tag("bench")
    payload = os.urandom(1400 - len(head) - OVERHEAD_BYTES)
    receiver = Sessions(b"r" * 8, 9)
    to = binding(b"r" * 8, 9)
    n = 20000
    t0 = time.perf_counter()
    packets = [ring.seal(head, payload, Envelope(b"s" * 8, 7, to, i), os.urandom(12))
               for i in range(1, n + 1)]  # fmt: skip
    t1 = time.perf_counter()
    for data in packets:
        envelope, _ = ring.open(data)
        receiver.check(envelope)
    t2 = time.perf_counter()
    return (t1 - t0) / n * 1e6, (t2 - t1) / n * 1e6


def per_packet_before_us(ref: str) -> tuple[int, float, float]:
    """The layout of `ref`'s kernel/sealing.py (stamp, nonce memory): its
    overhead, seal, and open-and-check, loaded from git beside today's."""
    source = subprocess.check_output(["git", "-C", str(ROOT), "show", f"{ref}:kernel/sealing.py"])
    old = types.ModuleType("sealing_before")
    register = codec.register
    codec.register = lambda *a: None  # type: ignore[assignment]  # its tags are today's too
    try:
        exec(compile(source, f"{ref}:kernel/sealing.py", "exec"), old.__dict__)
    finally:
        codec.register = register  # type: ignore[assignment]
    ring = old.Keyring([os.urandom(32)], "bench")
    guard = old.ReplayGuard(30_000)
    head = bytes((codec.PROTOCOL_VERSION, 0)) + codec.cluster_tag("bench")
    payload = os.urandom(1400 - len(head) - old.OVERHEAD_BYTES)
    n = 20000
    now_ms = int(time.time() * 1000)
    t0 = time.perf_counter()
    packets = [ring.seal(head, payload, now_ms, os.urandom(12)) for _ in range(n)]
    t1 = time.perf_counter()
    for data in packets:
        stamp, nonce, _ = ring.open(data)
        guard.check(stamp, nonce, int(time.time() * 1000))
    t2 = time.perf_counter()
    return old.OVERHEAD_BYTES, (t1 - t0) / n * 1e6, (t2 - t1) / n * 1e6


def packet_figures(ref: str) -> None:
    """Print bytes and CPU per sealed datagram, before and after."""
    before_bytes, before_seal, before_open = per_packet_before_us(ref)
    seal_us, open_us = per_packet_us()
    print(f"one 1,400-byte datagram, {'':18} {'before':>8} {'now':>8} {'ratio':>7}")
    for label, b, a in (("bytes added by sealing", before_bytes, OVERHEAD_BYTES),
                        ("seal, us", before_seal, seal_us),
                        ("open and check, us", before_open, open_us)):  # fmt: skip
        print(f"  {label:40} {b:>8.1f} {a:>8.1f} {a / b:>7.2f}")
    print(
        f"  (before = {ref}: stamp + random nonce + nonce memory; now = sender, run, "
        "receiver binding, counter window)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, default=20)
    parser.add_argument("--steady-s", type=float, default=30.0)
    parser.add_argument("--rounds", type=int, default=2, help="alternating runs per mode")
    parser.add_argument("--no-serf", action="store_true")
    parser.add_argument("--before", default=BEFORE, help="the commit to compare sealing with")
    parser.add_argument("--packets-only", action="store_true",
                        help="only the per-packet figures (no agents, no root)")  # fmt: skip
    args = parser.parse_args()
    if args.packets_only:
        packet_figures(args.before)
        return
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
    packet_figures(args.before)
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
