"""SimNetwork: the faults of a LAN, decided from a seeded `Random`.

Latency per datagram is `min + Exponential(mean)` (TigerBeetle's packet
simulator), so reordering follows from jitter. Loss and duplication are
probabilities per datagram. Partitions are groups of hosts (traffic between
different groups is dropped); `cut` and `isolate` remove single links or a
host; all of them are symmetric unless `drop` is used one way. Streams are
reliable but fail when the link is cut, as TCP would after its timeout.
"""

from __future__ import annotations

import random
from dataclasses import dataclass


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

    def __init__(self, rng: random.Random, profile: LinkProfile) -> None:
        self.rng = rng
        self.profile = profile
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

    def latency_s(self) -> float:
        """One delivery delay."""
        p = self.profile
        return p.latency_min_s + self.rng.expovariate(1.0 / p.latency_mean_s)
