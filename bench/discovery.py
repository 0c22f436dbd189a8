#!/usr/bin/env python3
"""Cold-start discovery on a virtual LAN: shoal against `serf agent -discover`.

N agents (default 5), one per network namespace on one bridge, are launched
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

`--before PYTHON` runs a second shoal beside this one in the same run, from
another checkout's venv (e.g. /work/before/.venv/bin/python), in turns:
this, that, Serf, this, ... Every shoal runs with up-to-date bytecode
caches (bench/bytecode.py), as an installed agent does.

    .venv/bin/python bench/discovery.py [--nodes 5] [--runs 3] [--before PYTHON]
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

sys.path.insert(0, str(ROOT / "bench"))
from bytecode import agent_python  # noqa: E402

SERF_JOIN = re.compile(r"EventMemberJoin: (\S+)")


def shoal_cmd(host, name: str, workdir: Path, python: str) -> list[str]:  # noqa: ANN001
    return [*agent_python(python), "-m", "shoal.daemon.cli", "agent", "--node-name", name,
            "--bind", f"{host.ip}:7946", "--api", "127.0.0.1:7947",
            "--data-dir", str(workdir / name), "--log-format", "json"]  # fmt: skip


def serf_cmd(host, name: str, workdir: Path, python: str) -> list[str]:  # noqa: ANN001, ARG001
    return ["serf", "agent", "-node", name, "-bind", f"{host.ip}:7946", "-iface", "eth0",
            "-rpc-addr", f"{host.ip}:7373", "-discover", "shoalbench"]  # fmt: skip


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


STARTS: dict[str, list[float]] = {}  # shoal: CPU s at "agent started", by system


def parse_shoal(line: str) -> str | None:
    if '"member-joined"' not in line:
        return None
    name: str = json.loads(line)["name"]
    return name


def parse_serf(line: str) -> str | None:
    m = SERF_JOIN.search(line)
    return m.group(1) if m else None


TAILS: dict[str, list[float]] = {}  # shoal: last "agent started" -> all see all, by system


def one_run(system: str, n: int, python: str) -> float | None:
    workdir = Path(tempfile.mkdtemp(prefix="bench-disc-"))
    lan = VirtualLan(n, workdir)
    seen: dict[tuple[str, str], float] = {}
    lock = threading.Lock()
    procs = []
    started: list[float] = []
    is_shoal = system.startswith("shoal")
    build, parse = (shoal_cmd, parse_shoal) if is_shoal else (serf_cmd, parse_serf)
    names = [f"{system}-{h.index}" for h in lan.hosts]

    def read(observer: str, proc: subprocess.Popen[str]) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            if '"agent started"' in line:
                with lock:
                    STARTS.setdefault(system, []).append(cpu_s(proc.pid))
                    started.append(time.monotonic())
            subject = parse(line)
            if subject is not None and subject != observer:
                with lock:
                    seen.setdefault((observer, subject), time.monotonic())

    try:
        for host, name in zip(lan.hosts, names):
            cmd = ["ip", "netns", "exec", host.ns, *build(host, name, workdir, python)]
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
                        TAILS.setdefault(system, []).append(done - max(started))
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
    parser.add_argument("--nodes", type=int, default=5)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument(
        "--before",
        metavar="PYTHON",
        help="also run the shoal of this interpreter's checkout, in turns",
    )
    args = parser.parse_args()
    if shutil.which("serf") is None:
        sys.exit("bench: serf is not installed (apt-get install serf)")
    remove_stale_namespaces()
    pythons = {"shoal": sys.executable, "serf": ""}
    if args.before:
        pythons = {"shoal": sys.executable, "shoal-before": args.before, "serf": ""}
    for python in pythons.values():
        if python:
            agent_python(python)  # compile now, not during a run
    results: dict[str, list[float | None]] = {system: [] for system in pythons}
    for _ in range(args.runs):
        for system, python in pythons.items():
            results[system].append(one_run(system, args.nodes, python))
    print(f"configuration: {args.nodes} agents, one per network namespace on one bridge, "
          f"launched at once with no join address, IPv6 DAD off, {args.runs} runs each; "
          "figure: last launch -> every agent lists every other (s)")  # fmt: skip
    medians = {}
    for system, runs in results.items():
        ok = [r for r in runs if r is not None]
        medians[system] = statistics.median(ok) if ok else None
        shown = ", ".join("timeout" if r is None else f"{r:.3f}" for r in runs)
        median = "-" if medians[system] is None else f"{medians[system]:.3f}"
        print(f"  {system:12} median {median} s  runs: {shown}")
    for system, cpus in STARTS.items():
        tails = TAILS.get(system, [])
        print(f"  {system:12} start-up CPU per agent (exec -> first announcement sent): median "
              f"{statistics.median(cpus):.2f} s (10 ms ticks); tail after the last agent "
              f"started: median {statistics.median(tails) if tails else float('nan'):.3f} s "
              f"(runs: {', '.join(f'{t:.3f}' for t in tails)})")  # fmt: skip
    print(f"  load average after the runs: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    for system in pythons:
        if system != "serf" and medians[system] and medians["serf"]:
            print(f"  ratio {system}/serf: {medians[system] / medians['serf']:.2f}")


if __name__ == "__main__":
    main()
