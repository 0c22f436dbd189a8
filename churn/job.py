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
    p.add_argument(
        "--history",
        required=True,
        help="history files: glob, directory or URI; comma-separated for several",
    )
    p.add_argument("--out", required=True, help="local directory for the report")
    p.add_argument(
        "--format",
        default="history",
        choices=FORMATS,
        help="history: shoal's JSON Lines; events-csv: timestamp,node,event; "
        "intervals: node,start,stop[,state] (docs/churn.md)",
    )
    p.add_argument(
        "--columns",
        help="with --format intervals: node=COL,start=COL,stop=COL"
        "[,state=COL] when the header names them otherwise",
    )
    p.add_argument("--since", help="start of the window (ISO-8601, or an age: 30m, 12h, 7d)")
    p.add_argument("--until", help="end of the window (ISO-8601, or an age)")
    p.add_argument("--top", type=int, default=20, help="nodes to list per table (default 20)")
    p.add_argument(
        "--flap-failures",
        dest="flap_failures",
        type=int,
        default=3,
        help="a node is flapping with this many failures ... (default 3)",
    )
    p.add_argument(
        "--flap-window",
        dest="flap_window",
        default="24h",
        help="... within this long (default 24h; s, m, h or d)",
    )
    p.add_argument("--master", help="Spark master (default local[*]; spark-submit sets its own)")
    p.add_argument("--driver-memory", default="2g", help="local mode driver memory")
    p.add_argument("--verbose", action="store_true", help="keep Spark's own log")


FORMATS = ("history", "events-csv", "intervals")
EXTRA_HINT = "pip install 'shoal[churn]'"
_UNITS_MS = {"s": 1_000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


class UsageError(ValueError):
    """Arguments or inputs the job cannot run with (exit 2, one line)."""


def parse_duration_ms(text: str) -> int:
    """`90s`, `30m`, `24h`, `2d` (a bare number is seconds) as milliseconds."""
    t = text.strip()
    unit = _UNITS_MS.get(t[-1:], 0)
    try:
        value = float(t[:-1]) * unit if unit else float(t) * 1000
    except ValueError:
        raise UsageError(f"not a duration: {text!r} (like 30m, 24h, 2d)") from None
    if value <= 0:
        raise UsageError(f"not a positive duration: {text!r}")
    return int(value)


def preflight(args: argparse.Namespace) -> None:
    """Everything that can be checked before Spark starts: the extra, the
    flags, and that local paths exist. Raises UsageError (one line)."""
    import glob
    from importlib.util import find_spec

    missing = [m for m in ("pyspark", "matplotlib") if find_spec(m) is None]
    if missing:
        raise UsageError(f"the churn report needs {' and '.join(missing)}: {EXTRA_HINT}")
    if args.top < 1:
        raise UsageError("--top: expected a positive number")
    if args.flap_failures < 1:
        raise UsageError("--flap-failures: expected a positive number")
    try:
        parse_duration_ms(args.flap_window)
        parse_time(args.since)
        parse_time(args.until)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    if args.columns and args.format != "intervals":
        raise UsageError("--columns: only with --format intervals")
    paths, _ = _paths(args.history)
    if not paths:
        raise UsageError("--history: no path given")
    for path in paths:
        if "://" in path:
            continue  # hdfs://, s3a://: Spark says
        if not (glob.glob(path) if glob.has_magic(path) else Path(path).exists()):
            raise UsageError(f"--history: no such file or directory: {path}")
    if Path(args.out).exists() and not Path(args.out).is_dir():
        raise UsageError(f"--out: {args.out} is a file, not a directory")


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


def load(spark: Any, args: argparse.Namespace) -> tuple[Any, str | None, Any]:
    """Rows under the history schema (bad ones marked), for a CSV the
    timestamp format detected, and for intervals the one-row count of
    intervals merged into an overlapping one."""
    from shoal.churn.schema import CORRUPT, history_schema

    paths, dirs = _paths(args.history)
    if args.format == "events-csv":
        from shoal.churn.importers import read_events_csv

        return (*read_events_csv(spark, paths, recursive=dirs), None)
    if args.format == "intervals":
        from shoal.churn.importers import read_intervals_csv

        return read_intervals_csv(spark, paths, recursive=dirs, mapping=args.columns)
    reader = spark.read.schema(history_schema()).option("mode", "PERMISSIVE")
    reader = reader.option("columnNameOfCorruptRecord", CORRUPT)
    if dirs:
        reader = reader.option("recursiveFileLookup", "true").option("pathGlobFilter", "*history*")
    try:
        return reader.json(paths), None, None
    except Exception as exc:  # AnalysisException: a path that does not exist
        if "PATH_NOT_FOUND" in str(exc) or "does not exist" in str(exc):
            raise UsageError(f"--history: no such file or directory: {args.history}") from None
        raise


def _stats(df: Any, column: str) -> Any:
    from pyspark.sql import functions as F

    return df.agg(
        F.percentile_approx(column, [0.5, 0.9, 0.99], 100000).alias("p"),
        F.count(F.lit(1)).alias("n"),
        F.avg(column).alias("mean"),
        F.sum(F.when(F.col(column) == 0, 1).otherwise(0)).alias("zero"),
    ).first()


def _read_rows(raw: Any, args: argparse.Namespace) -> tuple[Any, dict[str, Any]]:
    """The usable rows in the window (persisted, spread by node) and the
    counts of what was read and left out."""
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    from shoal.churn import transforms as T

    imported = args.format != "history"
    ok = T.is_valid(("end",) if imported else ())
    since, until = parse_time(args.since), parse_time(args.until)
    inside = F.lit(True)
    if since is not None:
        inside = inside & (F.col("ts_ms") >= since)
    if until is not None:
        inside = inside & (F.col("ts_ms") < until)
    marked = T.to_codes(raw).withColumn("_ok", ok)
    marked = marked.withColumn("_in", F.coalesce(inside, F.lit(False)))
    # Only the columns the steps use are kept (addresses, ids and tags are
    # most of a row's bytes), and rows are spread by subject node once, here:
    # every later grouping and window is by node (or by node and more), so
    # none shuffles again; only the dissemination step re-sorts by observer.
    marked = (
        marked.select(*T.USED_COLUMNS, "_ok", "_in")
        .repartition("node")
        .persist(StorageLevel.MEMORY_AND_DISK)
    )
    good = F.col("_ok") & F.col("_in")
    counts = marked.agg(
        F.sum(F.when(good, 1).otherwise(0)).alias("good"),
        F.sum(F.when(F.col("_ok"), 0).otherwise(1)).alias("bad"),
        F.sum(F.when(F.col("_ok") & ~F.col("_in"), 1).otherwise(0)).alias("outside"),
        F.min(F.when(good, F.col("ts_ms"))).alias("start"),
        F.max(F.when(good, F.col("ts_ms"))).alias("end"),
        F.countDistinct(F.when(good, F.col("observer"))).alias("observers"),
    ).first()
    assert counts is not None  # an aggregate always has one row
    return marked.where(good).drop("_ok", "_in"), counts.asDict()


def compute(spark: Any, loaded: tuple[Any, str | None, Any], args: argparse.Namespace,
            steps: progress.Steps) -> tuple[Results, dict[str, Any]]:  # fmt: skip
    """Run every step; return the collected results and the big tables (as
    DataFrames, for writing)."""
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    from shoal.churn import transforms as T

    raw, fmt, merged = loaded
    imported = args.format != "history"
    steps.next("reading and checking rows")
    rows, counts = _read_rows(raw, args)
    bad = int(counts["bad"] or 0)
    if bad:
        print(f"shoal churn: {bad:,} bad lines skipped (unreadable, or no time, node or known "
              "event)", file=sys.stderr, flush=True)  # fmt: skip
    if not counts["good"]:
        raise UsageError(f"no usable rows in {args.history} ({bad} bad lines, "
                         f"{counts['outside'] or 0} outside the window)")  # fmt: skip
    start_ms = parse_time(args.since) or int(counts["start"])
    end_ms = parse_time(args.until) or int(counts["end"])

    steps.next("reconciling observations into one timeline per node")
    keep = StorageLevel.MEMORY_AND_DISK
    obs = T.observations(rows).persist(keep)
    chg = T.changes(obs).persist(keep)
    status = T.status_changes(chg).persist(keep)
    trans = T.transitions(status).persist(keep)
    ends = rows.where(F.col("event") == "end").select("node", "ts_ms") if imported else None
    obs_end = T.observation_ends(status, ends, end_ms)
    iv = T.intervals(trans, obs_end, first_down_seen=imported).persist(keep)

    steps.next("sessions, downtimes, MTBF and MTTR, flapping")
    sessions = iv.where(F.col("status") == "up")
    downtimes = iv.where(F.col("status") == "down")
    done = F.col("complete") & F.col("start_seen")
    s_st, d_st = _stats(sessions.where(done), "length_s"), _stats(downtimes.where(done), "length_s")
    flap_ms = parse_duration_ms(args.flap_window)
    nodes = T.node_stats(iv, chg, args.flap_failures, flap_ms).persist(keep)
    totals = nodes.agg(*[F.sum(c).alias(c) for c in
                         ("up_s", "down_s", "failures", "repairs", "repair_s", "suspicions",
                          "false_suspicions", "leaves")],
                       F.avg("availability").alias("availability_mean"),
                       F.sum(F.when(F.col("availability").isNull(), 1).otherwise(0))
                       .alias("no_availability"),
                       F.sum(F.col("flapping").cast("int")).alias("flapping"),
                       F.count(F.lit(1)).alias("nodes")).first()  # fmt: skip
    assert totals is not None  # an aggregate always has one row
    censored = _censoring(iv, status, rows, trans, merged)

    spread = tenures_df = None
    delay_hist: list[tuple[float, int]] = []
    tenures: list[dict[str, Any]] = []
    false_rows: list[dict[str, Any]] = []
    sp = None
    if not imported:
        steps.next("dissemination delay")
        spread = T.dissemination(obs, iv.where("start_seen")).persist(keep)
        sp = _stats(spread, "delay_s")
        steps.next("controller tenures")
        tenures_df = T.controller_tenures(rows, end_ms)
        tenures = [r.asDict() for r in tenures_df.orderBy("start_ms").collect()]
        false_rows = [r.asDict() for r in T.false_suspicions(chg).groupBy("node").count()
                      .orderBy(F.desc("count"), "node").limit(args.top).collect()]  # fmt: skip

    steps.next("cluster size, histograms")
    bucket_ms = choose_bucket_ms(end_ms - start_ms)
    size_df = T.size_over_time(iv, start_ms, end_ms, bucket_ms).orderBy("bucket_ms")
    size = [r.asDict() for r in size_df.collect()]
    node_rows = [r.asDict() for r in nodes.orderBy(F.desc("failures"),
                 F.desc("max_failures_in_window"), "node").collect()]  # fmt: skip

    def hist(df: Any, column: str) -> list[tuple[float, int]]:
        return sorted((float(r["lo_s"]), int(r["count"]))
                      for r in T.log_histogram(df, column).collect())  # fmt: skip

    if spread is not None:
        delay_hist = hist(spread, "delay_s")
    summary = build_summary(totals.asDict(), s_st, d_st, sp, counts, start_ms, end_ms, tenures,
                            fmt, args)  # fmt: skip
    summary.update(censored)
    summary["bucket_s"] = bucket_ms / 1000
    results = Results(summary, node_rows, size, hist(sessions.where(done), "length_s"),
                      hist(downtimes.where(done), "length_s"), delay_hist,
                      tenures, false_rows)  # fmt: skip
    tables: dict[str, Any] = {
        "sessions": sessions,
        "downtimes": downtimes,
        "nodes": nodes,
        "cluster_size": size_df,
    }
    if spread is not None:
        tables.update(false_suspicions=T.false_suspicions(chg), dissemination=spread,
                      controller_tenures=tenures_df)  # fmt: skip
    return results, tables


def _censoring(iv: Any, status: Any, rows: Any, trans: Any, merged: Any) -> dict[str, Any]:
    """What was censored and what was left out, each with its count."""
    from pyspark.sql import functions as F

    up, seen = F.col("status") == "up", F.col("start_seen")
    open_end = ~F.col("complete") & seen

    def n(cond: Any) -> Any:
        return F.sum(F.when(cond, 1).otherwise(0))

    first = F.col("prev").isNull()
    c = iv.agg(n(up & open_end).alias("s_end"), n(~up & open_end).alias("d_end"),
               n(~seen).alias("d_start")).first()  # fmt: skip
    t = trans.groupBy("node").agg(
        F.count(F.lit(1)).alias("k"), F.max(F.when(first, F.col("status"))).alias("first")
    ).agg(n(F.col("k") == 1).alias("once"), n(F.col("first") == "down").alias("first_down")
          ).first()  # fmt: skip
    repeated = status.where(F.col("prev") == F.col("status")).count()
    subjects = rows.where(F.col("event").isin("join", "alive", "suspect", "dead", "left", "end"))
    no_timeline = (
        subjects.select("node")
        .distinct()
        .join(trans.select("node").distinct(), "node", "left_anti")
        .count()
    )
    excluded = {
        "repeated_status_events": int(repeated),
        "nodes_without_status_events": int(no_timeline),
    }
    if merged is not None:
        excluded["overlapping_intervals_merged"] = int(merged.first()["merged"])
    assert c is not None and t is not None
    return {
        "censored": {
            "sessions_end_unseen": int(c["s_end"] or 0),
            "downtimes_end_unseen": int(c["d_end"] or 0),
            "downtimes_start_unseen": int(c["d_start"] or 0),
            "nodes_first_event_down": int(t["first_down"] or 0),
            "nodes_seen_once": int(t["once"] or 0),
        },
        "excluded": excluded,
    }


def _round(x: Any) -> float | None:
    return None if x is None else round(float(x), 3)


def _pcts(row: Any) -> list[float | None]:
    p = row["p"] if row is not None and row["n"] else None
    return [round(float(x), 3) for x in p] if p else [None, None, None]


def build_summary(t: dict[str, Any], s_st: Any, d_st: Any, sp: Any, counts: dict[str, Any],
                  start_ms: int, end_ms: int, tenures: list[dict[str, Any]], fmt: str | None,
                  args: argparse.Namespace) -> dict[str, Any]:  # fmt: skip
    """The headline figures; every key ends in its unit where it has one."""
    s50, s90, s99 = _pcts(s_st)
    d50, d90, d99 = _pcts(d_st)
    up, down = float(t["up_s"] or 0), float(t["down_s"] or 0)
    failures, repairs = int(t["failures"] or 0), int(t["repairs"] or 0)

    def iso(ms: int) -> str:
        return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="seconds")

    out: dict[str, Any] = {
        "input_format": args.format,
        "nodes": int(t["nodes"]),
        "events": int(counts["good"]),
        "bad_lines": int(counts["bad"] or 0),
        "rows_outside_window": int(counts["outside"] or 0),
        "window_start": iso(start_ms),
        "window_end": iso(end_ms),
        "window_s": round((end_ms - start_ms) / 1000, 3),
        "sessions_completed": int(s_st["n"]),
        "session_mean_s": _round(s_st["mean"]),
        "session_p50_s": s50, "session_p90_s": s90, "session_p99_s": s99,
        "sessions_zero_length": int(s_st["zero"] or 0),
        "downtimes_completed": int(d_st["n"]),
        "downtime_mean_s": _round(d_st["mean"]),
        "downtime_p50_s": d50, "downtime_p90_s": d90, "downtime_p99_s": d99,
        "downtimes_zero_length": int(d_st["zero"] or 0),
        "up_total_s": round(up, 3),
        "down_total_s": round(down, 3),
        "observed_node_days": round((up + down) / 86400, 3),
        "failures": failures,
        "repairs": repairs,
        "leaves": int(t["leaves"] or 0),
        "mtbf_s": round(up / failures, 3) if failures else None,
        "mttr_s": round(float(t["repair_s"]) / repairs, 3) if repairs else None,
        "availability_ratio": round(up / (up + down), 6) if up + down else None,
        "availability_mean_ratio": _round6(t["availability_mean"]),
        "nodes_without_availability": int(t["no_availability"] or 0),
        "failures_per_node_day": round(failures / ((up + down) / 86400), 6) if up + down
        else None,
        "flapping_nodes": int(t["flapping"] or 0),
        "flapping_failures": args.flap_failures,
        "flapping_window_s": parse_duration_ms(args.flap_window) / 1000,
    }  # fmt: skip
    if sp is not None:
        x50, x90, x99 = _pcts(sp)
        gaps = [x["gap_after_s"] for x in tenures if x["gap_after_s"]]
        out.update({
            "observers": int(counts["observers"]),
            "suspicions": int(t["suspicions"] or 0),
            "false_suspicions": int(t["false_suspicions"] or 0),
            "changes_measured_for_spread": int(sp["n"]),
            "dissemination_p50_s": x50, "dissemination_p90_s": x90, "dissemination_p99_s": x99,
            "controller_tenures": len(tenures),
            "controller_gaps": len(gaps),
            "controller_gap_total_s": round(sum(gaps), 3),
        })  # fmt: skip
    if fmt is not None:
        out["timestamp_format"] = fmt
    return out


def _round6(x: Any) -> float | None:
    return None if x is None else round(float(x), 6)


def choose_bucket_ms(span_ms: int) -> int:
    """A round bucket giving at most ~400 points over the window."""
    for b in (1_000, 5_000, 10_000, 30_000, 60_000, 300_000, 600_000, 1_800_000, 3_600_000,
              21_600_000, 86_400_000):  # fmt: skip
        if span_ms / b <= 400:
            return b
    return 86_400_000


def write_tables(tables: dict[str, Any], out: Path, steps: progress.Steps) -> None:
    """Each table as Parquet (Spark's directory layout) and as one CSV file,
    events named as in the history log (`member-failed`, not the job's code).

    The CSV is written by Spark's executors (no row passes through Python),
    then its parts are joined, in order, under one header.
    """
    import shutil

    from shoal.churn import transforms as T

    (out / "csv").mkdir(parents=True, exist_ok=True)
    for name, df in tables.items():
        steps.next(f"writing table {name}")
        df = T.to_names(df)
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
    """The whole job; returns the summary. Raises UsageError before Spark
    starts for what can be checked then; on any failure the output folder
    is removed again if this run created it."""
    import shutil
    import warnings

    preflight(args)
    from shoal.churn.report import render

    # PySpark warns about the pandas version at import when pandas is
    # installed; the job does not use pandas, and the terminal stays quiet.
    warnings.filterwarnings("ignore", category=FutureWarning, module="pyspark")
    out = Path(args.out)
    created = not out.exists()
    steps = progress.Steps(total=10 if args.format != "history" else 15)
    steps.next("starting Spark")
    spark = spark_session(args)
    if not args.verbose:
        spark.sparkContext.setLogLevel("ERROR")
    try:
        results, tables = compute(spark, load(spark, args), args, steps)
        out.mkdir(parents=True, exist_ok=True)
        write_tables(tables, out, steps)
        steps.next("writing the report")
        (out / "summary.json").write_text(json.dumps(results.summary, indent=2) + "\n")
        render(results, out / "report.html", args)
    except BaseException:
        if created:
            shutil.rmtree(out, ignore_errors=True)
        raise
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
