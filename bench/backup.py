#!/usr/bin/env python3
"""Backups of a loaded cluster: the file's size, and how long saving and restoring take.

Three real agents of the metadata log on loopback (run it in a network
namespace of its own: agents on loopback find each other by mDNS), loaded
with --meta-keys metadata keys (transactions of 64 puts) and --kv-records
kv records, each value --value-bytes long. Then, each timed:

  save      `shoal snapshot save FILE` from a follower (the barrier through
            the controller, the state and kv records encoded in a thread,
            the tar sent and checked by the CLI)
  inspect   `shoal snapshot inspect FILE` (reads and checks it whole)
  restore   `shoal snapshot restore FILE --kv merge` into the running
            cluster (the state through the log as one entry; every kv
            record written anew), first with a copy of FILE without its
            kv records (the metadata alone), then FILE
  seed      `shoal snapshot restore FILE --offline` into a new directory
  serve     the seeded agent started until a write through it commits

and the longest stall of the controller's loop during the online restore
(`shoal_loop_lag_max`-style: the longest gap a 5 ms ticker in an API
client saw between answers of `GET /v1/health` on the controller; a
rough bound, the client shares the machine). For the restore with kv
records also: how long until the two other agents hold every record
(their `shoal_store_merged_total` up by --kv-records), the longest gap on
each agent (the agent asked writes the batches, the others merge them),
over the whole restore and in its kv part (from the first record merged
elsewhere; with how many gaps there were over 100 ms), and how the
records travelled (pushes, anti-entropy sessions) from each agent's
counters.

    ip netns exec NS .venv/bin/python bench/backup.py [--meta-keys 100000]
        [--kv-records 100000] [--value-bytes 100]

Figures: docs/operations.md, "Backups".
"""

from __future__ import annotations

import argparse
import http.client
import json
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # `tests`

from shoal.daemon.backup import build_backup, read_backup  # noqa: E402
from tests.conftest import poll_until  # noqa: E402
from tests.integration.agents import AgentCluster, AgentProcess  # noqa: E402
from tests.integration.metaagents import META, controller_name, three, writable  # noqa: E402


def call(agent: AgentProcess, method: str, path: str, body: bytes | None = None) -> int:
    conn = http.client.HTTPConnection(agent.ip, 7947, timeout=60)
    try:
        conn.request(method, path, body=body)
        resp = conn.getresponse()
        resp.read()
        return resp.status
    finally:
        conn.close()


def load(members: list[AgentProcess], meta_keys: int, kv_records: int, value: str) -> None:
    """The keys and records, through the agents in turn, 16 clients."""

    def txn(first: int) -> None:
        ops = [{"op": "put", "key": f"m/{i:07}", "value": value}
               for i in range(first, min(first + 64, meta_keys))]  # fmt: skip
        body = json.dumps({"compare": [], "success": ops}).encode()
        while call(members[first // 64 % 3], "POST", "/v1/meta/txn", body) != 200:
            pass

    def kv(first: int) -> None:
        for i in range(first, min(first + 100, kv_records)):
            while call(members[i % 3], "PUT", f"/v1/kv/r/{i:07}", value.encode()) != 200:
                pass

    with ThreadPoolExecutor(16) as pool:
        list(pool.map(txn, range(0, meta_keys, 64)))
        list(pool.map(kv, range(0, kv_records, 100)))


def cli(*args: str) -> tuple[float, str]:
    started = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "shoal.daemon.cli", *args], capture_output=True,
                         timeout=900)  # fmt: skip
    took = time.perf_counter() - started
    if out.returncode != 0:
        raise SystemExit(f"shoal {' '.join(args)}: {out.stderr.decode().strip()}")
    return took, out.stdout.decode().strip()


class Lag:
    """The longest gap between answers to a health check, asked every 5 ms."""

    def __init__(self, agent: AgentProcess) -> None:
        self.agent, self.worst, self.done = agent, 0.0, threading.Event()
        self.gaps: list[tuple[float, float]] = []  # (when it ended, how long)
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        last = time.perf_counter()
        while not self.done.is_set():
            try:
                call(self.agent, "GET", "/v1/health")
            except OSError:
                pass
            now = time.perf_counter()
            self.worst = max(self.worst, now - last)
            self.gaps.append((now, now - last))
            last = now
            time.sleep(0.005)

    def stop(self) -> float:
        self.done.set()
        self.thread.join()
        return self.worst

    def worst_since(self, since: float) -> float:
        """The longest gap that began at or after `since` (perf_counter)."""
        return max((gap for end, gap in self.gaps if end - gap >= since), default=0.0)

    def over_since(self, since: float, limit_s: float) -> int:
        """How many gaps that began at or after `since` were over `limit_s`."""
        return sum(1 for end, gap in self.gaps if end - gap >= since and gap > limit_s)


def scrape(agent: AgentProcess) -> dict[str, float]:
    """Every sample of `agent`'s /metrics, labels included in the name."""
    conn = http.client.HTTPConnection(agent.ip, 7947, timeout=60)
    try:
        conn.request("GET", "/metrics")
        text = conn.getresponse().read().decode()
    finally:
        conn.close()
    pairs = (line.rsplit(" ", 1) for line in text.splitlines() if line[:1] not in ("#", ""))
    return {name: float(value) for name, value in pairs}


def metrics(agent: AgentProcess) -> dict[str, float]:
    """`agent`'s counters and gauges (/metrics) without labels, by name."""
    return {name: value for name, value in scrape(agent).items() if "{" not in name}


def merged(agent: AgentProcess) -> int:
    """The records `agent` has taken in from its peers (newer than its own)."""
    return int(metrics(agent)["shoal_store_merged_total"])


# What the agents did meanwhile, printed after a restore: how the records
# travelled (pushes, anti-entropy sessions) and what stalled.
_SHOWN = ("sync_pushes_sent", "sync_pushes_received", "sync_records_sent",
          "sync_records_received", "sync_sessions_started", "sync_sessions_repaired",
          "agent_stream_errors", "agent_slow_flushes", "store_fsyncs")  # fmt: skip


def activity(before: dict[str, float], after: dict[str, float]) -> str:
    shown = ((n, after.get(f"shoal_{n}_total", 0) - before.get(f"shoal_{n}_total", 0))
             for n in _SHOWN)  # fmt: skip
    return " ".join(f"{n}={v:.0f}" for n, v in shown if v)


def restore_kv(members: list[AgentProcess], asked: AgentProcess, controller: AgentProcess,
               file: Path, records: int) -> None:  # fmt: skip
    """The restore with its kv records, until every agent has them: each
    record is a new version, so each of the others merges every one once
    (by push or anti-entropy). The kv part begins when the first of them
    arrives at another agent (the metadata part is done then)."""
    others = [a for a in members if a is not asked]
    before = {a.name: merged(a) for a in others}
    counted = {a.name: metrics(a) for a in members}
    lags = {f"{a.name} ({role(a, asked, controller)})": Lag(a) for a in members}
    started = time.perf_counter()
    command = [sys.executable, "-m", "shoal.daemon.cli", "snapshot", "restore", str(file),
               "--kv", "merge", "--api", f"{asked.ip}:7947"]  # fmt: skip
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE) as proc:
        kv_began = None
        while proc.poll() is None:
            if kv_began is None and any(merged(a) > before[a.name] for a in others):
                kv_began = time.perf_counter()
            time.sleep(0.05)
        took = time.perf_counter() - started
        said, err = proc.communicate()
    if proc.returncode != 0:
        raise SystemExit(f"shoal snapshot restore: {err.decode().strip()}")
    print(f"restore  {took:6.2f} s   {said.decode().strip()}")
    poll_until(lambda: all(merged(a) - before[a.name] >= records for a in others), 900,
               interval_s=0.05)  # fmt: skip
    done = time.perf_counter()
    kv_began = kv_began or done
    print(
        f"         every agent has the kv records {done - started:6.2f} s after the restore "
        f"was asked, {done - kv_began:.2f} s after the first of them reached another agent"
    )
    gaps = ", ".join(f"{name} {lag.stop() * 1000:.0f} ms ({lag.worst_since(kv_began) * 1000:.0f} "
                     f"ms in the kv part, {lag.over_since(kv_began, 0.1)} over 100 ms)"
                     for name, lag in lags.items())  # fmt: skip
    print(f"         longest gap between health answers meanwhile: {gaps}")
    for agent in members:
        print(
            f"         {agent.name} ({role(agent, asked, controller)}): "
            f"{activity(counted[agent.name], metrics(agent))}"
        )


def role(agent: AgentProcess, asked: AgentProcess, controller: AgentProcess) -> str:
    return "asked" if agent is asked else "controller" if agent is controller else "other"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--meta-keys", type=int, default=100_000)
    parser.add_argument("--kv-records", type=int, default=100_000)
    parser.add_argument("--value-bytes", type=int, default=100)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        agents = AgentCluster(root)
        try:
            members = three(agents)
            leader = controller_name(members[0])
            follower = next(a for a in members if a.name != leader)
            controller = next(a for a in members if a.name == leader)
            started = time.perf_counter()
            lag = Lag(controller)
            load(members, args.meta_keys, args.kv_records, "x" * args.value_bytes)
            print(
                f"loaded {args.meta_keys} metadata keys and {args.kv_records} kv records "
                f"of {args.value_bytes} bytes in {time.perf_counter() - started:.1f} s "
                f"(the controller's longest gap meanwhile: {lag.stop() * 1000:.0f} ms)"
            )
            file = root / "backup.tar"
            api = f"{follower.ip}:7947"
            took, said = cli("snapshot", "save", str(file), "--api", api)
            print(f"save     {took:6.2f} s   {said}")
            print(f"size     {file.stat().st_size / 1e6:6.1f} MB")
            took, _ = cli("snapshot", "inspect", str(file))
            print(f"inspect  {took:6.2f} s")
            meta_only = root / "meta-only.tar"
            backup = read_backup(file.read_bytes())
            meta_only.write_bytes(build_backup(backup.manifest, backup.snapshot, []))
            lag = Lag(controller)
            took, said = cli("snapshot", "restore", str(meta_only), "--kv", "merge", "--api", api)
            print(f"restore (metadata only)  {took:6.2f} s   {said}")
            print(f"         controller's longest gap between health answers meanwhile: "
                  f"{lag.stop() * 1000:.0f} ms")  # fmt: skip
            restore_kv(members, follower, controller, file, args.kv_records)
            for agent in members:
                agent.kill()
            seeded = AgentProcess("seeded", root, [], META)
            took, _ = cli("snapshot", "restore", str(file), "--offline", "--data-dir",
                          str(seeded.data_dir), "--node-name", "seeded")  # fmt: skip
            print(f"seed     {took:6.2f} s   (offline, into a new data directory)")
            started = time.perf_counter()
            agents.agents.append(seeded.start())
            poll_until(lambda: writable(seeded), 300, interval_s=0.1)
            print(
                f"serve    {time.perf_counter() - started:6.2f} s   (the seeded agent started "
                "until a write through it committed)"
            )
        finally:
            agents.stop()


if __name__ == "__main__":
    main()
