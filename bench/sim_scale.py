#!/usr/bin/env python3
"""How far the simulator scales, and how fast news spreads against log N.

For each N (default 100, 1000, 10000):
  - formation: N nodes start within 1 s, all joining one seed (the worst
    case: every node must learn every other); simulated seconds until all
    see all alive, and wall seconds per simulated second;
  - steady state: wall seconds per simulated second of a formed cluster;
  - dissemination: one node changes its tags; gossip rounds (of 200 ms)
    until every node has the change, next to log2(N) and log3(N) (fan-out 3);
  - memory: peak RSS, and bytes per (node, member) view entry.

10,000 nodes hold 10^8 view entries, and their formation by joining costs
N² x λ·log N handler calls (hours); above `--form-max` nodes (default 1000)
the cluster starts formed instead (`SimCluster.start_formed`: every node
already knows every other), and only the steady state is measured.

    .venv/bin/python bench/sim_scale.py [--sizes 100 1000 10000] [--steady-s 60]
"""

from __future__ import annotations

import argparse
import math
import resource
import sys
import time

from shoal.membership.profiles import PROFILES  # noqa: E402
from shoal.sim.checks import converged as converged_now  # noqa: E402
from shoal.sim.cluster import SimCluster  # noqa: E402
from shoal.sim.scenarios import form_cluster, run_until_converged  # noqa: E402


def rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def measure(
    n: int, steady_s: float, stagger_s: float, seed: int, form_max: int
) -> dict[str, float | None]:
    base_rss = rss_mb()
    cluster = SimCluster(n, seed, PROFILES["lan"])
    out: dict[str, float | None] = {"formed_sim_s": None, "formation_wall_per_sim_s": None}
    t0 = time.perf_counter()
    if n <= form_max:
        form_cluster(cluster, stagger_s=stagger_s)
        converged = run_until_converged(cluster, stagger_s + 600.0)
        out["formed_sim_s"] = converged
        out["formation_wall_per_sim_s"] = (time.perf_counter() - t0) / cluster.now
    else:
        cluster.start_formed(0.0)  # every node starts knowing every other
        cluster.run_until(0.0)
    out["start_wall_s"] = time.perf_counter() - t0
    start = cluster.now
    t0 = time.perf_counter()
    cluster.run_until(start + steady_s)
    out["steady_wall_per_sim_s"] = (time.perf_counter() - t0) / steady_s
    out["converged"] = float(converged_now(cluster))
    out["dissemination_rounds"] = dissemination_rounds(cluster)
    out["log2_n"] = math.log2(n)
    out["log3_n"] = math.log(n, 3)
    out["peak_rss_mb"] = rss_mb()
    out["bytes_per_view_entry"] = (rss_mb() - base_rss) * 1024 * 1024 / (n * n)
    return out


def dissemination_rounds(cluster: SimCluster) -> float | None:
    """Gossip rounds until a tag change made by node 1 reaches every node."""
    node = cluster.nodes[1]
    assert node is not None
    name = node.name
    started = cluster.now
    node.set_tags((("bench", "1"),), cluster.clocks[1].local(started))
    cluster._flush(1)

    def everyone_has_it() -> bool:
        for other in cluster.nodes:
            if other is None:
                continue
            m = other.swim.table.get(name)
            if m is None or m.ident.tags != (("bench", "1"),):
                return False
        return True

    while cluster.now < started + 60:
        cluster.run_until(cluster.now + 0.05)
        if everyone_has_it():
            return (cluster.now - started) / PROFILES["lan"].gossip_interval_s
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[100, 1000, 10000])
    parser.add_argument("--steady-s", type=float, default=60.0)
    parser.add_argument("--stagger-s", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--form-max",
        type=int,
        default=1000,
        help="largest N formed by joining; above it, nodes start formed",
    )
    args = parser.parse_args()
    print(f"configuration: LAN profile, no loss, latency 0.2 ms + exp(0.5 ms); N <= "
          f"{args.form_max}: nodes start within {args.stagger_s} s joining one seed; larger N: "
          f"nodes start formed (each knowing all); steady window {args.steady_s} s, "
          f"seed {args.seed}, one core, Python {sys.version.split()[0]}")  # fmt: skip
    header = ("N", "formed (sim s)", "formation wall/sim", "start wall s", "steady wall/sim",
              "converged", "rounds", "log2 N", "log3 N", "peak RSS MB", "B/entry")  # fmt: skip
    print("  ".join(f"{h:>18}" for h in header))
    for n in args.sizes:
        r = measure(n, args.steady_s, args.stagger_s, args.seed, args.form_max)
        cells = [n, *r.values()]
        print("  ".join(f"{c:>18.3f}" if isinstance(c, float) else f"{c!s:>18}" for c in cells),
              flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
