"""SimNetwork: the faults of a LAN, decided from a seeded `Random`.

Latency per datagram is `min + Exponential(mean)` (TigerBeetle's packet
simulator), so reordering follows from jitter. Loss and duplication are
probabilities per datagram. Partitions are groups of hosts (traffic between
different groups is dropped); `cut` and `isolate` remove single links or a
host; all of them are symmetric unless `drop` is used one way. Streams are
reliable but fail when the link is cut, as TCP would after its timeout.

With a `LatencyMatrix`, every pair of hosts has its own round trip instead:
half of it each way, plus the matrix's jitter (`Exponential(jitter_mean_s)`
per datagram, 0 by default, so that a probe's round trip is the matrix's
exactly, as in Serf's own coordinate tests). The shapes are Serf's
(coordinate/phantom.go: line, grid, two sites over a WAN, random), scaled
so that no round trip exceeds `MAX_SHAPE_RTT_S`: a probe answered after
the probe timeout would be a failure to SWIM, not a sample to Vivaldi.
"""

from __future__ import annotations

import math
import random
from array import array
from collections.abc import Callable
from dataclasses import dataclass

# The longest round trip a shape is scaled to: half the LAN profile's probe
# timeout (500 ms), so that every direct probe is answered in time.
MAX_SHAPE_RTT_S = 0.25


class LatencyMatrix:
    """The true round trip between every pair of hosts, in seconds (symmetric).

    Kept as one flat array of doubles: 8 MB at 1,000 hosts, where a list of
    lists of floats would take four times that.
    """

    __slots__ = ("n", "name", "jitter_mean_s", "_rtt")

    def __init__(self, n: int, rtt_s: Callable[[int, int], float], name: str = "custom",
                 jitter_mean_s: float = 0.0) -> None:  # fmt: skip
        """Tabulate `rtt_s(i, j)` for i < j.

        Args:
            n: hosts.
            rtt_s: the round trip between hosts i < j, called once per pair.
            name: the shape's name, for reports.
            jitter_mean_s: the mean of an exponential delay added to every
                datagram (one way); 0 for none.
        """
        if jitter_mean_s < 0:
            raise ValueError("jitter_mean_s must not be negative")
        self.n = n
        self.name = name
        self.jitter_mean_s = jitter_mean_s
        table = array("d", bytes(8 * n * n))
        for i in range(n):
            for j in range(i + 1, n):
                table[i * n + j] = table[j * n + i] = rtt_s(i, j)
        self._rtt = table

    def rtt_s(self, a: int, b: int) -> float:
        """The round trip between hosts `a` and `b`, without jitter."""
        return self._rtt[a * self.n + b]


def line(n: int, spacing_s: float = 0.010) -> LatencyMatrix:
    """Hosts on a line, `spacing_s` apart (Serf's `GenerateLine`)."""
    return LatencyMatrix(n, lambda i, j: (j - i) * spacing_s, "line")


def grid(n: int, spacing_s: float = 0.010) -> LatencyMatrix:
    """Hosts on a square grid, row by row, `spacing_s` apart (Serf's
    `GenerateGrid`: a side of floor(sqrt(n)), the last row maybe partial)."""
    side = int(math.sqrt(n))

    def rtt(i: int, j: int) -> float:
        dx, dy = j % side - i % side, j // side - i // side
        return math.sqrt(dx * dx + dy * dy) * spacing_s

    return LatencyMatrix(n, rtt, "grid")


def split(n: int, lan_s: float = 0.001, wan_s: float = 0.010) -> LatencyMatrix:
    """Two sites: `lan_s` within one, `lan_s + wan_s` across (Serf's
    `GenerateSplit`, whose first site holds hosts 0..n/2)."""
    half = n // 2
    return LatencyMatrix(n, lambda i, j: lan_s + (wan_s if (i <= half) != (j <= half) else 0.0),
                         "split")  # fmt: skip


def random_matrix(n: int, rng: random.Random, mean_s: float = 0.100,
                  deviation_s: float = 0.010) -> LatencyMatrix:  # fmt: skip
    """Independent normal round trips per pair (Serf's `GenerateRandom`):
    a matrix no Euclidean space holds, so the error never reaches zero."""
    return LatencyMatrix(n, lambda i, j: rng.gauss(mean_s, deviation_s), "random")


def shape(name: str, n: int, seed: int) -> LatencyMatrix:
    """One of Serf's shapes at `n` hosts, scaled so that no round trip is
    above `MAX_SHAPE_RTT_S`, or `jittered`: the grid with exponential jitter
    of 2 % of its spacing on every datagram, each way. Deterministic from
    `seed` (only `random` and the jitter draw numbers)."""
    if name == "line":
        return line(n, min(0.010, MAX_SHAPE_RTT_S / max(1, n - 1)))
    if name in ("grid", "jittered"):
        side = int(math.sqrt(n))
        extent = math.hypot(side - 1, (n - 1) // side)
        spacing = min(0.010, MAX_SHAPE_RTT_S / max(1.0, extent))
        matrix = grid(n, spacing)
        if name == "jittered":
            matrix.name, matrix.jitter_mean_s = "jittered", 0.02 * spacing
        return matrix
    if name == "split":
        return split(n)
    if name == "random":
        return random_matrix(n, random.Random(seed * 31_337 + 5))
    raise ValueError(f"no latency shape {name!r}; one of {', '.join(SHAPES)}")


SHAPES = ("line", "grid", "split", "random", "jittered")


@dataclass(frozen=True, slots=True)
class LinkProfile:
    """Per-datagram fault probabilities and latency (seconds)."""

    latency_min_s: float = 0.0002
    latency_mean_s: float = 0.0005
    loss: float = 0.0
    duplicate: float = 0.0

    def __post_init__(self) -> None:
        if not (0.0 <= self.loss < 1.0 and 0.0 <= self.duplicate < 1.0):
            raise ValueError("loss and duplicate are probabilities below 1")


class SimNetwork:
    """Which datagrams arrive, when, and how often."""

    def __init__(
        self, rng: random.Random, profile: LinkProfile, latency: LatencyMatrix | None = None
    ) -> None:
        self.rng = rng
        self.profile = profile
        self.latency = latency
        self._group: dict[int, int] = {}
        self._cut: set[tuple[int, int]] = set()
        self._drop: dict[tuple[int, int], float] = {}

    # -- raft-style fault verbs ------------------------------------------------

    def partition(self, groups: list[list[int]]) -> None:
        """Split hosts into groups that cannot reach each other."""
        self._group = {h: g for g, hosts in enumerate(groups) for h in hosts}

    def cut(self, a: int, b: int) -> None:
        """Remove the link between `a` and `b` both ways."""
        self._cut.add((a, b))
        self._cut.add((b, a))

    def isolate(self, host: int, hosts: list[int]) -> None:
        """Cut `host` off from every other host in `hosts`."""
        for other in hosts:
            if other != host:
                self.cut(host, other)

    def drop(self, src: int, dst: int, probability: float) -> None:
        """Drop datagrams from `src` to `dst` with `probability` (one way)."""
        self._drop[(src, dst)] = probability

    def heal(self) -> None:
        """Undo every partition, cut and drop."""
        self._group.clear()
        self._cut.clear()
        self._drop.clear()

    # -- decisions -------------------------------------------------------------

    def connected(self, src: int, dst: int) -> bool:
        """Whether `src` can reach `dst` at all right now."""
        if self._group and self._group.get(src, -1) != self._group.get(dst, -1):
            return False
        return (src, dst) not in self._cut

    def datagram_copies(self, src: int, dst: int) -> int:
        """How many copies of one datagram arrive (0, 1 or 2)."""
        if not self.connected(src, dst):
            return 0
        p = self.profile
        extra = self._drop.get((src, dst), 0.0)
        if p.loss and self.rng.random() < p.loss:
            return 0
        if extra and self.rng.random() < extra:
            return 0
        if p.duplicate and self.rng.random() < p.duplicate:
            return 2
        return 1

    def delays_s(self, src: int, dst: int) -> tuple[float, ...]:
        """The delay of each copy of one datagram that arrives (none, one
        or two): `datagram_copies` and a `latency_s` per copy, drawing the
        same numbers in the same order, in one call (the simulator's
        per-datagram path; three calls cost 4 % of a 1,000-node run)."""
        if self._group or self._cut or self._drop or self.latency is not None:
            return tuple(self.latency_s(src, dst) for _ in range(self.datagram_copies(src, dst)))
        p = self.profile
        rng = self.rng
        if p.loss and rng.random() < p.loss:
            return ()
        if p.duplicate and rng.random() < p.duplicate:
            lambd = 1.0 / p.latency_mean_s
            first = p.latency_min_s + rng.expovariate(lambd)
            return (first, p.latency_min_s + rng.expovariate(lambd))
        return (p.latency_min_s + rng.expovariate(1.0 / p.latency_mean_s),)

    def latency_s(self, src: int, dst: int) -> float:
        """One delivery delay from `src` to `dst`."""
        matrix = self.latency
        if matrix is not None:
            delay = matrix.rtt_s(src, dst) / 2
            if matrix.jitter_mean_s:
                delay += self.rng.expovariate(1.0 / matrix.jitter_mean_s)
            return delay
        p = self.profile
        return p.latency_min_s + self.rng.expovariate(1.0 / p.latency_mean_s)
