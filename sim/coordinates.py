"""How well the members' network coordinates predict the true round trips.

Serf's `Evaluate` (coordinate/phantom.go), over the coordinates the real
core holds in a simulated run: for every pair of running hosts, the
relative error |estimate - truth| / truth of the distance between their
own coordinates against the latency matrix. Serf reports the mean and the
maximum; we add the median and the 90th percentile, which say more about
what `shoal rtt` will print for a typical pair.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from shoal.sim.cluster import SimCluster
from shoal.sim.network import LatencyMatrix


@dataclass(frozen=True, slots=True)
class CoordinateErrors:
    """Relative errors over all pairs of running hosts."""

    pairs: int
    mean: float
    median: float
    p90: float
    max: float

    def line(self) -> str:
        """One line for a report."""
        return (f"pairs={self.pairs} median={self.median:.2%} p90={self.p90:.2%} "
                f"mean={self.mean:.2%} max={self.max:.2%}")  # fmt: skip


def coordinate_errors(cluster: SimCluster, truth: LatencyMatrix) -> CoordinateErrors:
    """The relative errors of every running pair's estimate against `truth`."""
    coords = [(i, node.swim.coordinate()) for i, node in enumerate(cluster.nodes) if node]
    errors = []
    for k, (i, a) in enumerate(coords):
        for j, b in coords[k + 1 :]:
            actual = truth.rtt_s(i, j)
            errors.append(abs(a.distance_to(b) - actual) / actual)
    assert errors, "fewer than two running hosts"
    errors.sort()
    return CoordinateErrors(
        pairs=len(errors),
        mean=statistics.fmean(errors),
        median=errors[len(errors) // 2],
        p90=errors[min(len(errors) - 1, int(0.9 * len(errors)))],
        max=errors[-1],
    )
