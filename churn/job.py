"""The churn job: history logs of many nodes in, a report out.

    shoal churn --history '/var/lib/shoal-logs/*/history*' --out report/
    spark-submit --master spark://HOST:7077 churn/job.py --history PATH --out DIR

PATH is anything Spark reads (a local glob, a directory, hdfs://, s3a://;
several separated by commas); gzip-compressed rotated files are read as they
are. DIR is a local directory: `report.html`, `summary.json`, and the tables
under `csv/` and `parquet/`. See docs/churn.md.

Only DataFrame operations run on the executors (no Python UDFs), so a Spark
cluster needs no Python packages of ours; the driver needs shoal installed.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

# spark-submit runs this file as a script: the driver's Python must have
# shoal installed (it finds `shoal.churn` there, not beside this file).
from shoal.churn import progress

LOG4J = Path(__file__).with_name("log4j2.properties")


@dataclass
class Results:
    """Everything the report shows, collected to the driver (small)."""

    summary: dict[str, Any]
    nodes: list[dict[str, Any]]
    size: list[dict[str, Any]]
    session_hist: list[tuple[float, int]]
    downtime_hist: list[tuple[float, int]]
    delay_hist: list[tuple[float, int]]
    tenures: list[dict[str, Any]]
    false_by_node: list[dict[str, Any]] = field(default_factory=list)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="shoal churn", description=__doc__.split("\n\n")[0])
    add_arguments(p)
    return p.parse_args(argv)


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The job's flags (shared by `shoal churn` and spark-submit)."""
    p.add_argument("--history", required=True,
                   help="history files: glob, directory or URI; comma-separated for several")
    p.add_argument("--out", required=True, help="local directory for the report")
    p.add_argument("--format", default="history", choices=("history", "events-csv"),
                   help="history: shoal's JSON Lines; events-csv: timestamp,node,event")
    p.add_argument("--since", help="start of the window (ISO-8601, or an age: 30m, 12h, 7d)")
    p.add_argument("--until", help="end of the window (ISO-8601, or an age)")
    p.add_argument("--top", type=int, default=20, help="flapping nodes to list (default 20)")
    p.add_argument("--master", help="Spark master (default local[*]; spark-submit sets its own)")
    p.add_argument("--driver-memory", default="2g", help="local mode driver memory")
    p.add_argument("--verbose", action="store_true", help="keep Spark's own log")


def parse_time(text: str | None, now_ms: int | None = None) -> int | None:
    """ISO-8601 (UTC when no zone) or an age before now (`90s`, `30m`,
    `12h`, `7d`), as epoch milliseconds. ValueError when neither."""
    if text is None:
        return None
    now_ms = now_ms if now_ms is not None else int(time.time() * 1000)
    units = {"s": 1_000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
    t = text.strip()
    if t[-1:] in units:
        try:
            return now_ms - int(float(t[:-1]) * units[t[-1]])
        except ValueError:
            pass
    try:
        dt = datetime.fromisoformat(t)
    except ValueError:
        raise ValueError(f"not a time: {text!r} (ISO-8601, or an age like 30m)") from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return int(dt.timestamp() * 1000)


def spark_session(args: argparse.Namespace) -> Any:
    """A session: local[*] unless a master is given or spark-submit chose one;
    Spark's log kept quiet unless --verbose."""
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName("shoal-churn")
    if args.master:
        builder = builder.master(args.master)
    elif "PYSPARK_GATEWAY_PORT" not in os.environ:  # not launched by spark-submit
        builder = builder.master("local[*]")
    java_opts = "" if args.verbose else f"-Dlog4j2.configurationFile=file:{LOG4J}"
    conf = {
        "spark.driver.memory": args.driver_memory,
        "spark.driver.host": "127.0.0.1",
        "spark.driver.bindAddress": "127.0.0.1",
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.shuffle.partitions": "8",
        "spark.sql.adaptive.enabled": "true",
        "spark.driver.extraJavaOptions": java_opts,
    }
    for key, value in conf.items():
        builder = builder.config(key, value)
    return builder.getOrCreate()


def _paths(history: str) -> tuple[list[str], bool]:
    """The paths, and whether they are all local directories (read then
    recursively, every file whose name contains "history")."""
    parts = [p.strip() for p in history.split(",") if p.strip()]
    dirs = all("://" not in p and Path(p).is_dir() for p in parts)
    return parts, dirs


def load(spark: Any, args: argparse.Namespace) -> tuple[Any, str | None]:
    """Rows under the history schema (bad ones marked) and, for CSV, the
    timestamp format detected."""
    from shoal.churn.schema import CORRUPT, history_schema

    paths, dirs = _paths(args.history)
    if not paths:
        raise ValueError("--history: no path given")
    if args.format == "events-csv":
        from shoal.churn.importers import read_events_csv

        return read_events_csv(spark, paths, recursive=dirs)
    reader = spark.read.schema(history_schema()).option("mode", "PERMISSIVE")
    reader = reader.option("columnNameOfCorruptRecord", CORRUPT)
    if dirs:
        reader = reader.option("recursiveFileLookup", "true").option("pathGlobFilter", "*history*")
    try:
        return reader.json(paths), None
    except Exception as exc:  # AnalysisException: a path that does not exist
        if "PATH_NOT_FOUND" in str(exc) or "does not exist" in str(exc):
            raise ValueError(f"--history: no such file or directory: {args.history}") from None
        raise


def compute(spark: Any, raw: Any, args: argparse.Namespace, fmt: str | None,
            steps: progress.Steps) -> tuple[Results, dict[str, Any]]:  # fmt: skip
    """Run every step; return the collected results and the big tables (as
    DataFrames, for writing)."""
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    from shoal.churn import transforms as T

    steps.next("reading and checking rows")
    marked = raw.withColumn("_ok", T.is_valid())
    marked = T.in_window(marked, parse_time(args.since), parse_time(args.until))
    # Only the columns the steps use are kept (addresses, ids and tags are
    # most of a row's bytes), and rows are spread by subject node once, here:
    # every later grouping and window is by node (or by node and more), so
    # none shuffles again; only the dissemination step re-sorts by observer.
    marked = (
        marked.select(*T.USED_COLUMNS, "_ok")
        .repartition("node")
        .persist(StorageLevel.MEMORY_AND_DISK)
    )
    counts = marked.agg(
        F.sum(F.when(F.col("_ok"), 1).otherwise(0)).alias("good"),
        F.sum(F.when(F.col("_ok"), 0).otherwise(1)).alias("bad"),
        F.min(F.when(F.col("_ok"), F.col("ts_ms"))).alias("start"),
        F.max(F.when(F.col("_ok"), F.col("ts_ms"))).alias("end"),
        F.countDistinct(F.when(F.col("_ok"), F.col("observer"))).alias("observers"),
    ).first()
    assert counts is not None  # an aggregate always has one row
    bad_in_window = int(counts["bad"] or 0)
    if not counts["good"]:
        raise ValueError(f"no usable history rows in {args.history} "
                         f"({bad_in_window} bad lines)")  # fmt: skip
    rows = marked.where(F.col("_ok")).drop("_ok")
    start_ms = parse_time(args.since) or int(counts["start"])
    end_ms = parse_time(args.until) or int(counts["end"])

    steps.next("reconciling observations into one timeline per node")
    obs = T.observations(rows).persist(StorageLevel.MEMORY_AND_DISK)
    chg = T.changes(obs).persist(StorageLevel.MEMORY_AND_DISK)
    trans = T.transitions(chg).persist(StorageLevel.MEMORY_AND_DISK)
    iv = T.intervals(trans, end_ms).persist(StorageLevel.MEMORY_AND_DISK)

    steps.next("sessions, downtimes, MTBF and MTTR")
    sessions = iv.where(F.col("status") == "up")
    downtimes = iv.where((F.col("status") == "down") & F.col("prev").isNotNull())
    done = F.col("complete")
    pct = [0.5, 0.9, 0.99]
    s_pct = sessions.where(done).agg(F.percentile_approx("length_s", pct, 100000).alias("p"),
                                     F.count(F.lit(1)).alias("n"),
                                     F.avg("length_s").alias("mean")).first()  # fmt: skip
    d_pct = downtimes.where(done).agg(F.percentile_approx("length_s", pct, 100000).alias("p"),
                                      F.count(F.lit(1)).alias("n"),
                                      F.avg("length_s").alias("mean")).first()  # fmt: skip
    nodes = T.node_stats(iv, chg, end_ms).persist(StorageLevel.MEMORY_AND_DISK)
    totals = nodes.agg(*[F.sum(c).alias(c) for c in
                         ("up_s", "down_s", "failures", "repairs", "repair_s", "suspicions",
                          "false_suspicions", "leaves")],
                       F.avg("availability").alias("availability_mean"),
                       F.count(F.lit(1)).alias("nodes")).first()  # fmt: skip
    assert totals is not None  # an aggregate always has one row

    steps.next("dissemination delay")
    spread = T.dissemination(obs, iv).persist(StorageLevel.MEMORY_AND_DISK)
    sp = spread.agg(F.percentile_approx("delay_s", pct, 100000).alias("p"),
                    F.count(F.lit(1)).alias("n")).first()  # fmt: skip

    steps.next("cluster size, churn per hour, flapping")
    bucket_ms = choose_bucket_ms(end_ms - start_ms)
    size = [r.asDict() for r in T.size_over_time(trans, start_ms, bucket_ms)
            .orderBy("bucket_ms").collect()]  # fmt: skip
    node_rows = [r.asDict() for r in nodes.orderBy(F.desc("changes_per_h"), "node").collect()]

    steps.next("controller tenures")
    tenures_df = T.controller_tenures(rows, end_ms)
    tenures = [r.asDict() for r in tenures_df.orderBy("start_ms").collect()]

    steps.next("histograms")

    def hist(df: Any, column: str) -> list[tuple[float, int]]:
        return sorted((float(r["lo_s"]), int(r["count"]))
                      for r in T.log_histogram(df, column).collect())  # fmt: skip

    false_rows = [r.asDict() for r in T.false_suspicions(chg).groupBy("node").count()
                  .orderBy(F.desc("count"), "node").limit(args.top).collect()]  # fmt: skip
    tsum = totals.asDict()
    summary = build_summary(tsum, s_pct, d_pct, sp, counts, bad_in_window, start_ms, end_ms,
                            tenures, fmt)  # fmt: skip
    summary["bucket_s"] = bucket_ms / 1000
    results = Results(summary, node_rows, size, hist(sessions.where(done), "length_s"),
                      hist(downtimes.where(done), "length_s"), hist(spread, "delay_s"),
                      tenures, false_rows)  # fmt: skip
    tables = {
        "sessions": sessions.drop("prev"),
        "downtimes": downtimes.drop("prev"),
        "nodes": nodes,
        "false_suspicions": T.false_suspicions(chg),
        "dissemination": spread,
        "cluster_size": T.size_over_time(trans, start_ms, bucket_ms).orderBy("bucket_ms"),
        "controller_tenures": tenures_df,
    }
    return results, tables


def _round(x: Any) -> float | None:
    return None if x is None else round(float(x), 3)


def _pcts(row: Any) -> list[float | None]:
    p = row["p"] if row is not None and row["n"] else None
    return [round(float(x), 3) for x in p] if p else [None, None, None]


def build_summary(t: dict[str, Any], s_pct: Any, d_pct: Any, sp: Any, counts: Any, bad: int,
                  start_ms: int, end_ms: int, tenures: list[dict[str, Any]],
                  fmt: str | None) -> dict[str, Any]:  # fmt: skip
    """The headline figures; every key ends in its unit where it has one."""
    s50, s90, s99 = _pcts(s_pct)
    d50, d90, d99 = _pcts(d_pct)
    x50, x90, x99 = _pcts(sp)
    up, down = float(t["up_s"] or 0), float(t["down_s"] or 0)
    failures, repairs = int(t["failures"] or 0), int(t["repairs"] or 0)
    gaps = [x["gap_after_s"] for x in tenures if x["gap_after_s"]]

    def iso(ms: int) -> str:
        return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="seconds")

    out: dict[str, Any] = {
        "nodes": int(t["nodes"]),
        "events": int(counts["good"]),
        "bad_lines": bad,
        "observers": int(counts["observers"]),
        "window_start": iso(start_ms),
        "window_end": iso(end_ms),
        "window_s": round((end_ms - start_ms) / 1000, 3),
        "sessions_completed": int(s_pct["n"]),
        "session_mean_s": _round(s_pct["mean"]),
        "session_p50_s": s50, "session_p90_s": s90, "session_p99_s": s99,
        "downtimes_completed": int(d_pct["n"]),
        "downtime_mean_s": _round(d_pct["mean"]),
        "downtime_p50_s": d50, "downtime_p90_s": d90, "downtime_p99_s": d99,
        "up_total_s": round(up, 3),
        "down_total_s": round(down, 3),
        "failures": failures,
        "leaves": int(t["leaves"] or 0),
        "mtbf_s": round(up / failures, 3) if failures else None,
        "mttr_s": round(float(t["repair_s"]) / repairs, 3) if repairs else None,
        "availability_ratio": round(up / (up + down), 6) if up + down else None,
        "availability_mean_ratio": round(float(t["availability_mean"]), 6),
        "suspicions": int(t["suspicions"] or 0),
        "false_suspicions": int(t["false_suspicions"] or 0),
        "changes_measured_for_spread": int(sp["n"]),
        "dissemination_p50_s": x50, "dissemination_p90_s": x90, "dissemination_p99_s": x99,
        "controller_tenures": len(tenures),
        "controller_gaps": len(gaps),
        "controller_gap_total_s": round(sum(gaps), 3),
    }  # fmt: skip
    if fmt is not None:
        out["timestamp_format"] = fmt
    return out


def choose_bucket_ms(span_ms: int) -> int:
    """A round bucket giving at most ~400 points over the window."""
    for b in (1_000, 5_000, 10_000, 30_000, 60_000, 300_000, 600_000, 1_800_000, 3_600_000,
              21_600_000, 86_400_000):  # fmt: skip
        if span_ms / b <= 400:
            return b
    return 86_400_000


def write_tables(tables: dict[str, Any], out: Path, steps: progress.Steps) -> None:
    """Each table as Parquet (Spark's directory layout) and as one CSV file.

    The CSV is written by Spark's executors (no row passes through Python),
    then its parts are joined, in order, under one header.
    """
    import shutil

    (out / "csv").mkdir(parents=True, exist_ok=True)
    for name, df in tables.items():
        steps.next(f"writing table {name}")
        parquet = out / "parquet" / name
        df.write.mode("overwrite").parquet(str(parquet))
        parts = out / "csv" / f".{name}.parts"
        df.write.mode("overwrite").csv(str(parts))
        with open(out / "csv" / f"{name}.csv", "wb") as f:
            f.write((",".join(df.columns) + "\n").encode())
            for part in sorted(parts.glob("part-*")):
                with open(part, "rb") as src:
                    shutil.copyfileobj(src, f)
        shutil.rmtree(parts)


def run(args: argparse.Namespace) -> dict[str, Any]:
    """The whole job; returns the summary."""
    import warnings

    from shoal.churn.report import render

    # PySpark warns about the pandas version at import when pandas is
    # installed; the job does not use pandas, and the terminal stays quiet.
    warnings.filterwarnings("ignore", category=FutureWarning, module="pyspark")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    steps = progress.Steps(total=9 + 7)
    steps.next("starting Spark")
    spark = spark_session(args)
    if not args.verbose:
        spark.sparkContext.setLogLevel("ERROR")
    raw, fmt = load(spark, args)
    results, tables = compute(spark, raw, args, fmt, steps)
    write_tables(tables, out, steps)
    steps.next("writing the report")
    (out / "summary.json").write_text(json.dumps(results.summary, indent=2) + "\n")
    render(results, out / "report.html", args)
    steps.done(f"report in {out / 'report.html'}")
    return results.summary


def main(argv: list[str] | None = None) -> int:
    """spark-submit entry point."""
    args = parse_args(argv)
    try:
        summary = run(args)
    except ValueError as exc:
        print(f"shoal churn: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
