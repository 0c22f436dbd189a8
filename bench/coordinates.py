#!/usr/bin/env python3
"""Network coordinates: bytes on the wire, and accuracy per latency shape.

Three parts, each printed with its configuration:

1. bytes per ack: the CBOR size of an `Ack` without and with a coordinate
   (float32 on the wire), beside what CBOR float64s would cost, and a
   ping's size with a sequence number from the coordinate band;
2. Serf's own setup (coordinate/performance_test.go): our port of the
   algorithm driven directly, Serf's sizes and 1,000 cycles, several seeds,
   beside the bounds Serf's tests require (mean and max relative error);
3. through the real core in the simulator: N formed nodes on a latency
   matrix of each shape (sim/network.py), probing as SWIM does (one direct
   probe per second, LAN profile); relative error over all pairs of the
   members' own coordinates at each checkpoint: median, p90, mean, max.

The 1,000-node runs take minutes per shape (about 15 CPU seconds per 100
simulated seconds, and a 1,000-node cluster needs about 1,000 simulated
seconds for each node to have timed every other once):

    .venv/bin/python bench/coordinates.py                       # 100 and 1,000 nodes (long)
    .venv/bin/python bench/coordinates.py --sizes 100 --seconds 200 400 800
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time

import cbor2

from shoal.kernel import codec
from shoal.membership.messages import Ack, Ping
from shoal.membership.probing import COORD_SEQ_MIN
from shoal.membership.profiles import PROFILES
from shoal.membership.vivaldi import Coordinate, VivaldiClient, VivaldiConfig
from shoal.sim.cluster import SimCluster
from shoal.sim.coordinates import coordinate_errors
from shoal.sim.network import SHAPES, LatencyMatrix, grid, line, random_matrix, shape, split

# Serf coordinate/performance_test.go: shape, nodes, truth, bound on the mean
# and on the maximum relative error after 1,000 cycles.
SERF_CASES = [
    ("line", 10, lambda: line(10, 0.010), 0.0031, 0.0130),
    ("grid", 25, lambda: grid(25, 0.010), 0.0016, 0.0230),
    ("split", 25, lambda: split(25, 0.001, 0.010), 0.000060, 0.00048),
    ("random", 25, lambda: random_matrix(25, random.Random(1), 0.100, 0.010), 0.075, 0.33),
]


def ack_bytes() -> None:
    print("== bytes per ack (one CBOR message inside a datagram)")
    rng = random.Random(1)
    coord = Coordinate(tuple(rng.uniform(-0.05, 0.05) for _ in range(8)), 0.21, -0.0003, 0.0021)
    wall_ms = 1_800_000_000_000
    for label, seq in (("old seq (small)", 1234), ("coordinate band seq", COORD_SEQ_MIN + 1234)):
        plain = codec.encoded_size(Ack(seq, wall_ms))
        with_coord = codec.encoded_size(Ack(seq, wall_ms, coord))
        ping = codec.encoded_size(Ping(seq, "node-00042", "node-00007"))
        print(f"  {label:22s} ack {plain} B, ack with coordinate {with_coord} B "
              f"(+{with_coord - plain}), ping {ping} B")  # fmt: skip
    as_float64 = len(cbor2.dumps([*coord.vec, coord.error, coord.adjustment, coord.height]))
    print(f"  the coordinate: 44 B of float32 + 2 B head; as CBOR float64s it would be "
          f"{as_float64} B")  # fmt: skip


def serf_setup(seeds: int) -> None:
    print(f"== Serf's setup: direct updates, 1,000 cycles, seeds 1..{seeds} (Random(seed))")
    for name, n, make, bound_mean, bound_max in SERF_CASES:
        means, maxes = [], []
        for seed in range(1, seeds + 1):
            rng = random.Random(seed)
            clients = [VivaldiClient(VivaldiConfig(), rng) for _ in range(n)]
            truth = make()
            simulate(clients, truth, 1000, random.Random(seed))
            errors = pair_errors(clients, truth)
            means.append(statistics.fmean(errors))
            maxes.append(max(errors))
        mean, worst, mx = statistics.median(means), max(means), statistics.median(maxes)
        print(
            f"  {name:7s} n={n:3d}  mean: median over seeds {mean:.4%} (worst {worst:.4%}; "
            f"Serf's bound {bound_mean:.4%})  max: median {mx:.3%} (Serf's {bound_max:.3%})"
        )


def simulate(clients: list[VivaldiClient], truth: LatencyMatrix, cycles: int,
             rng: random.Random) -> None:  # fmt: skip
    """Serf's `Simulate`: each cycle, each client times a random other."""
    n = len(clients)
    for _ in range(cycles):
        for i, client in enumerate(clients):
            j = rng.randrange(n)
            if j != i:
                client.update(f"node_{j}", clients[j].coordinate, truth.rtt_s(i, j))


def pair_errors(clients: list[VivaldiClient], truth: LatencyMatrix) -> list[float]:
    """Serf's `Evaluate`: relative error of every pair."""
    out = []
    for i, a in enumerate(clients):
        for j in range(i + 1, len(clients)):
            actual = truth.rtt_s(i, j)
            out.append(abs(a.distance_to(clients[j].coordinate) - actual) / actual)
    return out


def through_core(n: int, shapes: list[str], checkpoints: list[float], seed: int) -> None:
    print(f"== through the core: {n} formed nodes, LAN profile, seed {seed}")
    for name in shapes:
        truth = shape(name, n, seed)
        cluster = SimCluster(n, seed, PROFILES["lan"], latency=truth)
        cluster.start_formed()
        started = time.process_time()
        for at in checkpoints:
            cluster.run_until(at)
            errors = coordinate_errors(cluster, truth)
            cpu = time.process_time() - started
            print(f"  {name:8s} n={n:5d} at {at:6.0f} s: {errors.line()}  cpu={cpu:.0f} s",
                  flush=True)  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[100, 1000])
    parser.add_argument("--shapes", nargs="+", default=list(SHAPES), choices=SHAPES)
    parser.add_argument("--seconds", type=float, nargs="+", default=[200.0, 400.0, 1000.0],
                        help="simulated checkpoints")  # fmt: skip
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--serf-seeds", type=int, default=10)
    args = parser.parse_args()
    ack_bytes()
    serf_setup(args.serf_seeds)
    for n in args.sizes:
        through_core(n, args.shapes, sorted(args.seconds), args.seed)
    return 0


if __name__ == "__main__":
    sys.exit(main())
