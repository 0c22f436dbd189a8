#!/usr/bin/env python3
"""Python's garbage collections in loaded agents: how many, how long, and the gaps they leave.

Three real agents of the metadata log on loopback (run it in a network
namespace of its own), each timing its collections (daemon/gcpauses.py,
`shoal_gc_pause_seconds` on /metrics). Three phases, each measured the
same way:

  meta      --meta-keys metadata keys written (transactions of 64 puts,
            16 clients over the three agents): a burst of log writes
  kv        --kv-records kv records written (16 clients)
  restore   `shoal snapshot save` from a follower, then `shoal snapshot
            restore --kv merge` through it, until the two others hold every
            record (bench/backup.py's online restore)
  soak      --soak-seconds of overwrites of the same 10^4 kv records and
            metadata keys (16 clients, a connection per request): whether
            the frozen objects and the memory stay level once nothing grows

For each phase and agent: the collections per generation (count, total
time, the longest: exact when it is the longest so far, otherwise the
histogram's bucket bound), the agent's resident memory after the phase,
and the longest gap between answers to `GET /v1/health` asked every 5 ms
of the controller and of the follower (bench/backup.py's `Lag`).

    ip netns exec NS .venv/bin/python bench/gc_pauses.py [--meta-keys 100000]
        [--kv-records 100000] [--value-bytes 100] [--soak-seconds 120]
        [--gc-threshold 700,10,10] [--python-gc]

--gc-threshold sets the agents' `gc.set_threshold` (SHOAL_GC_THRESHOLD,
read at start), and --python-gc leaves the survivors of full collections
unfrozen (SHOAL_GC_FREEZE_SURVIVORS=0: Python's own way, daemon/gcpauses.py):
the ways to measure another setting against the agent's.
Figures: docs/performance.md, "Garbage collection".
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # `backup`
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # `tests`

from backup import Lag, call, merged, scrape  # noqa: E402

from tests.conftest import poll_until  # noqa: E402
from tests.integration.agents import AgentCluster, AgentProcess  # noqa: E402
from tests.integration.metaagents import controller_name, three  # noqa: E402

Scrape = dict[str, float]


def rss_mb(agent: AgentProcess) -> float:
    assert agent.proc is not None
    for line in Path(f"/proc/{agent.proc.pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def pauses(before: Scrape, after: Scrape) -> str:
    """The phase's collections per generation: count, total, longest."""
    shown = []
    for g in range(3):
        label = f'{{generation="{g}"}}'
        count = after[f"shoal_gc_pause_seconds_count{label}"] - \
            before[f"shoal_gc_pause_seconds_count{label}"]  # fmt: skip
        total = after[f"shoal_gc_pause_seconds_sum{label}"] - \
            before[f"shoal_gc_pause_seconds_sum{label}"]  # fmt: skip
        longest_ever = after[f"shoal_gc_pause_max_seconds{label}"]
        if longest_ever > before[f"shoal_gc_pause_max_seconds{label}"]:
            longest = f"{longest_ever * 1000:.0f} ms"
        else:  # not a new longest: the smallest bucket bound that holds them all
            bounds = sorted((float(k.split('le="')[1].split('"')[0]), after[k] - before[k])
                            for k in after if k.startswith("shoal_gc_pause_seconds_bucket")
                            and f'generation="{g}"' in k)  # fmt: skip
            bound = next((b for b, n in bounds if n >= count), float("inf"))
            longest = f"<={bound * 1000:.0f} ms" if count else "-"
        shown.append(f"gen{g} {count:.0f}x {total:.2f} s longest {longest}")
    return "; ".join(shown)


def phase(name: str, members: list[AgentProcess], watched: dict[str, AgentProcess],
          work: object) -> None:  # fmt: skip
    """Runs `work()` and prints what the collector did meanwhile."""
    before = {a.name: scrape(a) for a in members}
    lags = {role: Lag(agent) for role, agent in watched.items()}
    started = time.perf_counter()
    assert callable(work)
    work()
    took = time.perf_counter() - started
    gaps = ", ".join(f"{role} {lag.stop() * 1000:.0f} ms" for role, lag in lags.items())
    print(f"{name:8} {took:6.1f} s; longest gap between health answers: {gaps}")
    for agent in members:
        after = scrape(agent)
        print(f"         {agent.name}: {pauses(before[agent.name], after)}; "
              f"RSS {rss_mb(agent):.0f} MB; frozen {after['shoal_gc_frozen_objects']:.0f}, "
              f"thaws {after['shoal_gc_thaws_total']:.0f}")  # fmt: skip
    sys.stdout.flush()


def write_meta(members: list[AgentProcess], keys: int, value: str) -> None:
    def txn(first: int) -> None:
        ops = [{"op": "put", "key": f"m/{i:07}", "value": value}
               for i in range(first, min(first + 64, keys))]  # fmt: skip
        body = json.dumps({"compare": [], "success": ops}).encode()
        while call(members[first // 64 % 3], "POST", "/v1/meta/txn", body) != 200:
            pass

    with ThreadPoolExecutor(16) as pool:
        list(pool.map(txn, range(0, keys, 64)))


def write_kv(members: list[AgentProcess], records: int, value: str) -> None:
    def kv(first: int) -> None:
        for i in range(first, min(first + 100, records)):
            while call(members[i % 3], "PUT", f"/v1/kv/r/{i:07}", value.encode()) != 200:
                pass

    with ThreadPoolExecutor(16) as pool:
        list(pool.map(kv, range(0, records, 100)))


def restore(members: list[AgentProcess], asked: AgentProcess, file: Path, records: int) -> None:
    shoal = [sys.executable, "-m", "shoal.daemon.cli", "snapshot"]
    api = ["--api", f"{asked.ip}:7947"]
    subprocess.run([*shoal, "save", str(file), *api], check=True, capture_output=True)
    others = [a for a in members if a is not asked]
    before = {a.name: merged(a) for a in others}
    subprocess.run([*shoal, "restore", str(file), "--kv", "merge", *api], check=True,
                   capture_output=True, timeout=900)  # fmt: skip
    poll_until(lambda: all(merged(a) - before[a.name] >= records for a in others), 900,
               interval_s=0.05)  # fmt: skip


def soak(members: list[AgentProcess], seconds: float, value: str) -> None:
    until = time.perf_counter() + seconds

    def client(n: int) -> None:
        i = n
        while time.perf_counter() < until:
            agent = members[i % 3]
            if n % 2:
                call(agent, "PUT", f"/v1/kv/r/{i % 10_000:07}", value.encode())
            else:
                call(agent, "PUT", f"/v1/meta/m/{i % 10_000:07}", value.encode())
            i += 16

    with ThreadPoolExecutor(16) as pool:
        list(pool.map(client, range(16)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--meta-keys", type=int, default=100_000)
    parser.add_argument("--kv-records", type=int, default=100_000)
    parser.add_argument("--value-bytes", type=int, default=100)
    parser.add_argument("--soak-seconds", type=float, default=120)
    parser.add_argument("--gc-threshold", help="the agents' gc.set_threshold, e.g. 700,10,10")
    parser.add_argument(
        "--python-gc", action="store_true", help="survivors of full collections left unfrozen"
    )
    args = parser.parse_args()
    if args.python_gc:
        os.environ["SHOAL_GC_FREEZE_SURVIVORS"] = "0"
    if args.gc_threshold:
        os.environ["SHOAL_GC_THRESHOLD"] = args.gc_threshold
    print(f"gc threshold: {args.gc_threshold or 'the agent default'}; survivors "
          f"{'left' if args.python_gc else 'frozen'}; load average "
          f"{os.getloadavg()[0]:.1f} at start")  # fmt: skip
    value = "x" * args.value_bytes
    with tempfile.TemporaryDirectory() as tmp:
        agents = AgentCluster(Path(tmp))
        try:
            members = three(agents)
            leader = controller_name(members[0])
            controller = next(a for a in members if a.name == leader)
            follower = next(a for a in members if a.name != leader)
            watched = {"controller": controller, "follower": follower}
            print(f"start    RSS {', '.join(f'{rss_mb(a):.0f}' for a in members)} MB")
            phase("meta", members, watched, lambda: write_meta(members, args.meta_keys, value))
            phase("kv", members, watched, lambda: write_kv(members, args.kv_records, value))
            phase(
                "restore",
                members,
                watched,
                lambda: restore(members, follower, Path(tmp) / "b.tar", args.kv_records),
            )
            phase("soak", members, watched, lambda: soak(members, args.soak_seconds, value))
        finally:
            agents.stop()
    print(f"load average {os.getloadavg()[0]:.1f} at the end")


if __name__ == "__main__":
    main()
