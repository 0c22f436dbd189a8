"""The HTML report: one self-contained page, plots embedded as PNG.

Everything here works on the small results the job collected; no Spark.
Each plot has a caption that says what it shows and how to read it.
"""

from __future__ import annotations

import base64
import html
import io
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.dates as mdates  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402

BLUE, RED, GREY, GREEN = "#2a6fb0", "#c0392b", "#8a8a8a", "#2e8b57"


def _png(fig: Any) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    plt.close(fig)
    return base64.b64encode(buf.getvalue()).decode()


def _dt(ms: float) -> datetime:
    return datetime.fromtimestamp(ms / 1000, UTC)


def human_s(s: float | None) -> str:
    """Seconds as a short human duration: 850 ms, 42 s, 7.5 min, 3.2 h, 4.1 d."""
    if s is None:
        return "–"
    if s < 1:
        return f"{s * 1000:.0f} ms"
    if s < 120:
        return f"{s:.1f} s"
    if s < 7200:
        return f"{s / 60:.1f} min"
    if s < 172_800:
        return f"{s / 3600:.1f} h"
    return f"{s / 86400:.1f} d"


def bucket_name(seconds: float) -> str:
    """"hour", "5 min", "day"... for a bucket width."""
    names: dict[float, str] = {60: "minute", 3600: "hour", 86400: "day"}
    if seconds in names:
        return names[seconds]
    return f"{seconds / 3600:g} h" if seconds >= 3600 else \
        f"{seconds / 60:g} min" if seconds >= 60 else f"{seconds:g} s"


def _time_axis(ax: Any) -> None:
    loc = mdates.AutoDateLocator()  # type: ignore[no-untyped-call]
    ax.xaxis.set_major_locator(loc)
    ax.xaxis.set_major_formatter(mdates.ConciseDateFormatter(loc))  # type: ignore[no-untyped-call]
    ax.set_xlabel("time (UTC)")


def plot_size(size: list[dict[str, Any]], bucket: str) -> str:
    """Members up over time, and joins/departures per bucket below it."""
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(10, 5.2), sharex=True,
                                      gridspec_kw={"height_ratios": [2, 1]})  # fmt: skip
    if size:
        t = [_dt(r["bucket_ms"]) for r in size]
        top.step(t, [r["size"] for r in size], where="post", color=BLUE)
        width = (t[1] - t[0]) if len(t) > 1 else None
        kw = {"width": width * 0.9} if width else {}
        bottom.bar(t, [r["joins"] for r in size], color=GREEN, label="joins", align="edge", **kw)
        bottom.bar(t, [-r["departures"] for r in size], color=RED, label="departures (dead + left)",
                   align="edge", **kw)  # fmt: skip
    top.set_ylabel("members up")
    top.set_ylim(bottom=0)
    top.grid(alpha=0.3)
    bottom.set_ylabel(f"per {bucket}")
    bottom.axhline(0, color=GREY, lw=0.8)
    bottom.legend(loc="upper right", fontsize=8)
    _time_axis(bottom)
    return _png(fig)


def plot_hist(hist: list[tuple[float, int]], pcts: list[float | None], title: str,
              color: str) -> str:  # fmt: skip
    """A histogram on log-spaced bins with the p50/p90/p99 marked."""
    fig, ax = plt.subplots(figsize=(10, 3.4))
    if hist:
        los = [lo for lo, _ in hist]
        widths = [lo * (10**0.25 - 1) for lo in los]
        ax.bar(los, [c for _, c in hist], width=widths, align="edge", color=color, alpha=0.85)
        ax.set_xscale("log")
        _duration_ticks(ax, los[0], los[-1] * 10**0.25)
    marks = zip(pcts, ("p50", "p90", "p99"), ("-", "--", ":"), (-12, -24, -36), strict=True)
    for p, name, style, dy in marks:
        if p:
            ax.axvline(p, color="black", ls=style, lw=1)
            ax.annotate(f"{name} {human_s(p)}", (p, 1), xycoords=("data", "axes fraction"),
                        xytext=(3, dy), textcoords="offset points", fontsize=8)  # fmt: skip
    ax.set_xlabel(f"{title} (log scale)")
    ax.set_ylabel("count")
    ax.yaxis.get_major_locator().set_params(integer=True)  # type: ignore[call-arg]
    ax.grid(alpha=0.3, which="both", axis="x")
    return _png(fig)


NICE_DURATIONS = ((0.001, "1 ms"), (0.01, "10 ms"), (0.1, "100 ms"), (1, "1 s"), (10, "10 s"),
                  (60, "1 min"), (600, "10 min"), (3600, "1 h"), (21600, "6 h"),
                  (86400, "1 d"), (604800, "1 w"), (2592000, "30 d"))  # fmt: skip


def _duration_ticks(ax: Any, lo: float, hi: float) -> None:
    """Log-axis ticks at round durations, labelled for people."""
    ticks = [(v, label) for v, label in NICE_DURATIONS if lo / 3 <= v <= hi * 3]
    if len(ticks) >= 2:
        ax.set_xticks([v for v, _ in ticks], [label for _, label in ticks])
        ax.minorticks_off()


def plot_bars(labels: list[str], values: list[float], xlabel: str, color: str,
              fmt: str = "{:.2f}") -> str:  # fmt: skip
    """Horizontal bars, first label at the top."""
    fig, ax = plt.subplots(figsize=(10, 0.32 * max(4, len(labels)) + 0.8))
    ys = list(range(len(labels)))[::-1]
    ax.barh(ys, values, color=color)
    ax.set_yticks(ys, labels, fontsize=8)
    for y, v in zip(ys, values, strict=True):
        ax.annotate(fmt.format(v), (v, y), xytext=(3, 0), textcoords="offset points",
                    va="center", fontsize=7)  # fmt: skip
    ax.set_xlabel(xlabel)
    ax.grid(alpha=0.3, axis="x")
    return _png(fig)


def plot_tenures(tenures: list[dict[str, Any]]) -> str:
    """One bar per lease, a row per controller node, gaps visible between."""
    fig, ax = plt.subplots(figsize=(10, 0.4 * max(3, len({t["node"] for t in tenures})) + 1))
    names = sorted({t["node"] for t in tenures})
    row = {n: i for i, n in enumerate(names)}
    for t in tenures:
        start = mdates.date2num(_dt(t["start_ms"]))  # type: ignore[no-untyped-call]
        width = max(t["length_s"], 0.001) / 86400
        ax.barh(row[t["node"]], width, left=start, color=BLUE, edgecolor="white")
    ax.set_yticks(range(len(names)), names, fontsize=8)
    ax.xaxis_date()
    _time_axis(ax)
    ax.grid(alpha=0.3, axis="x")
    return _png(fig)


def _table(rows: list[dict[str, Any]], columns: list[tuple[str, str, Any]]) -> str:
    head = "".join(f"<th>{html.escape(title)}</th>" for _, title, _ in columns)
    body = []
    for r in rows:
        cells = "".join(f"<td>{html.escape(fmt(r.get(key)))}</td>" for key, _, fmt in columns)
        body.append(f"<tr>{cells}</tr>")
    return f"<table><tr>{head}</tr>{''.join(body)}</table>"


def _pct(x: Any) -> str:
    return "–" if x is None else f"{100 * x:.3f} %"


CSS = """
body{font-family:system-ui,sans-serif;max-width:1080px;margin:2em auto;color:#222;line-height:1.45}
h1{margin-bottom:0}.sub{color:#666;margin-top:.2em}
.cards{display:flex;flex-wrap:wrap;gap:.6em}.card{border:1px solid #ddd;border-radius:6px;
padding:.5em .8em;min-width:9em}.card b{display:block;font-size:1.35em}.card span{color:#666;
font-size:.85em}table{border-collapse:collapse;font-size:.88em;margin:.5em 0}
td,th{border-bottom:1px solid #e4e4e4;padding:.2em .7em;text-align:right}
th{background:#f5f5f5}td:first-child,th:first-child{text-align:left}
img{max-width:100%}.cap{color:#444;font-size:.92em}code{background:#f3f3f3;padding:0 .2em}
"""


def render(results: Any, path: Path, args: Any) -> None:
    """Write report.html."""
    s = results.summary
    cards = [
        (str(s["nodes"]), "nodes seen"),
        (f"{s['events']:,}", "events read"),
        (_pct(s["availability_ratio"]), "availability (all nodes)"),
        (human_s(s["mtbf_s"]), "MTBF (up time per failure)"),
        (human_s(s["mttr_s"]), "MTTR (mean downtime after a failure)"),
        (human_s(s["session_p50_s"]), "median session"),
        (human_s(s["downtime_p50_s"]), "median downtime"),
        (f"{s['false_suspicions']} / {s['suspicions']}", "false / all suspicions"),
        (human_s(s["dissemination_p50_s"]), "news spread p50"),
        (human_s(s["dissemination_p99_s"]), "news spread p99"),
    ]
    card_html = "".join(f"<div class=card><b>{html.escape(v)}</b><span>{html.escape(k)}</span>"
                        "</div>" for v, k in cards)  # fmt: skip
    sections = []

    def section(title: str, img: str | None, caption: str, extra: str = "") -> None:
        pic = f"<img alt='{html.escape(title)}' src='data:image/png;base64,{img}'>" if img else ""
        sections.append(f"<h2>{html.escape(title)}</h2>{pic}<p class=cap>{caption}</p>{extra}")

    bucket = bucket_name(s["bucket_s"])
    section("Cluster size over time", plot_size(results.size, bucket),
            f"Top: how many nodes were up at the end of each {bucket}, from the reconciled "
            f"timelines. Bottom: nodes that came up (green) and went down, by failure or by "
            f"leaving (red), in each {bucket}. A dip in the top line with a red bar under it is "
            f"an outage; many bars at once point at a rack, a switch or a deploy.")  # fmt: skip
    sp = [s["session_p50_s"], s["session_p90_s"], s["session_p99_s"]]
    section("How long nodes stay up (sessions)",
            plot_hist(results.session_hist, sp, "session length", BLUE),
            f"Each completed session, from a node coming up to it failing or leaving "
            f"({s['sessions_completed']:,} sessions; sessions still running at the end of the "
            f"window are not counted here). Bins are logarithmic: each bar covers a quarter of "
            f"a decade. p50 {human_s(sp[0])}, p90 {human_s(sp[1])}, p99 {human_s(sp[2])}.")
    dp = [s["downtime_p50_s"], s["downtime_p90_s"], s["downtime_p99_s"]]
    section("How long nodes stay down (downtimes)",
            plot_hist(results.downtime_hist, dp, "downtime", RED),
            f"Each completed downtime, from a node failing or leaving to it coming back "
            f"({s['downtimes_completed']:,}). A failure is dated by the first suspicion that "
            f"led to it, which is within a probe interval of the real crash. p50 "
            f"{human_s(dp[0])}, p90 {human_s(dp[1])}, p99 {human_s(dp[2])}.")
    top = results.nodes[: args.top]
    if top:
        section(f"Flapping: the {len(top)} nodes that change state most",
                plot_bars([n["node"] for n in top], [n["changes_per_h"] for n in top],
                          "state changes per hour observed (join, suspect, alive, dead, left)",
                          "#d68910"),
                "A node that keeps joining, being suspected and coming back costs the cluster "
                "gossip and elections; look at its network link, power and logs first. Rates "
                "are over the time the node was observed (at least one hour).",
                _table(top, [("node", "node", str),
                             ("changes_per_h", "changes/h", lambda v: f"{v:.2f}"),
                             ("failures", "failures", str), ("leaves", "leaves", str),
                             ("false_suspicions", "false suspicions", str),
                             ("availability", "availability", _pct),
                             ("mtbf_s", "MTBF", human_s),
                             ("mttr_s", "MTTR", human_s)]))  # fmt: skip
    worst = sorted(results.nodes, key=lambda n: n["availability"])[: args.top]
    if worst:
        section("Least available nodes",
                plot_bars([n["node"] for n in worst], [100 * n["availability"] for n in worst],
                          "availability over the observed time (%)", RED, "{:.3f}"),
                "Availability is up time over observed time (up + down), counting planned "
                "leaves as down time. MTBF is up time per failure (deaths, not leaves); MTTR "
                "the mean downtime that followed a failure.")  # fmt: skip
    section("How fast news spread (dissemination delay)",
            plot_hist(results.delay_hist, [s["dissemination_p50_s"], s["dissemination_p90_s"],
                                          s["dissemination_p99_s"]], "delay", GREEN),
            f"For each change seen by at least two nodes, the time from the first node that "
            f"noticed it to the last, among the nodes that were up when it happened "
            f"({s['changes_measured_for_spread']:,} changes). It includes clock differences "
            f"between machines: keep them in NTP sync for this figure to mean something.")
    false_html = (_table(results.false_by_node, [("node", "node", str),
                                                 ("count", "false suspicions", str)])
                  if results.false_by_node else "<p>None.</p>")  # fmt: skip
    section("False suspicions", None,
            f"{s['false_suspicions']} of {s['suspicions']} suspicions were later refuted by the "
            f"node itself (it was alive). Many on one node point at a slow or overloaded "
            f"machine; many everywhere at packet loss or a timing profile too tight for the "
            f"network.", false_html)
    if results.tenures:
        section("Controller tenures", plot_tenures(results.tenures),
                f"Each bar is one lease epoch held by a controller, from its election to its "
                f"loss or its successor's election. {s['controller_tenures']} tenures; "
                f"{s['controller_gaps']} gaps without a controller, "
                f"{human_s(s['controller_gap_total_s'])} in all.",
                _table(results.tenures[-args.top:],
                       [("epoch", "epoch", str), ("node", "node", str),
                        ("start_ms", "start (UTC)",
                         lambda v: _dt(v).isoformat(timespec="seconds")),
                        ("length_s", "held", human_s), ("ended_by", "ended by", str),
                        ("gap_after_s", "gap after", human_s)]))  # fmt: skip
    fmt_note = (f" Timestamps were read as <code>{s['timestamp_format']}</code>."
                if "timestamp_format" in s else "")  # fmt: skip
    page = f"""<!doctype html><html><head><meta charset=utf-8>
<title>shoal churn report</title><style>{CSS}</style></head><body>
<h1>Cluster churn</h1>
<p class=sub>{html.escape(s['window_start'])} to {html.escape(s['window_end'])} UTC
({human_s(s['window_s'])}), from {s['observers']} observers' history logs;
{s['bad_lines']:,} bad lines skipped.{fmt_note}</p>
<div class=cards>{card_html}</div>
{''.join(sections)}
<h2>About these figures</h2><p class=cap>Every agent logs what it observes. The job
reconciles all observers into one timeline per node: a change (a join, a death, a leave of
one incarnation) is dated by its first observer. Tables: <code>csv/</code> and
<code>parquet/</code> next to this page; headline figures in <code>summary.json</code>.
Definitions: docs/churn.md.</p>
</body></html>"""
    path.write_text(page)
