#!/usr/bin/env python3
"""Cold-start discovery on a virtual LAN: shoal against `serf agent -discover`.

N agents (default 6), one per network namespace on one bridge, are launched
at once with no join address. Figure: the time from the last launch until
every agent has recorded every other as joined, taken from each agent's own
log lines stamped on arrival. Median over `--runs` (default 3), the same
namespaces style for both, IPv6 duplicate-address detection off (Serf's mDNS
query is abandoned when its IPv6 send fails and retried only every 60 s).
Needs root, iproute2 and `apt-get install serf`.

For shoal the run also splits the figure: each agent's CPU seconds when it
logged "agent started" (imports, database, sockets, zeroconf up and the first
announcement sent: the start-up part, which N agents on C cores pay about
N x CPU / C of), and the tail from the last "agent started" to all see all
(the protocol part: mDNS answers, resolution, the SWIM join). The load
average is printed: other work on the machine stretches the start-up part.

    .venv/bin/python bench/discovery.py [--nodes 6] [--runs 3]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # tests.lan.netlab: the checkout is not on the path as itself

from tests.lan.netlab import VirtualLan, remove_stale_namespaces  # noqa: E402

SERF_JOIN = re.compile(r"EventMemberJoin: (\S+)")


def shoal_cmd(host, name: str, workdir: Path) -> list[str]:  # noqa: ANN001
    return [sys.executable, "-m", "shoal.daemon.cli", "agent", "--node-name", name,
            "--bind", f"{host.ip}:7946", "--api", "127.0.0.1:7947",
            "--data-dir", str(workdir / name), "--log-format", "json"]  # fmt: skip


def serf_cmd(host, name: str, workdir: Path) -> list[str]:  # noqa: ANN001
    return ["serf", "agent", "-node", name, "-bind", f"{host.ip}:7946", "-iface", "eth0",
            "-rpc-addr", f"{host.ip}:7373", "-discover", "shoalbench"]  # fmt: skip


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


STARTS: list[tuple[float, float]] = []  # shoal: (CPU s, monotonic) at "agent started"


def parse_shoal(line: str) -> str | None:
    if '"member-joined"' not in line:
        return None
    name: str = json.loads(line)["name"]
    return name


def parse_serf(line: str) -> str | None:
    m = SERF_JOIN.search(line)
    return m.group(1) if m else None


TAILS: list[float] = []  # shoal: last "agent started" -> all see all


def one_run(system: str, n: int) -> float | None:
    workdir = Path(tempfile.mkdtemp(prefix="bench-disc-"))
    lan = VirtualLan(n, workdir)
    seen: dict[tuple[str, str], float] = {}
    lock = threading.Lock()
    procs = []
    started: list[float] = []
    build, parse = (shoal_cmd, parse_shoal) if system == "shoal" else (serf_cmd, parse_serf)
    names = [f"{system}-{h.index}" for h in lan.hosts]

    def read(observer: str, proc: subprocess.Popen[str]) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            if '"agent started"' in line:
                with lock:
                    STARTS.append((cpu_s(proc.pid), time.monotonic()))
                    started.append(time.monotonic())
            subject = parse(line)
            if subject is not None and subject != observer:
                with lock:
                    seen.setdefault((observer, subject), time.monotonic())

    try:
        for host, name in zip(lan.hosts, names):
            cmd = ["ip", "netns", "exec", host.ns, *build(host, name, workdir)]
            proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                    text=True, cwd=ROOT)  # fmt: skip
            procs.append(proc)
            threading.Thread(target=read, args=(name, proc), daemon=True).start()
        last_launch = time.monotonic()
        pairs = [(o, s) for o in names for s in names if o != s]
        deadline = last_launch + 90
        while time.monotonic() < deadline:
            with lock:
                if all(p in seen for p in pairs):
                    done = max(seen[p] for p in pairs)
                    if started:
                        TAILS.append(done - max(started))
                    return done - last_launch
            time.sleep(0.02)
        return None
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()
        lan.close()
        shutil.rmtree(workdir, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, default=6)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    if shutil.which("serf") is None:
        sys.exit("bench: serf is not installed (apt-get install serf)")
    remove_stale_namespaces()
    results: dict[str, list[float | None]] = {"shoal": [], "serf": []}
    for _ in range(args.runs):
        for system in results:
            results[system].append(one_run(system, args.nodes))
    print(f"configuration: {args.nodes} agents, one per network namespace on one bridge, "
          f"launched at once with no join address, IPv6 DAD off, {args.runs} runs each; "
          "figure: last launch -> every agent lists every other (s)")  # fmt: skip
    medians = {}
    for system, runs in results.items():
        ok = [r for r in runs if r is not None]
        medians[system] = statistics.median(ok) if ok else None
        shown = ", ".join("timeout" if r is None else f"{r:.3f}" for r in runs)
        print(f"  {system:6} median {medians[system]}  runs: {shown}")
    if STARTS:
        print(f"  shoal  start-up CPU per agent (exec -> first announcement sent): median "
              f"{statistics.median(c for c, _ in STARTS):.2f} s; tail after the last agent "
              f"started: median {statistics.median(TAILS):.3f} s "
              f"(runs: {', '.join(f'{t:.3f}' for t in TAILS)})")  # fmt: skip
    print(f"  load average during the runs: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    if medians["shoal"] and medians["serf"]:
        print(f"  ratio shoal/serf: {medians['shoal'] / medians['serf']:.2f}")


if __name__ == "__main__":
    main()
