"""CPU of one `shoal members` against a running agent, beside `serf members`.

Scripts, health checks and monitoring run the command line in loops, so what
one call costs is CPU a busy machine pays again and again (issue 42: 0.2 s a
call, `serf members` 6 ms; the goal is 50 ms or less). One shoal agent and
one Serf agent run on loopback; each command runs `--runs` times, one after
another; the figure is the CPU (user + system) each run's process used, from
the kernel's accounting of the child (`RUSAGE_CHILDREN`), median and
quartiles, and the ratio to Serf's; beside them, `python -c pass` with the
same interpreter and site-packages, the floor of any Python command on the
machine at that moment. `--before PYTHON` runs another
checkout's `shoal members` against the same agent in the same run. Each
interpreter runs with fresh bytecode caches of its own (bench/bytecode.py),
as an installed command has.

    python bench/cli.py [--runs 40] [--before /work/main/.venv/bin/python]
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bytecode import agent_python  # noqa: E402

IP = "127.0.0.61"


def child_cpu_s(cmd: list[str]) -> tuple[float, float, subprocess.CompletedProcess[bytes]]:
    """(CPU seconds, wall seconds, result) of running `cmd` once."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    out = subprocess.run(cmd, capture_output=True, stdin=subprocess.DEVNULL, timeout=60)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu, wall, out


def measure(commands: list[tuple[str, list[str]]], runs: int) -> list[tuple[str, dict[str, float]]]:
    """Run each command `runs` times (after one warm-up), taking turns, so
    that the machine's other load falls on all of them alike; their CPU and
    wall figures."""
    samples: dict[str, tuple[list[float], list[float]]] = {label: ([], []) for label, _ in commands}
    for label, cmd in commands:
        _, _, first = child_cpu_s(cmd)
        if first.returncode != 0:
            raise SystemExit(f"{label}: exit {first.returncode}: {first.stderr.decode()[-500:]}")
    for _ in range(runs):
        for label, cmd in commands:
            cpu, wall, _ = child_cpu_s(cmd)
            samples[label][0].append(cpu)
            samples[label][1].append(wall)
    rows = []
    for label, (cpus, walls) in samples.items():
        q = statistics.quantiles(cpus, n=4)
        rows.append(
            (
                label,
                {
                    "cpu_ms": statistics.median(cpus) * 1000,
                    "q1_ms": q[0] * 1000,
                    "q3_ms": q[2] * 1000,
                    "wall_ms": statistics.median(walls) * 1000,
                },
            )
        )
    return rows


def wait_until(pred, timeout_s: float) -> None:  # noqa: ANN001
    deadline = time.monotonic() + timeout_s
    while not pred():
        if time.monotonic() > deadline:
            raise SystemExit("an agent did not start")
        time.sleep(0.1)


def _answers(cmd: list[str]) -> bool:
    return subprocess.run(cmd, capture_output=True, timeout=30).returncode == 0


def shoal_members_cmd(python: str) -> list[str]:
    script = Path(python).parent / "shoal"  # the console script, as a user runs it
    return [*agent_python(python), str(script), "members", "--api", f"{IP}:7947"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=40)
    parser.add_argument("--before", metavar="PYTHON", help="another checkout's interpreter")
    args = parser.parse_args()
    if shutil.which("serf") is None:
        raise SystemExit("serf is missing: `make bench` installs it (Debian package serf)")
    work = Path(tempfile.mkdtemp(prefix="shoal-bench-cli-"))
    procs = []
    try:
        shoal = subprocess.Popen(
            [sys.executable, "-m", "shoal.daemon.cli", "agent", "--node-name", "bench-shoal",
             "--bind", f"{IP}:7946", "--api", f"{IP}:7947", "--data-dir", str(work / "shoal"),
             "--no-discovery", "--bootstrap-expect", "1", "--log-format", "json"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
        serf = subprocess.Popen(
            [
                "serf",
                "agent",
                "-node",
                "bench-serf",
                "-bind",
                f"{IP}:7950",
                "-rpc-addr",
                f"{IP}:7373",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        procs = [shoal, serf]
        ours = shoal_members_cmd(sys.executable)
        serfs = ["serf", "members", "-rpc-addr", f"{IP}:7373"]
        wait_until(lambda: _answers(ours) and _answers(serfs), 30)
        commands = [("shoal members", ours)]
        if args.before:
            commands.append(("shoal members (before)", shoal_members_cmd(args.before)))
        # The interpreter's own start, with the same site-packages: what no
        # Python command can go below on this machine.
        commands.append(("python -c pass (floor)", [*agent_python(sys.executable), "-c", "pass"]))
        commands.append(("serf members", serfs))
        rows = measure(commands, args.runs)
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
        shutil.rmtree(work, ignore_errors=True)
    serf_cpu = rows[-1][1]["cpu_ms"]
    print(f"{args.runs} runs each, one agent of each on loopback; load {os.getloadavg()[0]:.1f}")
    print(f"{'command':24} {'CPU ms (median)':>16} {'q1-q3':>13} {'wall ms':>9} {'x serf':>7}")
    for label, r in rows:
        print(
            f"{label:24} {r['cpu_ms']:16.1f} {r['q1_ms']:6.1f}-{r['q3_ms']:<6.1f} "
            f"{r['wall_ms']:9.1f} {r['cpu_ms'] / serf_cpu:7.1f}"
        )


if __name__ == "__main__":
    main()
