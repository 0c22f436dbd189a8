#!/usr/bin/env python3
"""What one agent costs to start: CPU and wall time from exec to joined.

The at-once join of bench/detect_vs_serf.py is bounded by this figure: N
agents launched together on C cores cannot all be up before about
N x (CPU per start) / C seconds. Here one seed runs, then agents are started
one at a time, each joining through the seed; for each the run records the
wall time from launch until it logged the seed as joined (and the seed it),
its CPU seconds at that moment (from /proc, 10 ms ticks) and its RSS. Serf's
agent is measured the same way beside it when installed, for the ratio.
First, where one start's CPU goes: a fresh interpreter takes the agent's
start-up steps (bench/memory.py's list) one at a time, timed with
`time.process_time`, median of 5 interpreters.

Then the figure cold-start discovery waits for (bench/discovery.py): CPU
from exec to the agent's first mDNS announcement on the wire, the
interpreter's own start included (getrusage at the moment zeroconf sends
it; the agent alone on loopback, median of 7). `--callgrind` counts the
instructions of that same stretch under valgrind instead: the same figure
to within 0.3 % from run to run, whatever else loads the machine.

`--before PYTHON` measures another checkout's shoal (its venv's python, e.g.
/work/before/.venv/bin/python) beside this one, in turns. Every agent runs
with up-to-date bytecode caches (bench/bytecode.py).

    .venv/bin/python bench/startup.py [--agents 8] [--before PYTHON] [--callgrind]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bytecode import agent_python  # noqa: E402
from detect_vs_serf import (  # noqa: E402 (the bench folder is not a package)
    Agents,
    SerfAgents,
    ShoalAgents,
    _listening,
    interpreter,
    proc_cpu_rss,
    wait_for,
)
from memory import STEPS  # noqa: E402

_CHILD = """
import json, sys, time
for name, code in json.loads(sys.argv[1]):
    before = time.process_time()
    exec(code, globals())
    print(json.dumps([name, time.process_time() - before]), flush=True)
"""


# Runs `shoal agent ARGS` and exits at its first mDNS response (the
# announcement), printing the CPU seconds since exec. zeroconf is imported
# lazily by the agent: an audit hook wraps its send function once loaded.
_TO_ANNOUNCEMENT = """
import os, resource, sys

def hook(event, args):
    core = sys.modules.get("zeroconf._core")
    if event != "import" or core is None or hasattr(core, "_bench_wrapped") \\
            or not hasattr(core, "async_send_with_transport"):
        return
    core._bench_wrapped = send = core.async_send_with_transport

    def wrapped(log_debug, transport, packet, *rest):
        if len(packet) > 2 and packet[2] & 0x80:  # QR bit: a response
            use = resource.getrusage(resource.RUSAGE_SELF)
            os.write(2, f"ANNOUNCED {use.ru_utime + use.ru_stime:.4f}\\n".encode())
            os._exit(0)
        return send(log_debug, transport, packet, *rest)

    core.async_send_with_transport = wrapped

sys.addaudithook(hook)
sys.argv = ["shoal", *sys.argv[1:]]
from shoal.daemon.cli.app import main
main()
"""


def to_announcement(python: str, callgrind: bool, port: int) -> float:
    """CPU seconds (or instructions, under callgrind) from exec to the first
    announcement of one agent of `python`'s checkout, alone on loopback."""
    import re
    import subprocess

    with tempfile.TemporaryDirectory() as tmp:
        grind = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={tmp}/cg"] \
            if callgrind else []  # fmt: skip
        env_py = agent_python(python)
        cmd = [
            *env_py[:-1],
            *grind,
            python,
            "-c",
            _TO_ANNOUNCEMENT,
            "agent",
            "--node-name",
            "x",
            "--bind",
            f"127.0.0.1:{port}",
            "--api",
            f"127.0.0.1:{port + 1}",
            "--data-dir",
            f"{tmp}/data",
            "--log-format",
            "json",
        ]
        err = subprocess.run(cmd, capture_output=True, text=True, timeout=300,
                             cwd=tmp).stderr  # fmt: skip
    m = re.search(r"Collected : (\d+)" if callgrind else r"ANNOUNCED ([\d.]+)", err)
    if m is None:
        raise SystemExit(f"bench: no announcement from {python}: {err[-500:]}")
    return float(m.group(1))


def step_cpu(runs: int = 5, python: str = sys.executable) -> list[tuple[str, float]]:
    """Median CPU seconds of each start-up step, in a fresh interpreter."""
    import json
    import subprocess

    per_run = []
    for _ in range(runs):
        out = subprocess.run([*agent_python(python), "-c", _CHILD, json.dumps(STEPS)],
                             capture_output=True, text=True, check=True, timeout=60)  # fmt: skip
        per_run.append([json.loads(line) for line in out.stdout.splitlines()])
    return [(rows[0][0], statistics.median(r[1] for r in rows)) for rows in zip(*per_run)]


def measure(cls: type[Agents], agents: int, subnet: int) -> list[tuple[float, float, int]]:
    """(wall s to joined, CPU s at joined, RSS bytes) per started agent."""
    workdir = Path(tempfile.mkdtemp(prefix=f"bench-startup-{cls.system}-"))
    a = cls(workdir, subnet)
    rows = []
    try:
        a.launch("n000", None)
        wait_for(lambda: _listening(a.ip(0), 7946), 10)
        for k in range(1, agents + 1):
            name = f"n{k:03d}"
            started = time.monotonic()
            a.launch(name, a.ip(0))
            pid = a.procs[name].pid

            def joined(name: str = name) -> bool:
                return (
                    a.seen(name, "join", "n000") is not None
                    and a.seen("n000", "join", name) is not None
                )

            if not wait_for(joined, 20):
                raise SystemExit(f"bench: {cls.system} agent {name} did not join in 20 s")
            cpu_s, rss = proc_cpu_rss(pid)
            rows.append((max(a.seen(name, "join", "n000"), a.seen("n000", "join", name))
                         - started, cpu_s, rss))  # fmt: skip
    finally:
        a.stop_all()
        shutil.rmtree(workdir, ignore_errors=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--agents", type=int, default=8, help="agents started one at a time")
    parser.add_argument(
        "--before",
        metavar="PYTHON",
        help="also measure the shoal of this interpreter's checkout, in turns",
    )
    parser.add_argument(
        "--callgrind",
        action="store_true",
        help="exec to first announcement in instructions (valgrind), not CPU s",
    )
    args = parser.parse_args()
    pythons = {"shoal": sys.executable}
    if args.before:
        pythons["shoal-before"] = args.before
    print(f"configuration: {args.agents} agents started one after another, each joining one "
          f"seed on loopback; LAN profile; medians; {interpreter()}")  # fmt: skip
    for label, python in pythons.items():
        steps = step_cpu(python=python)
        print(f"  {label}: CPU of one start, step by step (median of 5 fresh interpreters; "
              "the interpreter's own start is not in process_time: about 20 ms):")  # fmt: skip
        for name, cpu_s in steps:
            print(f"    {name:50.50} {cpu_s * 1000:6.1f} ms")
        print(f"    {'total':50} {sum(c for _, c in steps) * 1000:6.1f} ms")
    unit = "instructions (M)" if args.callgrind else "CPU s"
    runs = 2 if args.callgrind else 7
    announced: dict[str, list[float]] = {label: [] for label in pythons}
    for _ in range(runs):
        for j, (label, python) in enumerate(pythons.items()):
            value = to_announcement(python, args.callgrind, 17900 + 10 * j)
            announced[label].append(value / 1e6 if args.callgrind else value)
    for label, values in announced.items():
        print(
            f"  {label:12} exec to first announcement, {unit}: median "
            f"{statistics.median(values):.3f} (runs: {', '.join(f'{v:.3f}' for v in values)})"
        )
    systems: dict[str, type[Agents]] = {}
    for label, python in pythons.items():

        class Shoal(ShoalAgents):
            def command(self, name: str, ip: str, seed: str | None,  # type: ignore[override]
                        python: str = python) -> list[str]:  # fmt: skip
                return [*agent_python(python), *super().command(name, ip, seed)[1:]]

        systems[label] = Shoal
    if shutil.which("serf"):
        systems["serf"] = SerfAgents
    medians = {}
    for subnet, (label, cls) in enumerate(systems.items(), start=60):
        rows = measure(cls, args.agents, subnet)
        wall, cpu, rss = (statistics.median(col) for col in zip(*rows, strict=True))
        medians[label] = (wall, cpu, rss)
        print(f"  {label:12} exec to joined {wall:.3f} s, CPU {cpu:.3f} s, "
              f"RSS {rss / 2**20:.1f} MB")  # fmt: skip
    for label in pythons:
        if "serf" in medians:
            s, f = medians[label], medians["serf"]
            print(f"  {label}/serf: wall {s[0] / f[0]:.2f}, CPU {s[1] / max(f[1], 0.01):.2f} "
                  f"(Serf's CPU is below the 10 ms tick when it shows 0.01)")  # fmt: skip


if __name__ == "__main__":
    main()
