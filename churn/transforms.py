"""Pure DataFrame -> DataFrame steps of the churn job (no IO, no collect).

The model (docs/churn.md):
- An *observation* is one history row: one observer saw one thing.
- A *change* is one thing that happened to a node, identified by
  (node, event, incarnation); many observers report the same change, and the
  first observation dates it.
- The *timeline* of a node is its changes of status, up (join) or down (dead,
  left), in order, with repeats dropped. A death is dated by the first
  suspicion of the same incarnation when there was one, because the node
  was already gone when that suspicion was raised.
- An *interval* runs from one transition to the next: up intervals are
  sessions, down intervals downtimes. The last one of each node is cut at
  the node's observation end and marked incomplete (right-censored); a
  first down whose start may be old news is marked unseen (left-censored).
  Censored intervals never feed length statistics (docs/churn.md).
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from shoal.churn.schema import CORRUPT, EVENTS, EVENTS_V1, SUPPORTED_VERSIONS

CHANGE_EVENTS = ("join", "alive", "suspect", "dead", "left")
STATUS_EVENTS = ("join", "dead", "left")
# The job computes on short codes, schema 1's words (`join`, `dead`, ...);
# rows of schema 2, named as the monitor names events (`member-joined`,
# `member-failed`, ...), are mapped to them as they are read (`to_codes`),
# so one log set may mix agents of both versions. The importers write codes.
CODES = dict(zip(EVENTS, EVENTS_V1, strict=True))
USED_COLUMNS = ("ts_ms", "observer", "event", "node", "incarnation", "source", "epoch")
HOUR_MS = 3_600_000
ORDER = Window.partitionBy("node").orderBy("at_ms", "incarnation", "status")


def to_codes(rows: DataFrame) -> DataFrame:
    """Rows with schema 2's event names replaced by the job's codes."""
    names = F.create_map(*(F.lit(x) for pair in CODES.items() for x in pair))
    return rows.withColumn("event", F.coalesce(names[F.col("event")], F.col("event")))


def to_names(table: DataFrame) -> DataFrame:
    """An output table with the job's codes in its event columns named as
    the history log (schema 2) and the monitor name them."""
    names = F.create_map(*(F.lit(x) for pair in CODES.items() for x in pair[::-1]))
    for column in ("event", "started_by", "ended_by"):
        if column in table.columns:
            table = table.withColumn(column, F.coalesce(names[F.col(column)], F.col(column)))
    return table


def is_valid(extra_events: tuple[str, ...] = ()) -> Column:
    """A row the job can use (after `to_codes`): parsed, a known version,
    event, subject, time (`extra_events`: the importers' `end`)."""
    return (
        F.col(CORRUPT).isNull()
        & F.col("v").isin(*SUPPORTED_VERSIONS)
        & F.col("ts_ms").isNotNull()
        & F.col("node").isNotNull()
        & F.col("event").isin(*EVENTS_V1, *extra_events)
    )


def in_window(rows: DataFrame, since_ms: int | None, until_ms: int | None) -> DataFrame:
    """Rows with since_ms <= ts_ms < until_ms (either bound optional)."""
    if since_ms is not None:
        rows = rows.where(F.col("ts_ms") >= since_ms)
    if until_ms is not None:
        rows = rows.where(F.col("ts_ms") < until_ms)
    return rows


def observations(rows: DataFrame) -> DataFrame:
    """One row per change and observer: (node, event, incarnation, observer,
    ts_ms, source), dated by that observer's first row of it, so an observer
    that logged a change twice counts once everywhere after this."""
    return (
        rows.where(F.col("event").isin(*CHANGE_EVENTS))
        .groupBy("node", "event", "incarnation", "observer")
        .agg(F.min("ts_ms").alias("ts_ms"), F.min_by("source", "ts_ms").alias("source"))
    )


def changes(obs: DataFrame) -> DataFrame:
    """One row per change (from `observations`): its first observation, who
    raised it (the source named by the first observation), and whether the
    node logged it itself."""
    return obs.groupBy("node", "event", "incarnation").agg(
        F.min("ts_ms").alias("first_ms"),
        F.min_by("source", "ts_ms").alias("source"),
        F.max(F.col("observer") == F.col("node")).alias("self_seen"),
    )


def status_changes(chg: DataFrame) -> DataFrame:
    """Each node's status changes in order, repeats still in: (node, at_ms,
    status, event, incarnation, prev), status "up" or "down".

    A restart quicker than failure detection leaves no death in anyone's
    log, only the node's own join at a higher incarnation while it was
    still up: a down is put before it, dated by the unconfirmed suspicion
    of the previous incarnation when there was one, else at the restart.
    """
    # The first suspicion of the same incarnation, and of the one before,
    # read off a window of each node's changes by incarnation (every step
    # here is a window by node, so nothing shuffles: see job.compute).
    by_inc = Window.partitionBy("node").orderBy("incarnation")
    suspect_ms = F.min(F.when(F.col("event") == "suspect", F.col("first_ms")))
    status = (
        chg.where(F.col("event").isin("suspect", *STATUS_EVENTS))
        .withColumn("suspect_ms", suspect_ms.over(by_inc.rangeBetween(0, 0)))
        .withColumn("earlier_suspect_ms", suspect_ms.over(by_inc.rangeBetween(-1, -1)))
        .where(F.col("event").isin(*STATUS_EVENTS))
        .select(
            "node",
            "incarnation",
            "event",
            "self_seen",
            "earlier_suspect_ms",
            F.when(F.col("event") == "join", "up").otherwise("down").alias("status"),
            F.when(
                (F.col("event") == "dead") & F.col("suspect_ms").isNotNull(),
                F.least("first_ms", "suspect_ms"),
            )
            .otherwise(F.col("first_ms"))
            .alias("at_ms"),
        )
    )
    lagged = status.withColumn("prev", F.lag("status").over(ORDER)).withColumn(
        "prev_ms", F.lag("at_ms").over(ORDER)
    )
    earlier = F.col("earlier_suspect_ms")
    unseen_deaths = lagged.where(
        (F.col("event") == "join") & F.col("self_seen") & (F.col("prev") == "up")
    ).select(
        "node",
        (F.col("incarnation") - 1).alias("incarnation"),
        F.lit("dead").alias("event"),
        F.lit("down").alias("status"),
        F.when(earlier.between(F.col("prev_ms"), F.col("at_ms")), earlier)
        .otherwise(F.col("at_ms"))
        .alias("at_ms"),
    )
    merged = status.drop("self_seen", "earlier_suspect_ms").unionByName(unseen_deaths)
    return merged.withColumn("prev", F.lag("status").over(ORDER))


def transitions(changes: DataFrame) -> DataFrame:
    """The reconciled timeline from `status_changes`: a status repeating the
    one before (a second down before any up) is merged into it (the job
    counts them). A node's first status stays, up or down."""
    prev = F.col("prev")
    return changes.where(prev.isNull() | (prev != F.col("status")))


def observation_ends(status: DataFrame, ends: DataFrame | None, window_end_ms: int) -> DataFrame:
    """(node, obs_end_ms): when the input stopped watching each node, from
    its status events (`status_changes`, repeats in: a repeated `up` is
    still news that the node was watched).

    Imported traces (`ends` given: the `end` rows): the later of the node's
    `end` row and its last event. Shoal's history: every agent logs all the
    time, so a node is watched to the end of the window, unless its record
    ends with its own departure (`left`): it left the cluster then.
    """
    last = status.groupBy("node").agg(F.max_by(F.struct("at_ms", "event"), F.struct(
        "at_ms", "incarnation")).alias("last"))  # fmt: skip
    if ends is not None:
        by_node = ends.groupBy("node").agg(F.max("ts_ms").alias("end_ms"))
        return last.join(by_node, "node", "left").select(
            "node", F.greatest(F.col("last.at_ms"), F.coalesce("end_ms", F.col("last.at_ms")))
            .alias("obs_end_ms"))  # fmt: skip
    return last.select("node", F.when(F.col("last.event") == "left", F.col("last.at_ms"))
                       .otherwise(F.greatest(F.col("last.at_ms"), F.lit(window_end_ms)))
                       .alias("obs_end_ms"))  # fmt: skip


def intervals(trans: DataFrame, obs_end: DataFrame, first_down_seen: bool) -> DataFrame:
    """Sessions and downtimes: (node, status, start_ms, end_ms, length_s,
    started_by, ended_by, complete, start_seen, counted).

    `complete`: its end was seen (a next transition). The last interval of
    a node ends at the node's observation end, right-censored. `start_seen`
    is false for a node's first interval when it is a down and
    `first_down_seen` is false (in shoal's history a first `dead` may be
    old news an observer learnt on joining). `counted`: it feeds up and
    down time: its start was seen and it lasted (or ended).
    """
    nxt = F.lead("at_ms").over(ORDER)
    first_down = F.col("prev").isNull() & (F.col("status") == "down")
    start_seen = F.lit(True) if first_down_seen else ~first_down
    iv = (
        trans.join(obs_end, "node")
        .select(
            "node",
            "status",
            F.col("at_ms").alias("start_ms"),
            F.coalesce(nxt, F.greatest(F.col("obs_end_ms"), F.col("at_ms"))).alias("end_ms"),
            F.col("event").alias("started_by"),
            F.lead("event").over(ORDER).alias("ended_by"),
            nxt.isNotNull().alias("complete"),
            start_seen.alias("start_seen"),
        )
        .withColumn("length_s", (F.col("end_ms") - F.col("start_ms")) / 1000.0)
    )
    counted = F.col("start_seen") & (F.col("complete") | (F.col("length_s") > 0))
    return iv.withColumn("counted", counted)


def node_stats(iv: DataFrame, chg: DataFrame, flap_k: int, flap_window_ms: int) -> DataFrame:
    """Per node: observed span, up and down time, failures, repairs, MTBF,
    MTTR, availability, failures per day, flapping (docs/churn.md)."""
    up = F.col("status") == "up"
    counted = F.col("counted")
    death = ~up & (F.col("started_by") == "dead") & F.col("start_seen")
    repaired = death & F.col("complete")

    def total(cond: Column, value: Column | None = None) -> Column:
        return F.sum(F.when(cond, value if value is not None else F.lit(1))
                     .otherwise(0 if value is None else 0.0))  # fmt: skip

    per_node = iv.groupBy("node").agg(
        F.min(F.when(counted, F.col("start_ms"))).alias("first_ms"),
        F.max(F.when(counted, F.col("end_ms"))).alias("obs_end_ms"),
        total(counted & up, F.col("length_s")).alias("up_s"),
        total(counted & ~up, F.col("length_s")).alias("down_s"),
        total(up & F.col("start_seen")).alias("sessions"),
        total(death).alias("failures"),
        total(~up & (F.col("started_by") == "left") & F.col("start_seen")).alias("leaves"),
        total(repaired, F.col("length_s")).alias("repair_s"),
        total(repaired).alias("repairs"),
    )
    counts = chg.groupBy("node").agg(
        F.count(F.lit(1)).alias("changes"),
        F.sum(F.when(F.col("event") == "suspect", 1).otherwise(0)).alias("suspicions"),
    )
    observed = F.col("up_s") + F.col("down_s")
    return (
        per_node.join(counts, "node", "left")
        .join(
            false_suspicions(chg)
            .groupBy("node")
            .count()
            .withColumnRenamed("count", "false_suspicions"),
            "node",
            "left",
        )  # fmt: skip
        .join(flapping(iv.where(death), flap_k, flap_window_ms), "node", "left")
        .fillna(0, ["changes", "suspicions", "false_suspicions", "max_failures_in_window"])
        .withColumn("flapping", F.col("max_failures_in_window") >= flap_k)
        .withColumn("observed_s", observed)
        # A node seen only while down (one failure and its repair) has no
        # availability of its own: its span is the downtime itself.
        .withColumn("availability", F.when(F.col("up_s") > 0, F.col("up_s") / observed))
        .withColumn(
            "failures_per_day", F.when(observed > 0, F.col("failures") / (observed / 86400.0))
        )  # fmt: skip
        .withColumn("mtbf_s", F.when(F.col("failures") > 0, F.col("up_s") / F.col("failures")))
        .withColumn("mttr_s", F.when(F.col("repairs") > 0, F.col("repair_s") / F.col("repairs")))
    )


def flapping(deaths: DataFrame, k: int, window_ms: int) -> DataFrame:
    """(node, max_failures_in_window): the most failures of the node within
    any `window_ms` (each failure and those in the window before it)."""
    before = Window.partitionBy("node").orderBy("start_ms").rangeBetween(-window_ms, 0)
    return (
        deaths.withColumn("n", F.count(F.lit(1)).over(before))
        .groupBy("node")
        .agg(F.max("n").alias("max_failures_in_window"))
    )


def false_suspicions(chg: DataFrame) -> DataFrame:
    """Suspicions later refuted: no death or leave of that incarnation, and
    the node was seen alive at a higher one. (node, incarnation, first_ms)."""
    suspected = chg.where(F.col("event") == "suspect").select("node", "incarnation", "first_ms")
    confirmed = chg.where(F.col("event").isin("dead", "left")).select("node", "incarnation")
    highest_alive = (
        chg.where(F.col("event").isin("alive", "join"))
        .groupBy("node")
        .agg(F.max("incarnation").alias("alive_inc"))
    )
    return (
        suspected.join(confirmed, ["node", "incarnation"], "left_anti")
        .join(highest_alive, "node")
        .where(F.col("alive_inc") > F.col("incarnation"))
        .select("node", "incarnation", "first_ms")
    )


def dissemination(obs: DataFrame, iv: DataFrame) -> DataFrame:
    """How long each change took to reach every observer that was up when it
    happened: (node, event, incarnation, first_ms, last_ms, observers, delay_s).

    Observers that joined later learn old news by push-pull; they are left
    out. Each observation is dated by its change's first observation (a
    window per change), then sorted in with the observer's own intervals
    (one sort by observer, no range join): the last interval that started
    before the change says whether the observer was up then and until when.
    Only running frames are used, so the cost is linear in the rows per
    observer (a frame over the *following* rows would be quadratic). The
    node a change is about always counts: its own join or leave row is
    where news starts.
    """
    per_change = Window.partitionBy("node", "event", "incarnation")
    none = {"string": F.lit(None).cast("string"), "long": F.lit(None).cast("long")}
    heard_at = obs.select(
        "observer", F.min("ts_ms").over(per_change).alias("t"), F.lit(1).alias("kind"),
        none["string"].alias("status"), none["long"].alias("until"),
        "node", "event", "incarnation", "ts_ms",
    )  # fmt: skip
    forever = F.lit(2**62)
    own = iv.select(
        F.col("node").alias("observer"), F.col("start_ms").alias("t"), F.lit(0).alias("kind"),
        "status", F.when(F.col("complete"), F.col("end_ms")).otherwise(forever).alias("until"),
        none["string"].alias("node"), none["string"].alias("event"),
        none["long"].alias("incarnation"), none["long"].alias("ts_ms"),
    )  # fmt: skip
    so_far = (
        Window.partitionBy("observer")
        .orderBy("t", "kind", "until")
        .rowsBetween(Window.unboundedPreceding, Window.currentRow)
    )
    with_status = (
        heard_at.unionByName(own)
        .withColumn("observer_status", F.last("status", ignorenulls=True).over(so_far))
        .withColumn("observer_until", F.last("until", ignorenulls=True).over(so_far))
    )
    # Everyone but the origin counts only if it was up when the change
    # happened and stayed up until it heard (a restarted observer learns old
    # news by push-pull, which is no measure of gossip).
    stayed_up = (F.col("observer_status") == "up") & (F.col("ts_ms") < F.col("observer_until"))
    heard = with_status.where(
        (F.col("kind") == 1) & (stayed_up | (F.col("observer") == F.col("node")))
    )
    return (
        heard.groupBy("node", "event", "incarnation")
        .agg(
            F.min("ts_ms").alias("first_ms"),
            F.max("ts_ms").alias("last_ms"),
            F.count(F.lit(1)).alias("observers"),  # one row per observer
        )
        .where(F.col("observers") >= 2)
        .withColumn("delay_s", (F.col("last_ms") - F.col("first_ms")) / 1000.0)
    )


def size_over_time(iv: DataFrame, start_ms: int, end_ms: int, bucket_ms: int) -> DataFrame:
    """Nodes up, and nodes under observation, at the end of each bucket;
    comings up (joins, repairs) and goings down in it: (bucket_ms, joins,
    departures, size, observed). Intervals that last to the end of the
    window stay counted to the end (the last bucket is no cliff)."""
    counted = iv.where("counted")
    up = F.when(F.col("status") == "up", 1).otherwise(0)
    ends_before = F.col("end_ms") < end_ms

    def bucket(col: str) -> Column:
        return (F.floor((F.col(col) - start_ms) / bucket_ms) * bucket_ms + start_ms).cast("long")

    starts = counted.select(bucket("start_ms").alias("bucket_ms"), up.alias("d_up"),
                            F.lit(1).alias("d_obs"), up.alias("joins"),
                            (1 - up).alias("departures"))  # fmt: skip
    stops = counted.where(ends_before).select(
        bucket("end_ms").alias("bucket_ms"), (-up).alias("d_up"), F.lit(-1).alias("d_obs"),
        F.lit(0).alias("joins"), F.lit(0).alias("departures"))  # fmt: skip
    per_bucket = (
        starts.unionByName(stops)
        .groupBy("bucket_ms")
        .agg(*[F.sum(c).alias(c) for c in ("d_up", "d_obs", "joins", "departures")])
    )
    running = Window.orderBy("bucket_ms").rowsBetween(Window.unboundedPreceding, Window.currentRow)
    return (
        per_bucket.withColumn("size", F.sum("d_up").over(running))
        .withColumn("observed", F.sum("d_obs").over(running))
        .drop("d_up", "d_obs")
    )


def controller_tenures(rows: DataFrame, end_ms: int) -> DataFrame:
    """(node, epoch, start_ms, end_ms, length_s, ended_by, gap_after_s): each
    lease a controller held, from its own `controller_elected` row to its
    `controller_lost` row or the next controller's start, whichever is first."""
    elected = (
        rows.where(F.col("event") == "controller_elected")
        .groupBy("node", "epoch")
        .agg(F.min("ts_ms").alias("start_ms"))
    )
    lost = (
        rows.where(F.col("event") == "controller_lost")
        .groupBy("node", "epoch")
        .agg(F.min("ts_ms").alias("lost_ms"), F.min_by("source", "ts_ms").alias("reason"))
    )
    order = Window.orderBy("start_ms", "epoch")
    nxt = F.lead("start_ms").over(order)
    far = F.lit(2**62)
    end = F.least(F.coalesce("lost_ms", far), F.coalesce(nxt, far), F.lit(end_ms))
    return (
        elected.join(lost, ["node", "epoch"], "left")
        .withColumn("next_ms", nxt)
        .withColumn("end_ms", F.greatest(end, F.col("start_ms")))
        .withColumn("length_s", (F.col("end_ms") - F.col("start_ms")) / 1000.0)
        .withColumn(
            "ended_by",
            F.when(F.col("lost_ms") == F.col("end_ms"), F.coalesce("reason", F.lit("lost")))
            .when(F.col("next_ms") == F.col("end_ms"), F.lit("successor"))
            .otherwise(F.lit("window end")),
        )
        .withColumn(
            "gap_after_s",
            F.when(
                F.col("next_ms") > F.col("end_ms"), (F.col("next_ms") - F.col("end_ms")) / 1000.0
            ).otherwise(0.0),  # fmt: skip
        )
        .drop("lost_ms", "reason", "next_ms")
    )


def log_histogram(df: DataFrame, column: str, per_decade: int = 4) -> DataFrame:
    """Counts of `column` (seconds) in log-spaced bins: (lo_s, count). Zero
    lengths have no place on a log axis: the job counts them apart."""
    k = F.floor(F.log10(F.col(column)) * per_decade)
    return (
        df.where(F.col(column) > 0)
        .groupBy(k.alias("k"))
        .count()
        .withColumn("lo_s", F.pow(F.lit(10.0), F.col("k") / per_decade))
        .select("lo_s", "count")
    )
