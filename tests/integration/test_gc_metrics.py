"""A real agent exports how long Python's garbage collections stopped it."""

from __future__ import annotations

import urllib.request

from tests.conftest import poll_until


def samples(agent) -> dict[str, float]:
    with urllib.request.urlopen(f"http://{agent.ip}:7947/metrics", timeout=5) as r:
        text = r.read().decode()
    pairs = (line.rsplit(" ", 1) for line in text.splitlines() if line[:1] not in ("#", ""))
    return {name: float(value) for name, value in pairs}


def test_the_collections_are_on_metrics_by_generation(agents):
    # A young generation of 100 objects: collections come within seconds of
    # gossip and API traffic (the agent's own threshold is far higher).
    agent = agents.add(env={"SHOAL_GC_THRESHOLD": "100,2,2"})
    agents.wait_all_see([agent.name], "alive", [agent])

    def collected() -> dict[str, float] | None:
        got = samples(agent)
        counts = [got.get(f'shoal_gc_pause_seconds_count{{generation="{g}"}}', 0) for g in (0, 1)]
        return got if min(counts) > 0 else None

    got = poll_until(collected, 30, interval_s=0.2)
    for g in range(3):
        label = f'generation="{g}"'
        count = got[f"shoal_gc_pause_seconds_count{{{label}}}"]
        assert got[f'shoal_gc_pause_seconds_bucket{{{label},le="+Inf"}}'] == count
        assert got[f'shoal_gc_pause_seconds_bucket{{{label},le="0.001"}}'] <= count
        longest = got[f"shoal_gc_pause_max_seconds{{{label}}}"]
        assert got[f"shoal_gc_pause_seconds_sum{{{label}}}"] >= longest
        assert (longest > 0) == (count > 0)
