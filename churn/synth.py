"""Large synthetic histories for benchmarks: many nodes, heavy-tailed
sessions (Pareto), log-normal downtimes, every change seen by a few
observers a little later. Not the protocol (that is `shoal simulate
--history-out`); just rows of the right shape, fast, from a seed."""

from __future__ import annotations

import random
from pathlib import Path

from shoal.storage.history import FIELD_NAMES

DAY_S = 86_400


def generate(out: Path, nodes: int, days: float, target_events: int, seed: int = 1,
             files: int = 8, t0_ms: int = 1_767_225_600_000) -> int:  # fmt: skip
    """Write at most `target_events` rows into `files` JSON Lines files.

    Observers per change are chosen so the total lands near the target
    (nodes late in the list may be cut short). Returns the rows written.
    """
    rng = random.Random(seed)
    horizon_s = days * DAY_S
    # Mean session (Pareto, alpha 1.5, scale xm): xm * 3; tune xm so that the
    # number of changes times the observers per change gives the target.
    xm = 3600.0
    # Mean session 3 xm; mean downtime exp(5.5 + 1.2²/2) ≈ 500 s; 2.4 changes
    # per session (a join; a suspicion and a death, or a leave).
    changes_per_node = 2.4 * horizon_s / (3 * xm + 500)
    observers = max(1, round(target_events / max(1.0, nodes * changes_per_node)))
    names = [f"node-{i:05d}" for i in range(nodes)]
    handles = [open(out / f"part-{k:03d}.history.jsonl", "w") for k in range(files)]  # noqa: SIM115
    head = "{{" + ",".join(f'"{n}":{{}}' for n in FIELD_NAMES) + "}}\n"
    written = 0
    try:
        for node in names:
            t, inc = rng.uniform(0, 600), 1
            while t < horizon_s and written < target_events:
                session = xm * rng.paretovariate(1.5)
                events: list[tuple[str, float, str | None]] = [("join", t, None)]
                end = t + session
                crash = rng.random() < 0.7
                if crash:
                    events += [("suspect", end + rng.uniform(0.5, 2), names[rng.randrange(nodes)]),
                               ("dead", end + rng.uniform(5, 9), names[rng.randrange(nodes)])]
                else:
                    events.append(("left", end, None))
                for event, at, source in events:
                    if at >= horizon_s:
                        break
                    for _ in range(min(observers, target_events - written)):
                        obs = names[rng.randrange(nodes)]
                        ts = t0_ms + int((at + rng.expovariate(4.0)) * 1000)
                        line = head.format(
                            1, ts, '"bench"', f'"{obs}"', "null", f'"{event}"', f'"{node}"',
                            "null", '"10.0.0.1:7946"', inc,
                            f'"{source}"' if source else "null", "null", "null")
                        handles[written % files].write(line)
                        written += 1
                inc += 1
                t = end + rng.lognormvariate(5.5, 1.2)  # downtime: median ~4 min
    finally:
        for h in handles:
            h.close()
    return written
