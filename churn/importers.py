"""Reading inputs other than shoal's own history: `--format events-csv`.

A CSV of `timestamp,node,event` (an optional header line is skipped) becomes
history rows as if one observer, `import`, had written them:

    up, join, alive        -> join
    down, dead, failed     -> dead
    leave, left            -> left

The timestamp format is detected from the first 1,000 values: all numbers
means epoch seconds, or epoch milliseconds when the largest is above 10^11
(a date after 1973 in ms, after year 5000 in seconds); anything else is read
as ISO-8601, a time without a zone being UTC. (Up to half of the sample may
be unreadable without changing the verdict.) The report states which.
Rows with no parseable time, no node or an unknown event are counted as bad.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StringType, StructField, StructType

from shoal.churn.schema import CORRUPT, SCHEMA_VERSION, history_schema

EVENT_MAP = {"up": "join", "join": "join", "alive": "join", "down": "dead",
             "dead": "dead", "failed": "dead", "leave": "left", "left": "left"}  # fmt: skip
SAMPLE = 1000


def detect_format(samples: list[str]) -> str:
    """"epoch-ms", "epoch-s" or "iso-8601" for these timestamp strings."""
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


def read_events_csv(spark: SparkSession, path: str | list[str],
                    recursive: bool = False) -> tuple[DataFrame, str]:  # fmt: skip
    """History-shaped rows (with the corrupt-record column set for bad rows)
    and the timestamp format that was detected."""
    schema = StructType([StructField(n, StringType()) for n in ("timestamp", "node", "event")])
    reader = spark.read.option("recursiveFileLookup", str(recursive).lower())
    try:
        raw = reader.csv(path, schema=schema, header=False, mode="PERMISSIVE")
    except Exception as exc:  # AnalysisException: a path that does not exist
        if "PATH_NOT_FOUND" in str(exc):
            raise ValueError(f"--history: no such file or directory: {path}") from None
        raise
    raw = raw.where(~(F.lower(F.trim(F.col("timestamp"))) == "timestamp") |
                    F.col("timestamp").isNull())  # fmt: skip
    sample = [r[0] for r in raw.select("timestamp").limit(SAMPLE).collect()]
    fmt = detect_format(sample)
    mapping = F.create_map(*[F.lit(x) for kv in EVENT_MAP.items() for x in kv])
    event = mapping[F.lower(F.trim(F.col("event")))]
    ts = _ts_ms(F.col("timestamp"), fmt)
    node = F.trim(F.col("node"))
    bad = ts.isNull() | event.isNull() | node.isNull() | (node == "")
    columns = {
        "v": F.lit(SCHEMA_VERSION),
        "ts_ms": ts,
        "cluster": F.lit(None),
        "observer": F.lit("import"),
        "observer_id": F.lit(None),
        "event": event,
        "node": node,
        "node_id": F.lit(None),
        "address": F.lit(None),
        # Every imported row is a change of its own.
        "incarnation": ts,
        "source": F.lit(None),
        "epoch": F.lit(None),
        "tags": F.lit(None),
        CORRUPT: F.when(bad, F.concat_ws(",", "timestamp", "node", "event")),
    }
    schema_out = history_schema()
    rows = raw.select(*[columns[f.name].try_cast(f.dataType).alias(f.name) for f in schema_out])
    return rows, fmt
