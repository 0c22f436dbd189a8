#!/usr/bin/env python3
"""The churn job's throughput in Spark local mode, next to the same core
computation as a plain single-process pandas script, on the same input.

For each size (default 10^6 and 10^7 events): a synthetic history of
10,000 nodes (heavy-tailed sessions; 3 days per 10^6 events), then
  - spark: `churn.job.run` end to end (report, CSV and Parquet included),
    local[*] on this machine's cores, driver memory 4g;
  - pandas: read the JSON lines, changes, timelines, sessions, downtimes,
    per-node availability, percentiles (no report, no dissemination);
and events per second for each, and the ratio.

    .venv/bin/python bench/churn.py [--sizes 1000000 10000000] [--skip-pandas-above N]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

from shoal.churn.job import add_arguments, run  # noqa: E402
from shoal.churn.synth import generate  # noqa: E402


def pandas_churn(directory: Path) -> dict[str, float]:
    """The same core figures with pandas, the straightforward way."""
    import glob

    import pandas as pd

    cols = ["ts_ms", "event", "node", "incarnation", "observer"]
    # Read in chunks and keep five columns: 10^7 rows of all 13 fields
    # would need tens of GB in one frame.
    frames = [chunk[cols] for f in sorted(glob.glob(f"{directory}/*"))
              for chunk in pd.read_json(f, lines=True, chunksize=500_000)]  # fmt: skip
    rows = pd.concat(frames, ignore_index=True)
    chg = rows.groupby(["node", "event", "incarnation"], as_index=False)["ts_ms"].min()
    sus = chg[chg.event == "suspect"][["node", "incarnation", "ts_ms"]].rename(
        columns={"ts_ms": "suspect_ms"}
    )
    st = chg[chg.event.isin(["join", "dead", "left"])].merge(
        sus, how="left", on=["node", "incarnation"]
    )
    st["at_ms"] = st.ts_ms.where(
        ~((st.event == "dead") & st.suspect_ms.notna()), st[["ts_ms", "suspect_ms"]].min(axis=1)
    )
    st["status"] = (st.event == "join").map({True: "up", False: "down"})
    st = st.sort_values(["node", "at_ms", "incarnation", "status"])
    st["prev"] = st.groupby("node").status.shift()
    st = st[(st.prev.isna() & (st.status == "up")) | (st.prev != st.status)].copy()
    end = rows.ts_ms.max()
    st["next"] = st.groupby("node").at_ms.shift(-1)
    st["length_s"] = (st.next.fillna(end) - st.at_ms) / 1000
    done = st[st.next.notna()]
    up = done[done.status == "up"].length_s
    down = done[done.status == "down"].length_s
    per_node = st.groupby(["node", "status"]).length_s.sum().unstack(fill_value=0)
    availability = (per_node["up"] / (per_node["up"] + per_node.get("down", 0))).mean()
    return {
        "session_p50_s": up.quantile(0.5),
        "downtime_p50_s": down.quantile(0.5),
        "availability_mean_ratio": availability,
    }


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--sizes", type=int, nargs="+", default=[1_000_000, 10_000_000])
    p.add_argument("--skip-pandas-above", type=int, default=10**8)
    p.add_argument("--workdir", default=tempfile.gettempdir())
    a = p.parse_args()
    print(
        f"config: {os.cpu_count()} cores, Spark local[*], driver memory 4g, "
        f"10,000 nodes, 3 days of history per 10^6 events, 8 input files"
    )
    for n in a.sizes:
        data = Path(a.workdir) / f"shoal-churn-bench-{n}"
        if not data.exists():
            data.mkdir(parents=True)
            t = time.perf_counter()
            written = generate(data, 10_000, 3 * n / 1_000_000, n)
            print(f"generated {written:,} events in {time.perf_counter() - t:.0f} s ({data})")
        size_mb = sum(f.stat().st_size for f in data.iterdir()) / 1e6
        parser = argparse.ArgumentParser()
        add_arguments(parser)
        args = parser.parse_args(
            ["--history", str(data), "--out", str(data) + "-report", "--driver-memory", "4g"]
        )
        t = time.perf_counter()
        summary = run(args)
        spark_s = time.perf_counter() - t
        events = summary["events"]
        line = (
            f"{events:,} events ({size_mb:.0f} MB): spark {spark_s:.1f} s "
            f"= {events / spark_s:,.0f} events/s"
        )
        if n <= a.skip_pandas_above:
            t = time.perf_counter()
            figures = pandas_churn(data)
            pandas_s = time.perf_counter() - t
            line += (
                f"; pandas {pandas_s:.1f} s = {events / pandas_s:,.0f} events/s; "
                f"spark/pandas time ratio {spark_s / pandas_s:.2f}x"
            )
            line += (
                f" (session p50 spark {summary['session_p50_s']:.0f} s, "
                f"pandas {figures['session_p50_s']:.0f} s)"
            )
        print(line, flush=True)


if __name__ == "__main__":
    main()
