#!/usr/bin/env python3
"""False failure reports, shoal beside Serf, under the same stress (issue 42).

N agents of each system (one system at a time, the same schedule) on
loopback in a private network namespace (`unshare --net`), with:

- `--loss` of every datagram dropped at random (nftables on the
  namespace's `lo`, on the receiving side: each datagram, each way);
- one member starved in bursts: SIGSTOP for 0.2-1 s (`--stop-s`), then
  SIGCONT for 1-3 s, the same seeded schedule for both systems, for
  `--duration-s`. A longer stop is a hang, which both systems are there to
  report: shoal declares a member that answers nobody for about 2 s failed
  (its checks of suspects, docs/architecture.md), Serf one silent for 6 s.

Nobody fails, so every "member failed" an agent logs is false: counted per
(observer, member) event, the members wrongly failed, and of them the
starved one. The finer figure: suspicions an agent raised itself (its own
probe failed: shoal's `member-suspected` with itself as the source,
memberlist's "Suspect X has failed, no acks received"). Both systems are
read from their own log lines (bench/detect_vs_serf.py). Needs root and
`apt-get install serf nftables`.

    .venv/bin/python bench/false_positives.py [--nodes 10] [--duration-s 180]
                                              [--loss 0.10] [--seed 1]
                                              [--stop-s 0.2 1.0]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import detect_vs_serf as dvs  # noqa: E402


class ShoalAgents(dvs.ShoalAgents):
    """shoal's agents, their own suspicions read too."""

    def parse(self, line: str) -> tuple[str, str] | None:  # type: ignore[override]
        if '"member-suspected"' in line:
            record = json.loads(line)
            if record.get("source") == record.get("observer"):
                return "suspected", record["name"]
            return None
        return super().parse(line)


class SerfAgents(dvs.SerfAgents):
    """Serf's agents, memberlist's own suspicions read too."""

    _suspect = re.compile(r"memberlist: Suspect (\S+) has failed")

    def parse(self, line: str) -> tuple[str, str] | None:  # type: ignore[override]
        m = self._suspect.search(line)
        if m is not None:
            return "suspected", m.group(1)
        return super().parse(line)


def add_loss(percent: float) -> None:
    rules = ("table inet fp_loss {\n chain input {\n"
             "  type filter hook input priority 0; policy accept;\n"
             f"  meta l4proto udp numgen random mod 1000 < {int(percent * 1000)} drop\n"
             " }\n}\n")  # fmt: skip
    subprocess.run(["nft", "-f", "-"], input=rules, text=True, check=True)


def remove_loss() -> None:
    subprocess.run(["nft", "delete", "table", "inet", "fp_loss"], check=False,
                   capture_output=True)  # fmt: skip


def starve(proc: subprocess.Popen[str], rng: random.Random, until: float,
           stops: list[float], stop_range: tuple[float, float]) -> None:  # fmt: skip
    """SIGSTOP for `stop_range` s, SIGCONT 1-3 s, until `until` (a bench may sleep)."""
    while time.monotonic() < until:
        stop_s = rng.uniform(*stop_range)
        proc.send_signal(signal.SIGSTOP)
        time.sleep(stop_s)
        proc.send_signal(signal.SIGCONT)
        stops.append(stop_s)
        time.sleep(rng.uniform(1.0, 3.0))


def run_system(cls: type[dvs.Agents], args: argparse.Namespace, subnet: int) -> dict:
    workdir = Path(tempfile.mkdtemp(prefix=f"bench-fp-{cls.__name__}-"))
    a = cls(workdir, subnet)
    try:
        dvs.launch_cluster(a, args.nodes)
        if not dvs.wait_for(lambda: dvs.all_joined(a), 60):
            raise SystemExit(f"{cls.system}: the cluster did not form")
        time.sleep(dvs.SETTLE_S)  # past joins, election and discovery start
        victim = f"n{args.nodes - 1:03d}"
        started = time.monotonic()
        with a.lock:
            a.events = [e for e in a.events if e[0] < 0]
        add_loss(args.loss)
        stops: list[float] = []
        starver = threading.Thread(
            target=starve,
            args=(
                a.procs[victim],
                random.Random(args.seed),
                started + args.duration_s,
                stops,
                tuple(args.stop_s),
            ),
        )
        starver.start()
        starver.join()
        remove_loss()
        time.sleep(5.0)  # reports of the last burst arrive
        with a.lock:
            failed = [(o, s) for t, o, kind, s in a.events if kind == "failed" and t >= started]
            suspected = [s for t, _, kind, s in a.events if kind == "suspected" and t >= started]
    finally:
        remove_loss()
        for proc in a.procs.values():
            proc.send_signal(signal.SIGCONT)
        a.stop_all()
        shutil.rmtree(workdir, ignore_errors=True)
    return {
        "events": len(failed),
        "members": len({s for _, s in failed}),
        "victim_events": sum(1 for _, s in failed if s == victim),
        "observers": len({o for o, _ in failed}),
        "stops": len(stops),
        "stopped_s": sum(stops),
        "suspected": len(suspected),
        "victim_suspected": sum(1 for s in suspected if s == victim),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, default=10)
    parser.add_argument("--duration-s", type=float, default=180.0)
    parser.add_argument("--loss", type=float, default=0.10)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--only", choices=["shoal", "serf"])
    parser.add_argument("--stop-s", type=float, nargs=2, default=[0.2, 1.0],
                        metavar=("MIN", "MAX"), help="how long each SIGSTOP lasts")  # fmt: skip
    args = parser.parse_args()
    if os.environ.get("SHOAL_BENCH_NETNS") != "1":
        for tool in ("serf", "nft", "unshare"):
            if shutil.which(tool) is None:
                sys.exit(f"bench: {tool} is not installed (apt-get install serf nftables)")
        env = {**os.environ, "SHOAL_BENCH_NETNS": "1"}
        script = f"ip link set lo up && exec {sys.executable} {' '.join(sys.argv)}"
        sys.exit(subprocess.call(["unshare", "--net", "sh", "-c", script], env=env))
    load_at_start = dvs.load_average()
    rows = []
    for subnet, cls in ((30, ShoalAgents), (40, SerfAgents)):
        if args.only and cls.system != args.only:
            continue
        print(f"running {cls.system} ...", file=sys.stderr, flush=True)
        rows.append((cls.system, run_system(cls, args, subnet)))
    print(
        f"N = {args.nodes}, {args.duration_s:.0f} s, {args.loss:.0%} datagram loss, "
        f"one member starved (SIGSTOP {args.stop_s[0]:g}-{args.stop_s[1]:g} s every 1-3 s, "
        f"seed {args.seed}); machine load "
        f"(1, 5, 15 min) at the start {load_at_start}, at the end {dvs.load_average()}"
    )
    print(
        f"{'system':8} {'false failed events':>20} {'members':>8} {'of them starved':>16} "
        f"{'observers':>10} {'own suspicions':>15} {'of the starved':>15} {'stops':>6} "
        f"{'stopped s':>10}"
    )
    for system, r in rows:
        print(
            f"{system:8} {r['events']:20d} {r['members']:8d} {r['victim_events']:16d} "
            f"{r['observers']:10d} {r['suspected']:15d} {r['victim_suspected']:15d} "
            f"{r['stops']:6d} {r['stopped_s']:10.1f}"
        )


if __name__ == "__main__":
    main()
