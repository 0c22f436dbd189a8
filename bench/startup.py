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

    .venv/bin/python bench/startup.py [--agents 8]
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


def step_cpu(runs: int = 5) -> list[tuple[str, float]]:
    """Median CPU seconds of each start-up step, in a fresh interpreter."""
    import json
    import subprocess

    per_run = []
    for _ in range(runs):
        out = subprocess.run([sys.executable, "-c", _CHILD, json.dumps(STEPS)],
                             capture_output=True, text=True, check=True, timeout=60)  # fmt: skip
        per_run.append([json.loads(line) for line in out.stdout.splitlines()])
    return [(rows[0][0], statistics.median(r[1] for r in rows)) for rows in zip(*per_run)]


def measure(cls: type[Agents], agents: int) -> list[tuple[float, float, int]]:
    """(wall s to joined, CPU s at joined, RSS bytes) per started agent."""
    workdir = Path(tempfile.mkdtemp(prefix=f"bench-startup-{cls.system}-"))
    a = cls(workdir, 60 if cls is ShoalAgents else 61)
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
                return a.seen(name, "join", "n000") is not None and \
                    a.seen("n000", "join", name) is not None

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
    args = parser.parse_args()
    systems: list[type[Agents]] = [ShoalAgents]
    if shutil.which("serf"):
        systems.append(SerfAgents)
    print(f"configuration: {args.agents} agents started one after another, each joining one "
          f"seed on loopback; LAN profile; medians; {interpreter()}")  # fmt: skip
    steps = step_cpu()
    print("  CPU of one start, step by step (median of 5 fresh interpreters; the "
          "interpreter's own start is not in process_time: about 20 ms):")  # fmt: skip
    for name, cpu_s in steps:
        print(f"    {name:50.50} {cpu_s * 1000:6.1f} ms")
    print(f"    {'total':50} {sum(c for _, c in steps) * 1000:6.1f} ms")
    medians = {}
    for cls in systems:
        rows = measure(cls, args.agents)
        wall, cpu, rss = (statistics.median(col) for col in zip(*rows, strict=True))
        medians[cls.system] = (wall, cpu, rss)
        print(f"  {cls.system:6} exec to joined {wall:.3f} s, CPU {cpu:.3f} s, "
              f"RSS {rss / 2**20:.1f} MB")  # fmt: skip
    if len(medians) == 2:
        s, f = medians["shoal"], medians["serf"]
        print(f"  shoal/serf: wall {s[0] / f[0]:.2f}, CPU {s[1] / max(f[1], 0.01):.2f} "
              f"(Serf's CPU is below the 10 ms tick when it shows 0.01)")  # fmt: skip


if __name__ == "__main__":
    main()
