"""Cuts of any length and phase, healed: how long until all see all again.

A formed cluster is cut in two at a random instant (so every protocol timer
is at a random phase when it happens), the cut lasts `cut_s`, and then
heals. The figure is the time from the heal to the first instant every node
sees every other alive (`converged`). Also counted, from the heal on:

- deaths: a running node declared dead, by its observer's own verdict
  (suspicions raised in the cut that ran out after it; the same verdict
  passed on by gossip is not counted again);
- rejoins: each (observer, member) pair that sees the member join again;
  a pair that sees it more than once after the heal flapped
  (died and rejoined again), which is counted as a false rejoin.

`python -m shoal.sim.cuts [--nodes N] [--minority M,M...] [seeds]` prints
the figures over cut lengths of 1 to 60 s (issue 42: all see all within 3 s
of any heal of a cut that lasted at most 60 s); seeds as `1-10` too.
"""

from __future__ import annotations

import random
import sys
from dataclasses import dataclass
from typing import Any

from shoal.membership.events import MemberDied, MemberJoined
from shoal.membership.profiles import PROFILES
from shoal.sim.checks import converged
from shoal.sim.cluster import SimCluster
from shoal.sim.scenarios import form_cluster, run_until_converged

CUT_LENGTHS_S = (1.0, 3.0, 6.0, 10.0, 15.0, 20.0, 30.0, 45.0, 60.0)


@dataclass(slots=True)
class CutResult:
    """What one cut and heal measured."""

    seed: int
    nodes: int
    minority: int
    cut_s: float
    healed_s: float | None  # from the heal to all see all (None: not within the run)
    deaths: int  # verdicts that a running node is dead, after the heal
    flaps: int  # (observer, member) pairs that saw the member join more than once after the heal


class _AfterHeal:
    """Counts deaths and joins from the heal on."""

    def __init__(self, cluster: SimCluster) -> None:
        self.cluster = cluster
        self.healed = False
        self.deaths = 0
        self.joins: dict[tuple[int, str], int] = {}

    def on_event(self, now: float, node: int, event: Any) -> None:
        if not self.healed:
            return
        if isinstance(event, MemberDied) and event.source == self.cluster.idents[node].name:
            self.deaths += 1
        elif isinstance(event, MemberJoined):
            key = (node, event.member.name)
            self.joins[key] = self.joins.get(key, 0) + 1


def run_cut(seed: int, nodes: int = 6, minority: int = 2, cut_s: float = 30.0,
            settle_s: float = 40.0) -> CutResult:  # fmt: skip
    """Form `nodes`, cut off `minority` of them for `cut_s` at a random
    instant, heal, and run until all see all (or `settle_s` passes)."""
    cluster = SimCluster(nodes, seed, PROFILES["lan"])
    form_cluster(cluster)
    formed = run_until_converged(cluster, 30.0)
    assert formed is not None, "the cluster did not form"
    rng = random.Random(seed * 31 + int(cut_s * 1000))
    hosts = list(range(nodes))
    rng.shuffle(hosts)
    small, large = hosts[:minority], hosts[minority:]
    cut_at = cluster.now + rng.uniform(1.0, 31.0)  # any phase of the 30 s timers
    heal_at = cut_at + cut_s
    watch = _AfterHeal(cluster)
    cluster.observers.append(watch)
    cluster.at(cut_at, lambda: cluster.net.partition([small, large]))

    def heal() -> None:
        cluster.net.heal()
        watch.healed = True

    cluster.at(heal_at, heal)
    cluster.run_until(heal_at)
    healed = cluster.run_until(heal_at + settle_s, lambda: converged(cluster))
    healed_s = cluster.now - heal_at if healed else None
    # Run on a little: a flap after all see all is still one.
    cluster.run_until(cluster.now + 10.0)
    flaps = sum(1 for count in watch.joins.values() if count > 1)
    return CutResult(seed, nodes, minority, cut_s, healed_s, watch.deaths, flaps)


def _args(argv: list[str]) -> tuple[int, list[int], list[int]]:
    """`[--nodes N] [--minority M,M...] [seed ...]` (defaults 6, 2, seeds 1-20)."""
    nodes, minorities = 6, [2]
    seeds: list[int] = []
    it = iter(argv)
    for arg in it:
        if arg == "--nodes":
            nodes = int(next(it))
        elif arg == "--minority":
            minorities = [int(m) for m in next(it).split(",")]
        elif "-" in arg:
            first, last = arg.split("-")
            seeds += range(int(first), int(last) + 1)
        else:
            seeds.append(int(arg))
    return nodes, minorities, seeds or list(range(1, 21))


def main(argv: list[str]) -> None:
    """Print the heal time per minority and cut length over seeds, then
    over all runs: `[--nodes N] [--minority M,M...] [seed|first-last ...]`."""
    nodes, minorities, seeds = _args(argv)
    print(f"{nodes} nodes, seeds {seeds[0]}-{seeds[-1]} ({len(seeds)})")
    print("minority  cut_s  healed_s: median  worst  over_3_s  never  deaths  flaps")
    every: list[float] = []
    for minority in minorities:
        for cut_s in CUT_LENGTHS_S:
            results = [run_cut(seed, nodes, minority, cut_s) for seed in seeds]
            times = sorted(r.healed_s for r in results if r.healed_s is not None)
            every += times
            never = sum(1 for r in results if r.healed_s is None)
            median = times[len(times) // 2] if times else float("nan")
            worst = times[-1] if times else float("nan")
            over = sum(1 for t in times if t > 3.0)
            print(f"{minority:8d}  {cut_s:5.0f}  {median:15.2f}  {worst:5.2f}  {over:8d}  "
                  f"{never:5d}  {sum(r.deaths for r in results):6d}  "
                  f"{sum(r.flaps for r in results):5d}")  # fmt: skip
    every.sort()
    if every:
        print(
            f"all {len(every)} healed: median {every[len(every) // 2]:.2f} s, "
            f"p95 {every[int(len(every) * 0.95)]:.2f} s, worst {every[-1]:.2f} s"
        )


if __name__ == "__main__":
    main(sys.argv[1:])
