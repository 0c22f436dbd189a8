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
                    events += [
                        ("suspect", end + rng.uniform(0.5, 2), names[rng.randrange(nodes)]),
                        ("dead", end + rng.uniform(5, 9), names[rng.randrange(nodes)]),
                    ]
                else:
                    events.append(("left", end, None))
                for event, at, source in events:
                    if at >= horizon_s:
                        break
                    for _ in range(min(observers, target_events - written)):
                        obs = names[rng.randrange(nodes)]
                        ts = t0_ms + int((at + rng.expovariate(4.0)) * 1000)
                        line = head.format(
                            1,
                            ts,
                            '"bench"',
                            f'"{obs}"',
                            "null",
                            f'"{event}"',
                            f'"{node}"',
                            "null",
                            '"10.0.0.1:7946"',
                            inc,
                            f'"{source}"' if source else "null",
                            "null",
                            "null",
                        )
                        handles[written % files].write(line)
                        written += 1
                inc += 1
                t = end + rng.lognormvariate(5.5, 1.2)  # downtime: median ~4 min
    finally:
        for h in handles:
            h.close()
    return written


YEAR_S = 365 * DAY_S


def failure_trace(out: Path, nodes: int = 3600, years: float = 10.0, seed: int = 1,
                  final_repair: bool = True,
                  t0_s: int = 1_104_537_600) -> dict[str, float]:  # fmt: skip
    """Write an events-csv (`timestamp,node,event`, epoch seconds) shaped
    like the public failure archives: every node's record begins with a
    failure and ends with its repair, a quarter of the nodes fail exactly
    once, and the rest fail a few to a few hundred times (some in bursts).
    About 1 % of repairs take no time at all (the trace's resolution).

    `final_repair=False` leaves out each node's last repair (the trace ends
    before it), as some exports do.

    Returns the truth from the input's own intervals: failures, repairs,
    downtime and up time between a node's first and last row, availability,
    MTTR and MTBF (up time per failure).
    """
    rng = random.Random(seed)
    horizon_s = years * YEAR_S
    failures = repairs = 0
    up_s = down_s = 0.0
    lines = ["timestamp,node,event"]
    for i in range(nodes):
        node = f"n{i:04d}"
        once = rng.random() < 0.25
        # Mean time between failures per node: heavy-tailed across nodes.
        mtbf_s = 30 * DAY_S * rng.paretovariate(1.2)
        at = rng.uniform(0, horizon_s * 0.9)
        rows: list[tuple[int, str]] = []
        while True:
            # Downtimes: median ~2 h, long tail; 1 % are zero-length.
            repair = 0.0 if rng.random() < 0.01 else rng.lognormvariate(8.9, 1.6)
            repair = round(repair)
            if at + repair >= horizon_s:
                break
            rows += [(round(at), "down"), (round(at + repair), "up")]
            if once:
                break
            burst = rng.random() < 0.05  # a flapping spell: minutes to hours apart
            gap_s = rng.expovariate(1 / 3600) if burst else rng.expovariate(1 / mtbf_s)
            nxt = at + repair + gap_s
            if nxt >= horizon_s or (len(rows) >= 4 and rng.random() < 0.02):
                break
            at = nxt
        if not rows:
            at = rng.uniform(0, horizon_s - DAY_S)
            rows = [(round(at), "down"), (round(at) + 3600, "up")]
        if not final_repair:
            rows = rows[:-1]
        for k, (ts, event) in enumerate(rows):
            lines.append(f"{t0_s + ts},{node},{event}")
            if event == "down":
                failures += 1
                if k + 1 < len(rows):
                    repairs += 1
                    down_s += rows[k + 1][0] - ts
            elif k + 1 < len(rows):
                up_s += rows[k + 1][0] - ts
    out.write_text("\n".join(lines) + "\n")
    return {
        "nodes": nodes, "failures": failures, "repairs": repairs,
        "up_s": up_s, "down_s": down_s,
        "availability_ratio": up_s / (up_s + down_s) if up_s + down_s else float("nan"),
        "mttr_s": down_s / repairs if repairs else float("nan"),
        "mtbf_s": up_s / failures if failures else float("nan"),
    }  # fmt: skip
