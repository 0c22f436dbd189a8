"""Reading traces other than shoal's own history: `--format events-csv` and
`--format intervals` (docs/churn.md, "Other systems' traces").

Both become history-shaped rows, as if one observer, `import`, had written
them, plus an `end` row per node where the trace says when its observation
of that node ended. Event words, case-insensitive:

    up, join, alive, 1             -> join   (the node is up from here)
    down, dead, fail, failed, 0    -> dead   (a failure)
    leave, left                    -> left   (a planned departure)
    end                            -> end    (observation of the node ends)

events-csv: `timestamp,node,event`, an optional header line skipped. Rows
keep their file order among rows of one node with the same timestamp.

intervals: a CSV with a header naming the columns; each row is one interval
of a node in one state, down unless a state column says otherwise:

    node   node, node_id, nodenum, host, hostname, machine
    start  start, start_time, begin, from, prob_started
    stop   stop, end, end_time, stop_time, to, prob_fixed
    state  state, status, type        (optional; the event words above)

(`--columns node=N,start=S,stop=E,state=X` names other columns.) A down
interval is a failure at `start` repaired at `stop`; an up interval is a
session that ends in a failure at `stop`, except the node's last one. The
node is observed from its first start to its last stop (an `end` row there).
Overlapping or touching intervals of one node in one state are merged first,
and counted. Rows with no node, an unreadable time, a stop before the start
or an unknown state are bad rows.

Timestamps: all numbers means epoch seconds, or epoch milliseconds when the
largest is above 10^11; anything else is ISO-8601, UTC when no zone is given.
The format is detected from the first 1,000 values (up to half may be
unreadable without changing the verdict) and named in the report.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql.types import StringType, StructField, StructType

from shoal.churn.schema import CORRUPT, SCHEMA_VERSION, history_schema

UP_WORDS = ("up", "join", "alive", "1")
DOWN_WORDS = ("down", "dead", "fail", "failed", "0")
EVENT_MAP = {**{w: "join" for w in UP_WORDS}, **{w: "dead" for w in DOWN_WORDS},
             "leave": "left", "left": "left", "end": "end"}  # fmt: skip
COLUMN_ALIASES = {
    "node": ("node", "node_id", "nodeid", "nodenum", "host", "hostname", "machine"),
    "start": ("start", "start_time", "begin", "from", "prob_started"),
    "stop": ("stop", "end", "end_time", "stop_time", "to", "prob_fixed"),
    "state": ("state", "status", "type"),
}
SAMPLE = 1000


class TraceError(ValueError):
    """An input that cannot be imported as asked (a usage error)."""


def detect_format(samples: list[str | None]) -> str:
    """ "epoch-ms", "epoch-s" or "iso-8601" for these timestamp strings."""
    values = [s.strip() for s in samples if s and s.strip()]
    numbers = []
    for v in values:
        try:
            numbers.append(float(v))
        except ValueError:
            pass
    # Mostly numbers (a few bad rows do not decide it): epoch times.
    if not numbers or len(numbers) < 0.5 * len(values):
        return "iso-8601"
    return "epoch-ms" if max(numbers) > 1e11 else "epoch-s"


def _ts_ms(col: Column, fmt: str) -> Column:
    # try_cast: a malformed value is null (a bad row), not a failed job.
    if fmt == "epoch-ms":
        return col.try_cast("double").try_cast("long")
    if fmt == "epoch-s":
        return (col.try_cast("double") * 1000).try_cast("long")
    return F.unix_millis(F.trim(col).try_cast("timestamp"))


def _event(col: Column) -> Column:
    mapping = F.create_map(*[F.lit(x) for kv in EVENT_MAP.items() for x in kv])
    return mapping[F.lower(F.trim(col))]


def _history_rows(df: DataFrame, bad: Column, raw_text: Column) -> DataFrame:
    """`df` (ts_ms, node, event, order) as rows under the history schema."""
    columns = {
        "v": F.lit(SCHEMA_VERSION),
        "ts_ms": F.col("ts_ms"),
        "observer": F.lit("import"),
        "event": F.col("event"),
        "node": F.col("node"),
        # Every imported row is a change of its own; `order` keeps the
        # trace's order among one node's rows with the same time.
        "incarnation": F.col("order"),
        CORRUPT: F.when(bad, raw_text),
    }
    return df.select(*[columns.get(f.name, F.lit(None)).try_cast(f.dataType).alias(f.name)
                       for f in history_schema()])  # fmt: skip


def _read(spark: SparkSession, path: str | list[str], recursive: bool, header: bool,
          schema: StructType | None = None) -> DataFrame:  # fmt: skip
    reader = spark.read.option("recursiveFileLookup", str(recursive).lower())
    try:
        if schema is None:
            return reader.csv(path, header=header, mode="PERMISSIVE")
        return reader.csv(path, schema=schema, header=header, mode="PERMISSIVE")
    except Exception as exc:  # AnalysisException: a path that does not exist
        if "PATH_NOT_FOUND" in str(exc):
            raise TraceError(f"--history: no such file or directory: {path}") from None
        raise


def read_events_csv(spark: SparkSession, path: str | list[str],
                    recursive: bool = False) -> tuple[DataFrame, str]:  # fmt: skip
    """History-shaped rows (the corrupt-record column set for bad rows) and
    the timestamp format that was detected."""
    schema = StructType([StructField(n, StringType()) for n in ("timestamp", "node", "event")])
    raw = _read(spark, path, recursive, False, schema)
    raw = raw.where(~(F.lower(F.trim(F.col("timestamp"))) == "timestamp") |
                    F.col("timestamp").isNull())  # fmt: skip
    fmt = detect_format([r[0] for r in raw.select("timestamp").limit(SAMPLE).collect()])
    df = raw.select(
        _ts_ms(F.col("timestamp"), fmt).alias("ts_ms"), F.trim("node").alias("node"),
        _event(F.col("event")).alias("event"), F.monotonically_increasing_id().alias("order"),
        F.concat_ws(",", "timestamp", "node", "event").alias("_text"),
    )  # fmt: skip
    bad = (
        F.col("ts_ms").isNull()
        | F.col("event").isNull()
        | F.col("node").isNull()
        | (F.col("node") == "")
    )
    return _history_rows(df, bad, F.col("_text")), fmt


def _columns(found: list[str], mapping: str | None) -> dict[str, str | None]:
    """Our column -> the file's, from `--columns` or the aliases."""
    given: dict[str, str] = {}
    for part in (mapping or "").split(","):
        if part.strip():
            key, sep, col = part.partition("=")
            if not sep or key.strip() not in COLUMN_ALIASES:
                raise TraceError(f"--columns: expected node=COL,start=COL,stop=COL[,state=COL],"
                                 f" not {part.strip()!r}")  # fmt: skip
            given[key.strip()] = col.strip()
    lower = {c.strip().lower(): c for c in found}
    out: dict[str, str | None] = {}
    for key, aliases in COLUMN_ALIASES.items():
        name: str | None = given.get(key) or next((lower[a] for a in aliases if a in lower), None)
        if name is not None and name not in found and name.lower() not in lower:
            raise TraceError(f"--columns: the file has no column {name!r} (it has "
                             f"{', '.join(found)})")  # fmt: skip
        out[key] = lower.get(name.lower(), name) if name else None
    missing = [k for k in ("node", "start", "stop") if out[k] is None]
    if missing:
        raise TraceError(f"--format intervals: no {'/'.join(missing)} column among "
                         f"{', '.join(found)} (name it with --columns)")  # fmt: skip
    return out


def read_intervals_csv(spark: SparkSession, path: str | list[str], recursive: bool = False,
                       mapping: str | None = None) -> tuple[DataFrame, str, DataFrame]:  # fmt: skip
    """History-shaped rows, the timestamp format, and one row with the
    count of interval rows merged into an overlapping one (`merged`)."""
    raw = _read(spark, path, recursive, True)
    cols = _columns(raw.columns, mapping)
    fmt = detect_format([r[0] for r in raw.select(F.col(f"`{cols['start']}`"))
                         .limit(SAMPLE).collect()])  # fmt: skip
    state_text = F.lower(F.trim(F.col(f"`{cols['state']}`"))) if cols["state"] else F.lit("")
    state = (
        F.when(state_text.isNull() | (state_text == ""), "down")
        .when(state_text.isin(*UP_WORDS), "up")
        .when(state_text.isin(*DOWN_WORDS), "down")
    )
    text = F.concat_ws(",", *[F.col(f"`{c}`") for c in cols.values() if c])
    rows = raw.select(
        F.trim(F.col(f"`{cols['node']}`")).alias("node"),
        _ts_ms(F.col(f"`{cols['start']}`"), fmt).alias("start_ms"),
        _ts_ms(F.col(f"`{cols['stop']}`"), fmt).alias("stop_ms"),
        state.alias("state"), text.alias("_text"),
    )  # fmt: skip
    bad = (F.col("node").isNull() | (F.col("node") == "") | F.col("start_ms").isNull()
           | F.col("stop_ms").isNull() | F.col("state").isNull()
           | (F.col("stop_ms") < F.col("start_ms")))  # fmt: skip
    flagged = rows.withColumn("_bad", bad)
    bad_rows = flagged.where("_bad").select(
        F.lit(None).cast("long").alias("ts_ms"), "node", F.lit(None).cast("string").alias("event"),
        F.lit(0).cast("long").alias("order"), "_text")  # fmt: skip
    merged, n_merged = merge_intervals(flagged.where(~F.col("_bad")))
    events = interval_events(merged)
    ok = events.withColumn("_text", F.lit(None).cast("string"))
    out = _history_rows(ok.unionByName(bad_rows), F.col("ts_ms").isNull(), F.col("_text"))
    return out, fmt, n_merged


def merge_intervals(iv: DataFrame) -> tuple[DataFrame, DataFrame]:
    """Overlapping or touching intervals of one node in one state as one:
    (node, state, start_ms, stop_ms), and a one-row count `merged`."""
    by_start = Window.partitionBy("node", "state").orderBy("start_ms", "stop_ms")
    reach = F.max("stop_ms").over(by_start.rowsBetween(Window.unboundedPreceding, -1))
    grouped = iv.withColumn("_new", F.when(reach.isNull() | (F.col("start_ms") > reach), 1)
                            .otherwise(0))  # fmt: skip
    grouped = grouped.withColumn("_group", F.sum("_new").over(
        by_start.rowsBetween(Window.unboundedPreceding, Window.currentRow)))  # fmt: skip
    merged = grouped.groupBy("node", "state", "_group").agg(
        F.min("start_ms").alias("start_ms"), F.max("stop_ms").alias("stop_ms"),
        F.count(F.lit(1)).alias("_rows"),
    )  # fmt: skip
    count = merged.agg(F.coalesce(F.sum(F.col("_rows") - 1), F.lit(0)).alias("merged"))
    return merged.drop("_group", "_rows"), count


def interval_events(iv: DataFrame) -> DataFrame:
    """Events of merged intervals: (ts_ms, node, event, order). Down: dead
    at the start, join at the stop. Up: join at the start, dead at the stop
    unless it is the node's last stop. An `end` row at the node's last stop."""
    last = F.max("stop_ms").over(Window.partitionBy("node"))
    iv = iv.withColumn("_last", last)
    down = F.col("state") == "down"
    starts = iv.select(F.col("start_ms").alias("ts_ms"), "node",
                       F.when(down, "dead").otherwise("join").alias("event"))  # fmt: skip
    stops = iv.where(down | (F.col("stop_ms") < F.col("_last"))).select(
        F.col("stop_ms").alias("ts_ms"),
        "node",
        F.when(down, "join").otherwise("dead").alias("event"),
    )
    ends = iv.select(F.col("_last").alias("ts_ms"), "node", F.lit("end").alias("event"))
    # Contiguous intervals of both states name the same instant twice.
    events = starts.unionByName(stops).unionByName(ends).distinct()
    # At one instant a failure comes before a repair (a zero-length downtime).
    rank = F.when(F.col("event") == "dead", 0).when(F.col("event") == "join", 1).otherwise(2)
    return events.withColumn("order", F.col("ts_ms") * 4 + rank)
