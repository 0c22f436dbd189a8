"""Same seed, same run: byte for byte."""

import hashlib

from shoal.membership.profiles import PROFILES
from shoal.sim.cluster import SimCluster
from shoal.sim.network import LinkProfile
from shoal.sim.scenarios import form_cluster, run_simulation


class TraceHash:
    def __init__(self) -> None:
        self.h = hashlib.sha256()
        self.count = 0

    def on_event(self, now, node, event):
        self.h.update(f"{now!r}|{node}|{event!r}\n".encode())
        self.count += 1


def trace(seed: int) -> tuple[str, int]:
    cluster = SimCluster(50, seed, PROFILES["lan"], LinkProfile(loss=0.05, duplicate=0.01))
    tracer = TraceHash()
    cluster.observers.append(tracer)
    form_cluster(cluster)
    cluster.crash(9, 15.0)
    cluster.restart(9, 40.0, join=[0])
    cluster.run_until(70.0)
    return tracer.h.hexdigest(), tracer.count


def test_same_seed_same_trace():
    """A failing seed can be replayed exactly."""
    first = trace(21)
    assert first[1] > 2000
    assert trace(21) == first


def test_another_seed_another_trace():
    """The seed really drives the run."""
    assert trace(21)[0] != trace(22)[0]


def test_progress_reports_change_nothing_in_the_run():
    """`shoal simulate` runs in slices to report progress; the result must be
    the one of an unsliced run."""
    seen: list[float] = []
    plain = run_simulation(60, 30.0, loss=0.02, crash=1, seed=3).to_json()
    sliced = run_simulation(60, 30.0, loss=0.02, crash=1, seed=3, progress=seen.append).to_json()
    for result in (plain, sliced):
        result.pop("wall_s", None)
    assert sliced == plain
    assert len(seen) >= 4 and all(b - a == 5.0 for a, b in zip(seen, seen[1:])) and seen[-1] < 30
