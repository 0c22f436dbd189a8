"""The heal scenario: a 4 | 2 partition with writes on both sides, then healed.

It measures what issue 28 asks of the replicated store across a partition:

- **keys after membership**: the time from "membership healed" (the first
  instant every running node sees every other as alive) to "every key on
  every node" (every node holds every key written; each is written once).
  Negative when the keys were everywhere before the views were.
- **minority replication**: for each write on one node of the minority
  side during the cut, the time until the other minority node holds it.

`python -m shoal.sim.heal [seed ...]` prints both per seed.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field

from shoal.membership.profiles import PROFILES
from shoal.sim.checks import converged
from shoal.sim.cluster import SimCluster
from shoal.sim.scenarios import form_cluster, run_until_converged

NODES = 6
MAJORITY = [0, 1, 2, 3]
MINORITY = [4, 5]
CUT_S = 30.0
WRITE_EVERY_S = 1.5


@dataclass(slots=True)
class HealResult:
    """What one run of the heal scenario measured (seconds)."""

    seed: int
    membership_healed_s: float | None  # after the heal
    keys_everywhere_s: float | None  # after the heal
    minority_delays_s: list[float | None] = field(default_factory=list)

    @property
    def keys_after_membership_s(self) -> float | None:
        """Keys everywhere minus membership healed (the lag issue 28 names)."""
        if self.membership_healed_s is None or self.keys_everywhere_s is None:
            return None
        return self.keys_everywhere_s - self.membership_healed_s

    @property
    def worst_minority_delay_s(self) -> float | None:
        """The slowest minority write (None if one never arrived in the cut)."""
        if not self.minority_delays_s or None in self.minority_delays_s:
            return None
        return max(d for d in self.minority_delays_s if d is not None)


class _Watch:
    """Polled after every simulator event: records when things first hold."""

    def __init__(self, cluster: SimCluster) -> None:
        self.cluster = cluster
        self.keys: list[bytes] = []  # each written once, on one node
        # (key, the node that should receive it, written at)
        self.minority: list[tuple[bytes, int, float]] = []
        self.arrived: dict[bytes, float] = {}
        self.healed_at: float | None = None
        self.membership_at: float | None = None
        self.keys_at: float | None = None

    def step(self) -> bool:
        now = self.cluster.now
        stores = self.cluster.stores
        for key, dst, _ in self.minority:
            if key not in self.arrived and stores[dst].get(key) is not None:
                self.arrived[key] = now
        if self.healed_at is not None:
            if self.membership_at is None and converged(self.cluster):
                self.membership_at = now
            if self.keys_at is None and self._keys_everywhere():
                self.keys_at = now
        return self.membership_at is not None and self.keys_at is not None

    def _keys_everywhere(self) -> bool:
        return all(store.get(key) is not None for store in self.cluster.stores
                   for key in self.keys)  # fmt: skip


def run_heal(seed: int, cut_s: float = CUT_S, settle_s: float = 60.0) -> HealResult:
    """Form 6 nodes, cut them 4 | 2 for `cut_s` with writes on both sides,
    heal, and run until every key is everywhere (or `settle_s` passes)."""
    cluster = SimCluster(NODES, seed, PROFILES["lan"])
    form_cluster(cluster)
    formed = run_until_converged(cluster, 30.0)
    assert formed is not None, "the cluster did not form"
    watch = _Watch(cluster)
    cut_at = cluster.now + 2.0
    heal_at = cut_at + cut_s

    def schedule(node: int, at: float, n: int) -> None:
        key = b"heal/%d/%d" % (node, n)
        cluster.write(node, key, b"v%d" % n, at)
        watch.keys.append(key)
        if node in MINORITY:
            other = MINORITY[1] if node == MINORITY[0] else MINORITY[0]
            watch.minority.append((key, other, at))

    # Writes on every node, just after the cut (before anyone suspects
    # anyone) and then every WRITE_EVERY_S through the cut.
    n = 0
    offset = 0.3
    while offset < cut_s:
        for node in range(NODES):
            schedule(node, cut_at + offset + 0.01 * node, n)
            n += 1
        offset += WRITE_EVERY_S
    cluster.at(cut_at, lambda: cluster.net.partition([MAJORITY, MINORITY]))

    def heal() -> None:
        cluster.net.heal()
        watch.healed_at = cluster.now

    cluster.at(heal_at, heal)
    cluster.run_until(heal_at + settle_s, watch.step)
    delays = [
        (watch.arrived[key] - at) if key in watch.arrived and watch.arrived[key] < heal_at
        else None
        for key, _, at in watch.minority
    ]  # fmt: skip
    return HealResult(
        seed,
        None if watch.membership_at is None else watch.membership_at - heal_at,
        None if watch.keys_at is None else watch.keys_at - heal_at,
        delays,
    )


def _fmt(x: float | None) -> str:
    return "never" if x is None else f"{x:.2f}"


def main(argv: list[str]) -> None:
    """Print the figures for each seed in `argv` (default 1-8)."""
    seeds = [int(a) for a in argv] or list(range(1, 9))
    print("seed  membership_healed_s  keys_everywhere_s  keys_after_membership_s"
          "  minority_worst_s  minority_median_s")  # fmt: skip
    for seed in seeds:
        r = run_heal(seed)
        got = sorted(d for d in r.minority_delays_s if d is not None)
        median = got[len(got) // 2] if got else None
        worst = r.worst_minority_delay_s
        missing = sum(1 for d in r.minority_delays_s if d is None)
        note = f"  ({missing} of {len(r.minority_delays_s)} minority writes not there by the heal)"
        print(f"{seed:4d}  {_fmt(r.membership_healed_s):>19}  {_fmt(r.keys_everywhere_s):>17}"
              f"  {_fmt(r.keys_after_membership_s):>23}"
              f"  {_fmt(worst):>16}  {_fmt(median):>17}" + (note if missing else ""))  # fmt: skip


if __name__ == "__main__":
    main(sys.argv[1:])
