"""Vivaldi network coordinates, as in Serf's `coordinate` package.

Theory of operation. Every member holds a `Coordinate`: a point in an
8-dimensional Euclidean space plus a *height* (the access link, which every
path to and from the node crosses: Dabek et al., "Vivaldi: a decentralized
network coordinate system", SIGCOMM 2004, §5.4), an *adjustment* (a
per-node offset averaged over the last few samples: Lee et al., "On
suitability of Euclidean embedding for host-based network coordinate
systems", 2010) and an *error*, the node's confidence (dimensionless; 1.5
at the start, lower is better). The estimated round trip between two
members is the distance between their coordinates, in seconds.

A node learns from each round trip it measures to a peer whose coordinate
it has (in shoal: a direct probe's `Ack`, probing.py):

1. the RTT goes through a moving median of the last 3 samples to that peer
   (Ledlie et al., "Network coordinates in the wild", NSDI 2007, §4.2), so
   that one slow packet is never seen by the spring model;
2. Vivaldi's update (Dabek §3.4, adaptive timestep): the error moves
   towards the sample's relative error, weighted by how sure we are
   compared with the peer, and the coordinate moves along the line to the
   peer by `cc * weight * (rtt - distance)`; the height moves in
   proportion (Serf's `ApplyForce`);
3. the adjustment becomes the mean of the last 20 `rtt - raw distance`
   samples, halved (each side of a pair carries half);
4. gravity (Ledlie §4.3): a pull towards the origin that grows with the
   square of the distance over `gravity_rho` (150 s), so that the whole
   system does not drift away while keeping its shape;
5. a coordinate that became NaN or infinite is reset to the origin and the
   reset is counted.

Everything here is pure: the module reads no clock, and the only random
choice (a direction, when two coordinates coincide) is drawn from the
`Random` the caller passes in. `VivaldiClient.update` never raises on
remote input; it returns whether the sample was used.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Iterable, Sequence

import msgspec

# Serf coordinate.go: below this, two coordinates are on top of each other
# and an RTT is treated as this value (a zero RTT from a coarse clock).
ZERO_THRESHOLD = 1.0e-6
# Serf client.go: an RTT outside [0, 10 s] is refused, not learned from.
MAX_RTT_S = 10.0

__all__ = [
    "MAX_RTT_S",
    "Coordinate",
    "CoordinateCache",
    "CoordinateSnapshot",
    "VivaldiClient",
    "VivaldiConfig",
    "apply_force",
    "magnitude",
    "origin",
    "unit_vector_at",
]


class VivaldiConfig(msgspec.Struct, frozen=True):
    """Tuning of the Vivaldi client; every default is Serf's `DefaultConfig`."""

    # Serf: 8 dimensions plus a height, per Ledlie et al. §3.1 (more
    # dimensions help up to a point).
    dimensionality: int = 8
    # Serf VivaldiErrorMax 1.5: a fresh node's error, and the ceiling.
    error_max: float = 1.5
    # Serf VivaldiCE 0.25: the largest step of the error per sample (Dabek).
    ce: float = 0.25
    # Serf VivaldiCC 0.25: the largest step of the coordinate per sample (Dabek).
    cc: float = 0.25
    # Serf AdjustmentWindowSize 20 samples (Lee et al.); 0 turns it off.
    adjustment_window: int = 20
    # Serf HeightMin 10 µs: a height is never below this.
    height_min_s: float = 10.0e-6
    # Serf LatencyFilterSize 3: the moving median per peer (Ledlie §4.2).
    latency_filter_size: int = 3
    # Serf GravityRho 150 (seconds): the pull towards the origin (Ledlie §4.3).
    gravity_rho_s: float = 150.0

    def __post_init__(self) -> None:
        if self.dimensionality < 1:
            raise ValueError("dimensionality must be > 0")
        if self.latency_filter_size < 1 or self.adjustment_window < 0:
            raise ValueError("latency_filter_size must be > 0 and adjustment_window >= 0")


class Coordinate(msgspec.Struct, frozen=True):
    """A network coordinate; every length is in seconds (error: none)."""

    vec: tuple[float, ...]
    error: float
    adjustment: float
    height: float

    def is_valid(self) -> bool:
        """No component is NaN or infinite."""
        return all(math.isfinite(x) for x in self.vec) and (
            math.isfinite(self.error)
            and math.isfinite(self.adjustment)
            and math.isfinite(self.height)
        )

    def is_compatible_with(self, other: Coordinate) -> bool:
        """Both have the same number of dimensions."""
        return len(self.vec) == len(other.vec)

    def raw_distance_to(self, other: Coordinate) -> float:
        """Euclidean distance plus both heights, without the adjustments."""
        assert self.is_compatible_with(other), "dimensionality conflict"
        return magnitude_of_diff(self.vec, other.vec) + self.height + other.height

    def distance_to(self, other: Coordinate) -> float:
        """The estimated round trip to `other`, in seconds.

        The adjustments are added unless that makes the sum negative (Serf's
        guard against negative adjustment factors).
        """
        dist = self.raw_distance_to(other)
        adjusted = dist + self.adjustment + other.adjustment
        return adjusted if adjusted > 0.0 else dist


def origin(config: VivaldiConfig) -> Coordinate:
    """A fresh coordinate: at the origin, least sure, lowest height."""
    return Coordinate((0.0,) * config.dimensionality, config.error_max, 0.0, config.height_min_s)


def magnitude(vec: Iterable[float]) -> float:
    """The Euclidean length of `vec`."""
    return math.sqrt(sum(x * x for x in vec))


def magnitude_of_diff(vec1: Sequence[float], vec2: Sequence[float]) -> float:
    """`magnitude(vec1 - vec2)` without building the difference."""
    return math.sqrt(sum((a - b) * (a - b) for a, b in zip(vec1, vec2, strict=True)))


def unit_vector_at(
    vec1: Sequence[float], vec2: Sequence[float], rng: random.Random
) -> tuple[tuple[float, ...], float]:
    """A unit vector pointing at `vec1` from `vec2`, and their distance.

    When the two coincide the direction is random (drawn from `rng`) and the
    distance is 0, so that two nodes at the origin can push apart.
    """
    diff = [a - b for a, b in zip(vec1, vec2, strict=True)]
    mag = magnitude(diff)
    if mag > ZERO_THRESHOLD:
        return tuple(x / mag for x in diff), mag
    diff = [rng.random() - 0.5 for _ in diff]
    mag = magnitude(diff)
    if mag > ZERO_THRESHOLD:
        return tuple(x / mag for x in diff), 0.0
    return (1.0,) + (0.0,) * (len(diff) - 1), 0.0  # exceedingly rare


def apply_force(
    config: VivaldiConfig,
    coord: Coordinate,
    force: float,
    other: Coordinate,
    rng: random.Random,
) -> Coordinate:
    """`coord` moved by `force` seconds away from `other` (towards it when
    negative); the height moves in proportion and stays above its minimum."""
    assert coord.is_compatible_with(other), "dimensionality conflict"
    unit, mag = unit_vector_at(coord.vec, other.vec, rng)
    vec = tuple(x + u * force for x, u in zip(coord.vec, unit, strict=True))
    height = coord.height
    if mag > ZERO_THRESHOLD:
        height = max((height + other.height) * force / mag + height, config.height_min_s)
    return Coordinate(vec, coord.error, coord.adjustment, height)


class VivaldiClient:
    """One node's coordinate, and what it keeps to update it (Serf's `Client`)."""

    __slots__ = ("config", "_coord", "_origin", "_rng", "_adjust", "_adjust_index",
                 "_filters", "resets")  # fmt: skip

    def __init__(self, config: VivaldiConfig, rng: random.Random) -> None:
        """Start at the origin.

        Args:
            config: tuning (Serf's defaults unless told otherwise).
            rng: the only source of randomness (a direction, when two
                coordinates coincide).
        """
        self.config = config
        self._coord = origin(config)
        self._origin = self._coord
        self._rng = rng
        self._adjust = [0.0] * config.adjustment_window
        self._adjust_index = 0
        self._filters: dict[str, list[float]] = {}
        self.resets = 0  # updates that left an invalid coordinate, reset to the origin

    @property
    def coordinate(self) -> Coordinate:
        """This node's coordinate now (immutable, so no copy is needed)."""
        return self._coord

    def set_coordinate(self, coord: Coordinate) -> bool:
        """Force the coordinate to `coord`; refused (False) if it is invalid or
        of another dimensionality."""
        if not self._acceptable(coord):
            return False
        self._coord = coord
        return True

    def forget(self, node: str) -> None:
        """Drop the RTT samples kept for `node` (it left or was reaped)."""
        self._filters.pop(node, None)

    def filtered_nodes(self) -> list[str]:
        """The nodes whose RTT samples are kept, in the order first seen."""
        return list(self._filters)

    def distance_to(self, other: Coordinate) -> float:
        """The estimated round trip from this node to `other`, in seconds."""
        return self._coord.distance_to(other)

    def update(self, node: str, other: Coordinate, rtt_s: float) -> bool:
        """Learn from one round trip of `rtt_s` seconds to `node`, whose
        coordinate is `other`.

        Returns:
            Whether the sample was used: False for an invalid or incompatible
            coordinate, or an RTT outside [0, MAX_RTT_S] (Serf refuses those
            too); the coordinate is then unchanged.
        """
        if not self._acceptable(other) or not 0.0 <= rtt_s <= MAX_RTT_S:
            return False
        rtt_s = self.latency_filter(node, rtt_s)
        self._update_vivaldi(other, rtt_s)
        self._update_adjustment(other, rtt_s)
        self._update_gravity()
        if not self._coord.is_valid():
            self.resets += 1
            self._coord = self._origin
        return True

    def latency_filter(self, node: str, rtt_s: float) -> float:
        """Add a sample for `node`; the median of its last few samples."""
        samples = self._filters.get(node)
        if samples is None:
            samples = self._filters[node] = []
        samples.append(rtt_s)
        if len(samples) > self.config.latency_filter_size:
            del samples[0]
        return sorted(samples)[len(samples) // 2]

    def _acceptable(self, coord: Coordinate) -> bool:
        return self._coord.is_compatible_with(coord) and coord.is_valid()

    def _update_vivaldi(self, other: Coordinate, rtt_s: float) -> None:
        config, coord = self.config, self._coord
        dist = coord.distance_to(other)
        rtt_s = max(rtt_s, ZERO_THRESHOLD)
        wrongness = abs(dist - rtt_s) / rtt_s
        total_error = max(coord.error + other.error, ZERO_THRESHOLD)
        weight = coord.error / total_error
        error = config.ce * weight * wrongness + coord.error * (1.0 - config.ce * weight)
        coord = Coordinate(coord.vec, min(error, config.error_max), coord.adjustment, coord.height)
        force = config.cc * weight * (rtt_s - dist)
        self._coord = apply_force(config, coord, force, other, self._rng)

    def _update_adjustment(self, other: Coordinate, rtt_s: float) -> None:
        window = self.config.adjustment_window
        if window == 0:
            return
        # The adjustments themselves stay out of this sample: raw distance.
        coord = self._coord
        self._adjust[self._adjust_index] = rtt_s - coord.raw_distance_to(other)
        self._adjust_index = (self._adjust_index + 1) % window
        adjustment = sum(self._adjust) / (2.0 * window)
        self._coord = Coordinate(coord.vec, coord.error, adjustment, coord.height)

    def _update_gravity(self) -> None:
        config, coord = self.config, self._coord
        dist = self._origin.distance_to(coord)
        force = -1.0 * (dist / config.gravity_rho_s) ** 2
        self._coord = apply_force(config, coord, force, self._origin, self._rng)


class CoordinateCache:
    """This node's Vivaldi client, and the latest coordinate of each peer it
    measured a round trip to directly (Serf's `coordCache`)."""

    __slots__ = ("client", "_peers")

    def __init__(self, config: VivaldiConfig, rng: random.Random) -> None:
        """An empty cache around a fresh client (see `VivaldiClient`)."""
        self.client = VivaldiClient(config, rng)
        self._peers: dict[str, Coordinate] = {}

    def observe(self, node: str, coord: Coordinate, rtt_s: float) -> bool:
        """A direct round trip of `rtt_s` to `node`, which sent `coord`:
        update our coordinate and keep `node`'s. Returns whether it was used."""
        if not self.client.update(node, coord, rtt_s):
            return False
        self._peers[node] = coord
        return True

    def of(self, node: str) -> Coordinate | None:
        """The latest coordinate `node` sent us with a direct ack, if any."""
        return self._peers.get(node)

    def peers(self) -> dict[str, Coordinate]:
        """A copy of every peer's latest coordinate, by name."""
        return dict(self._peers)

    def __len__(self) -> int:
        return len(self._peers)

    def forget(self, node: str) -> None:
        """Drop everything kept about `node`."""
        self._peers.pop(node, None)
        self.client.forget(node)

    def forget_unless(self, keep: Callable[[str], bool]) -> None:
        """Drop every peer for which `keep(name)` is false (members reaped)."""
        for node in [n for n in self._peers if not keep(n)]:
            self.forget(node)


class CoordinateSnapshot(msgspec.Struct, frozen=True):
    """What one node knows of coordinates at one moment, for readers (the
    API): its own, and the latest of each peer it timed a direct probe to."""

    me: str
    coordinates: dict[str, Coordinate]  # by name, `me` included

    def direct(self, a: str, b: str) -> bool:
        """Whether `a` and `b` exchanged a direct probe, as far as this node
        can tell: one of them is this node, and it timed the other."""
        if a == b:
            return False
        other = b if a == self.me else a if b == self.me else None
        return other is not None and other in self.coordinates

    def rtt_s(self, a: str, b: str) -> tuple[float, float] | None:
        """The estimated round trip between `a` and `b` in seconds and its
        error term (the sum of both coordinates' errors, dimensionless), or
        None if a coordinate is missing or they are incompatible."""
        ca, cb = self.coordinates.get(a), self.coordinates.get(b)
        if ca is None or cb is None or not ca.is_compatible_with(cb):
            return None
        return ca.distance_to(cb), ca.error + cb.error

    def nearest(self, name: str) -> list[tuple[str, float]]:
        """Every other node with a coordinate, nearest to `name` first (for
        `members --near`); empty if `name` has none."""
        origin_ = self.coordinates.get(name)
        if origin_ is None:
            return []
        near = [(n, origin_.distance_to(c)) for n, c in self.coordinates.items()
                if n != name and origin_.is_compatible_with(c)]  # fmt: skip
        near.sort(key=lambda item: (item[1], item[0]))
        return near
