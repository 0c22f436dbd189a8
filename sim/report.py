"""`shoal simulate`: run a scenario and print what an operator wants to know."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

from shoal import native
from shoal.kernel.errors import ConfigError
from shoal.membership.profiles import PROFILES
from shoal.sim.scenarios import CRASH_MODES, SimResult, run_simulation


def simulate_command(args: argparse.Namespace) -> int:
    """Validate the flags, run, print text or JSON."""
    if not 1 <= args.nodes <= 100_000:
        raise ConfigError("--nodes: expected 1 to 100000")
    if not 0 < args.duration <= 86_400:
        raise ConfigError("--duration: expected 0 to 86400 simulated seconds")
    if not 0 <= args.loss < 1:
        raise ConfigError("--loss: expected a probability in [0, 1)")
    if not 0 <= args.crash < args.nodes:
        raise ConfigError("--crash: expected 0 to nodes-1")
    if args.profile not in PROFILES:
        raise ConfigError(f"--profile: expected one of {', '.join(sorted(PROFILES))}")
    _check_memory(args.nodes)
    if args.history_out:
        return _churn_command(args)
    if args.crash_mode not in CRASH_MODES:
        raise ConfigError(f"--crash-mode: expected one of {', '.join(CRASH_MODES)}")
    result = run_simulation(args.nodes, args.duration, args.loss, args.crash, args.seed,
                            args.profile, formed=args.formed, crash_mode=args.crash_mode,
                            progress=_Progress(args.duration))  # fmt: skip
    if args.json:
        print(json.dumps({**result.to_json(), "hot_path": native.describe()}))
    else:
        print(format_text(result))
    return 0


class _Progress:
    """One line on stderr at most every few seconds of wall time, once a run
    has taken more than that: a 1,000-node run is silent for a minute
    otherwise (stdout stays the report alone)."""

    def __init__(self, duration_s: float) -> None:
        self.every_s = float(os.environ.get("SHOAL_PROGRESS_EVERY_S", "3"))
        self.duration_s = duration_s
        self.started = time.perf_counter()
        self.shown = self.started

    def __call__(self, simulated_s: float) -> None:
        now = time.perf_counter()
        if now - self.shown >= self.every_s:
            self.shown = now
            print(f"simulate: {simulated_s:.0f} of {self.duration_s:.0f} s simulated "
                  f"(wall {now - self.started:.0f} s)", file=sys.stderr, flush=True)  # fmt: skip


# Every node's view holds every node: views share immutable rows, so an
# entry is a dict slot and two list slots: a formed 10,000-node run peaked
# at 4.35 GB, 44 bytes per (node, member) entry (170 before rows were
# shared, with a crash). Rows a formation builds are one per view (40 B
# more), hence 80.
VIEW_ENTRY_BYTES = 80


def _check_memory(nodes: int) -> None:
    """Refuse a run that cannot fit, before it fills the machine's memory."""
    need = nodes * nodes * VIEW_ENTRY_BYTES
    available = _available_bytes()
    if available is not None and need > available:
        raise ConfigError(f"--nodes: {nodes} nodes need about {need / 2**30:.1f} GiB for their "
                          f"views, and {available / 2**30:.1f} GiB is available")  # fmt: skip


def _available_bytes() -> int | None:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def _churn_command(args: argparse.Namespace) -> int:
    from pathlib import Path

    from shoal.sim.churn import run_churn

    if args.session_mean <= 0 or args.downtime_mean <= 0:
        raise ConfigError("--session-mean and --downtime-mean: expected positive seconds")
    if not 0 <= args.leave_ratio <= 1:
        raise ConfigError("--leave-ratio: expected a share in [0, 1]")
    out = Path(args.history_out)
    truth = run_churn(args.nodes, args.duration, out, args.session_mean, args.downtime_mean,
                      args.leave_ratio, args.seed, args.profile, args.loss)  # fmt: skip
    result = {"history_out": str(out), "nodes": args.nodes, "duration_s": args.duration,
              "sessions": len(truth.sessions), "downtimes": len(truth.downtimes)}  # fmt: skip
    if args.json:
        print(json.dumps(result))
    else:
        print(f"simulated {args.nodes} nodes for {args.duration:g} s with churn: "
              f"{len(truth.sessions)} sessions ended, {len(truth.downtimes)} downtimes; "
              f"histories and truth.json in {out}")  # fmt: skip
    return 0


def _s(x: float | None) -> str:
    return "never" if x is None else f"{x:.2f} s"


def format_text(r: SimResult) -> str:
    """A human-readable report."""
    c = r.config
    lines = [
        f"simulated {c['nodes']} nodes for {c['duration_s']:g} s, profile {c['profile']}, "
        f"loss {c['loss']:.1%}, seed {c['seed']}{', started formed' if c['formed'] else ''} "
        f"(wall {r.wall_s:.1f} s)",
        f"converged (all see all alive): {_s(r.converged_s)}",
    ]
    for crash in r.crashes:
        lines.append(
            f"crash ({c['crash_mode']}) of {crash.node} at {crash.crashed_at_s:.1f} s: "
            f"first saw it dead after "
            f"{_s(crash.first_detect_s)}, all after {_s(crash.all_detect_s)}"
        )
    lines.append(
        f"false positives: {r.false_positive_events} declarations about "
        f"{r.false_positive_nodes} live nodes"
    )
    lines.append(
        f"traffic per node: {r.datagrams_per_node_s:.2f} datagrams/s, "
        f"{r.bytes_per_node_s:.0f} bytes/s"
    )
    lines.append(f"hot path: {native.describe()}")
    return "\n".join(lines)
