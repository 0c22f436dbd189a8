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

BLUE, RED, GREY, GREEN, AMBER = "#2a6fb0", "#c0392b", "#8a8a8a", "#2e8b57", "#d68910"


def _png(fig: Any) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    plt.close(fig)
    return base64.b64encode(buf.getvalue()).decode()


def _dt(ms: float) -> datetime:
    return datetime.fromtimestamp(ms / 1000, UTC)


def human_s(s: float | None) -> str:
    """Seconds as a short human duration: 850 ms, 42 s, 7.5 min, 3.2 h, 4.1 d, 2.5 y."""
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
    if s < 2 * 31_536_000:
        return f"{s / 86400:.1f} d"
    return f"{s / 31_536_000:.1f} y"


def bucket_name(seconds: float) -> str:
    """ "hour", "5 min", "day"... for a bucket width."""
    names: dict[float, str] = {60: "minute", 3600: "hour", 86400: "day"}
    if seconds in names:
        return names[seconds]
    return (
        f"{seconds / 3600:g} h"
        if seconds >= 3600
        else f"{seconds / 60:g} min"
        if seconds >= 60
        else f"{seconds:g} s"
    )


def _time_axis(ax: Any) -> None:
    loc = mdates.AutoDateLocator()  # type: ignore[no-untyped-call]
    ax.xaxis.set_major_locator(loc)
    ax.xaxis.set_major_formatter(mdates.ConciseDateFormatter(loc))  # type: ignore[no-untyped-call]
    ax.set_xlabel("time (UTC)")


def plot_size(size: list[dict[str, Any]], bucket: str, span: tuple[float, float]) -> str:
    """Nodes down; nodes observed and up; comings up and goings down per
    bucket. Down is what an outage looks like; the observed line says when
    the input stopped watching nodes (not a failure)."""
    fig, (down, top, bottom) = plt.subplots(
        3, 1, figsize=(10, 6.6), sharex=True, gridspec_kw={"height_ratios": [1.3, 1.3, 1]}
    )
    if size:
        t = [_dt(r["bucket_ms"]) for r in size]
        down.step(t, [r["observed"] - r["size"] for r in size], where="post", color=RED,
                  label="down")  # fmt: skip
        top.step(t, [r["observed"] for r in size], where="post", color=GREY, lw=2.5,
                 label="observed (between a node's first and last record)")  # fmt: skip
        top.step(t, [r["size"] for r in size], where="post", color=BLUE, lw=1, label="up")
        width = (t[1] - t[0]) if len(t) > 1 else None
        kw = {"width": width * 0.9} if width else {}
        bottom.bar(t, [r["joins"] for r in size], color=GREEN, label="came up", align="edge", **kw)
        bottom.bar(t, [-r["departures"] for r in size], color=RED,
                   label="went down (failed or left)", align="edge", **kw)  # fmt: skip
        for ax in (down, top, bottom):
            ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=8)
    down.set_ylabel("nodes down")
    top.set_ylabel("nodes")
    for ax in (down, top):
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
    bottom.set_ylabel(f"per {bucket}")
    bottom.axhline(0, color=GREY, lw=0.8)
    bottom.set_xlim(_dt(span[0]), _dt(max(span[1], span[0] + 1000)))
    _time_axis(bottom)
    return _png(fig)


def plot_hist(hist: list[tuple[float, int]], pcts: list[float | None], title: str,
              color: str) -> str:  # fmt: skip
    """A histogram on log-spaced bins with the p50/p90/p99 marked; the
    marks are named in a legend beside the plot, never over the bars."""
    fig, ax = plt.subplots(figsize=(10, 3.4))
    lo, hi = None, None
    if hist:
        los = [lo for lo, _ in hist]
        widths = [lo * (10**0.25 - 1) for lo in los]
        ax.bar(los, [c for _, c in hist], width=widths, align="edge", color=color, alpha=0.85)
        lo, hi = los[0], los[-1] * 10**0.25
    marks = zip(pcts, ("p50", "p90", "p99"), ("-", "--", ":"), strict=True)
    for p, name, style in marks:
        if p:
            ax.axvline(p, color="black", ls=style, lw=1, label=f"{name} {human_s(p)}")
            lo, hi = min(lo or p, p), max(hi or p, p)
    if lo is not None and hi is not None:
        ax.set_xscale("log")
        ax.set_xlim(lo / 1.5, hi * 1.5)
        _duration_ticks(ax, lo / 1.5, hi * 1.5)
    if any(pcts):
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=8)
    ax.set_xlabel(f"{title} (log scale)")
    ax.set_ylabel("count")
    ax.yaxis.get_major_locator().set_params(integer=True)  # type: ignore[call-arg]
    ax.grid(alpha=0.3, which="both", axis="x")
    return _png(fig)


_DAY = 86400
NICE_DURATIONS = ((0.001, "1 ms"), (0.01, "10 ms"), (0.1, "100 ms"), (1, "1 s"), (10, "10 s"),
                  (60, "1 min"), (600, "10 min"), (3600, "1 h"), (6 * 3600, "6 h"),
                  (_DAY, "1 d"), (7 * _DAY, "1 w"), (30 * _DAY, "30 d"), (91 * _DAY, "3 mo"),
                  (365 * _DAY, "1 y"), (2 * 365 * _DAY, "2 y"), (5 * 365 * _DAY, "5 y"),
                  (10 * 365 * _DAY, "10 y"), (20 * 365 * _DAY, "20 y"))  # fmt: skip


def _duration_ticks(ax: Any, lo: float, hi: float) -> None:
    """Log-axis ticks at round durations across the whole axis, labelled
    for people; thinned to at most ten so that labels never collide."""
    ticks = [(v, label) for v, label in NICE_DURATIONS if lo <= v <= hi]
    step = max(1, -(-len(ticks) // 10))
    ticks = ticks[::step]
    if len(ticks) >= 2:
        ax.set_xticks([v for v, _ in ticks], [label for _, label in ticks])
        ax.minorticks_off()


def plot_bars(labels: list[str], values: list[float], xlabel: str, colors: list[str],
              fmt: str = "{:.2f}", xmax: float | None = None,
              legend: list[tuple[str, str]] | None = None) -> str:  # fmt: skip
    """Horizontal bars, first label at the top, each value at its bar's end
    (the axis leaves room for it)."""
    fig, ax = plt.subplots(figsize=(10, 0.32 * max(4, len(labels)) + 0.8))
    ys = list(range(len(labels)))[::-1]
    ax.barh(ys, values, color=colors)
    ax.set_yticks(ys, labels, fontsize=8)
    for y, v in zip(ys, values, strict=True):
        ax.annotate(fmt.format(v), (v, y), xytext=(3, 0), textcoords="offset points",
                    va="center", fontsize=7)  # fmt: skip
    top = xmax if xmax is not None else max(values, default=1) or 1
    ax.set_xlim(0, top * 1.12)
    if legend:
        from matplotlib.patches import Patch

        ax.legend(handles=[Patch(color=c, label=label) for c, label in legend],
                  loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=8)  # fmt: skip
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


DEFINITIONS = (
    ("session / downtime", "from a node coming up to its going down / from going down to coming "
     "back; only those whose start and end were both seen feed lengths and percentiles"),
    ("censored", "an interval whose start or end the input did not see: the last one of each "
     "node (right-censored), and in shoal's history a first down that may be old news "
     "(left-censored); counted, never measured"),
    ("observed span", "per node, from its first record to its observation end: its `end` row "
     "or last event in an imported trace; the end of the window in shoal's history, unless its "
     "record ends with its own leave"),
    ("MTBF", "up time observed / failures (deaths, not leaves), over every node's observed span"),
    ("MTTR", "mean length of the downtimes that followed a failure and ended in a repair"),
    ("availability", "up time / observed time, summed over all nodes (time-weighted); per node "
     "the same over its own span, for nodes seen up at least once"),
    ("failures per node per day", "failures / observed node-days"),
    ("flapping", "a node with at least k failures within any window of length w"),
)  # fmt: skip


def _censor_html(s: dict[str, Any]) -> str:
    c, x = s["censored"], s["excluded"]
    rows = [
        ("sessions still running at a node's observation end (counted in up time)",
         c["sessions_end_unseen"]),
        ("downtimes not repaired by a node's observation end (failures counted, no MTTR)",
         c["downtimes_end_unseen"]),
        ("downtimes whose start was not seen (first event down, in shoal's history)",
         c["downtimes_start_unseen"]),
        ("nodes whose first event is a failure", c["nodes_first_event_down"]),
        ("nodes seen once (a single event: no span)", c["nodes_seen_once"]),
        ("nodes without a per-node availability (never seen up)",
         s["nodes_without_availability"]),
        ("zero-length downtimes / sessions (counted, not on the log axes)",
         f"{s['downtimes_zero_length']} / {s['sessions_zero_length']}"),
        ("bad lines skipped", s["bad_lines"]),
        ("rows outside --since/--until", s["rows_outside_window"]),
        ("status events repeating the node's status (merged into the earlier one)",
         x["repeated_status_events"]),
        ("nodes with rows but no up or down event", x["nodes_without_status_events"]),
    ]  # fmt: skip
    if "overlapping_intervals_merged" in x:
        rows.append(("intervals merged into an overlapping one", x["overlapping_intervals_merged"]))
    body = "".join(f"<tr><td>{html.escape(k)}</td><td>{v}</td></tr>" for k, v in rows)
    return f"<table><tr><th>what</th><th>count</th></tr>{body}</table>"


def render(results: Any, path: Path, args: Any) -> None:
    """Write report.html: sections for what the input holds, one line for
    what it cannot tell."""
    s = results.summary
    history = "observers" in s  # shoal's own logs, not an imported trace
    cards = [
        (f"{s['nodes']:,}", "nodes seen"),
        (f"{s['events']:,}", "events read"),
        (_pct(s["availability_ratio"]), "availability (time-weighted)"),
        (_pct(s["availability_mean_ratio"]), "availability (mean per node)"),
        (human_s(s["mtbf_s"]), "MTBF (up time per failure)"),
        (human_s(s["mttr_s"]), "MTTR (mean repair)"),
        (f"{s['failures']:,}", "failures"),
        (f"{s['failures_per_node_day']:.4g}" if s["failures_per_node_day"] else "–",
         "failures per node per day"),
        (f"{s['flapping_nodes']:,}", "flapping nodes"),
    ]  # fmt: skip
    if history:
        cards += [(f"{s['false_suspicions']} / {s['suspicions']}", "false / all suspicions"),
                  (human_s(s["dissemination_p50_s"]), "news spread p50")]  # fmt: skip
    card_html = "".join(f"<div class=card><b>{html.escape(v)}</b><span>{html.escape(k)}</span>"
                        "</div>" for v, k in cards)  # fmt: skip
    sections: list[str] = []

    def section(title: str, img: str | None, caption: str, extra: str = "") -> None:
        pic = f"<img alt='{html.escape(title)}' src='data:image/png;base64,{img}'>" if img else ""
        sections.append(f"<h2>{html.escape(title)}</h2>{pic}<p class=cap>{caption}</p>{extra}")

    bucket = bucket_name(s["bucket_s"])
    span = (_ms(s["window_start"]), _ms(s["window_end"]))
    section("Cluster size over time", plot_size(results.size, bucket, span),
            f"Top: nodes down at the end of each {bucket}; a spike is an outage. Middle: nodes "
            f"up (blue) and nodes under observation (grey). A node leaves the grey line when "
            f"its record ends, which is not a failure: a trace whose records end at each "
            f"node's last repair falls to zero at its end. Bottom: nodes that came up (green) "
            f"and went down (red) in each {bucket}; many at once point at a rack, a switch or "
            f"a deploy.")  # fmt: skip
    for key, name, hist, color, what in (
        ("session", "sessions", results.session_hist, BLUE, "How long nodes stay up (sessions)"),
        ("downtime", "downtimes", results.downtime_hist, RED,
         "How long nodes stay down (downtimes)"),
    ):  # fmt: skip
        pcts = [s[f"{key}_p50_s"], s[f"{key}_p90_s"], s[f"{key}_p99_s"]]
        zero = s[f"{name}_zero_length"]
        section(what, plot_hist(hist, pcts, f"{key} length", color),
                f"Each {key} whose start and end were both seen ({s[f'{name}_completed']:,}, "
                f"of which {zero:,} lasted no time at all: counted in the figures, not drawn on "
                f"the log axis). Censored ones are counted in the table below, never measured. "
                f"Bins are a quarter of a decade. p50 {human_s(pcts[0])}, p90 "
                f"{human_s(pcts[1])}, p99 {human_s(pcts[2])}.")  # fmt: skip
    _node_sections(results, s, args, section)
    _history_sections(results, s, args, section, history)
    section(
        "What was counted, censored and left out",
        None,
        "Nothing is dropped without a count; summary.json holds the same figures under "
        "<code>censored</code> and <code>excluded</code>.",
        _censor_html(s),
    )
    defs = "".join(f"<tr><td>{html.escape(k)}</td><td>{html.escape(v)}</td></tr>"
                   for k, v in DEFINITIONS)  # fmt: skip
    section(
        "Definitions",
        None,
        "Also in docs/churn.md.",
        f"<table class=defs><tr><th>figure</th><th>definition</th></tr>{defs}</table>",
    )
    fmt_note = (f" Timestamps were read as <code>{s['timestamp_format']}</code>."
                if "timestamp_format" in s else "")  # fmt: skip
    source = (
        f"from {s['observers']} observers' history logs"
        if history
        else f"imported with <code>--format {html.escape(s['input_format'])}</code>"
    )
    page = f"""<!doctype html><html><head><meta charset=utf-8>
<title>shoal churn report</title><style>{CSS}</style></head><body>
<h1>Cluster churn</h1>
<p class=sub>{html.escape(s["window_start"])} to {html.escape(s["window_end"])} UTC
({human_s(s["window_s"])}), {source}; {s["bad_lines"]:,} bad lines skipped.{fmt_note}</p>
<div class=cards>{card_html}</div>
{"".join(sections)}
<p class=cap>Tables: <code>csv/</code> and <code>parquet/</code> next to this page; headline
figures in <code>summary.json</code>.</p>
</body></html>"""
    path.write_text(page)


def _ms(iso: str) -> float:
    return datetime.fromisoformat(iso).timestamp() * 1000


def _node_sections(results: Any, s: dict[str, Any], args: Any, section: Any) -> None:
    k, window = s["flapping_failures"], human_s(s["flapping_window_s"])
    top = [n for n in results.nodes if n["failures"]][: args.top]
    if not top:
        section("Failures per node", None, "No failures in the input.")
    else:
        section(f"Failures per node: the {len(top)} that failed most",
                plot_bars([n["node"] for n in top], [n["failures"] for n in top],
                          "failures", [RED if n["flapping"] else AMBER for n in top], "{:.0f}",
                          legend=[(RED, f"flapping: {k}+ in {window}"), (AMBER, "not flapping")]),
                f"Ranked by failures, then by the most failures within {window}. Red: flapping "
                f"(at least {k} failures within {window}; {s['flapping_nodes']:,} nodes in "
                f"all). Look at a flapping node's link, power and logs first.",
                _table(top, [("node", "node", str), ("failures", "failures", str),
                             ("max_failures_in_window", f"most in {window}", str),
                             ("failures_per_day", "failures/day", _num),
                             ("availability", "availability", _pct),
                             ("mtbf_s", "MTBF", human_s), ("mttr_s", "MTTR", human_s),
                             ("leaves", "leaves", str)]))  # fmt: skip
    rated = [n for n in results.nodes if n["availability"] is not None]
    worst = sorted(rated, key=lambda n: (n["availability"], n["node"]))[: args.top]
    if worst:
        section("Least available nodes",
                plot_bars([n["node"] for n in worst], [100 * n["availability"] for n in worst],
                          "availability over the node's observed span (%)", [RED] * len(worst),
                          "{:.3f}", xmax=100),
                f"Up time over observed time, each node over its own span (planned leaves "
                f"count as down). {s['nodes_without_availability']:,} nodes were never seen up "
                f"and have none.")  # fmt: skip


def _num(x: Any) -> str:
    return "–" if x is None else f"{x:.3g}"


def _history_sections(results: Any, s: dict[str, Any], args: Any, section: Any,
                      history: bool) -> None:  # fmt: skip
    if not history:
        section(
            "Suspicions, dissemination and controller tenures",
            None,
            "Not shown: these need shoal's own history logs (observers, suspicions, "
            "controller rows); an imported trace has one up/down record per node.",
        )
        return
    if results.delay_hist:
        section("How fast news spread (dissemination delay)",
                plot_hist(results.delay_hist, [s["dissemination_p50_s"], s["dissemination_p90_s"],
                                               s["dissemination_p99_s"]], "delay", GREEN),
                f"For each change seen by at least two nodes, the time from the first node that "
                f"noticed it to the last, among the nodes that were up when it happened "
                f"({s['changes_measured_for_spread']:,} changes). It includes clock differences "
                f"between machines.")  # fmt: skip
    else:
        section("How fast news spread", None, "Not shown: no change was seen by two observers.")
    false_html = (_table(results.false_by_node, [("node", "node", str),
                                                 ("count", "false suspicions", str)])
                  if results.false_by_node else "")  # fmt: skip
    section(
        "False suspicions",
        None,
        f"{s['false_suspicions']} of {s['suspicions']} suspicions were later refuted by the "
        f"node itself (it was alive).",
        false_html,
    )
    if not results.tenures:
        section("Controller tenures", None, "Not shown: no controller-elected rows in the logs.")
        return
    section("Controller tenures", plot_tenures(results.tenures),
            f"Each bar is one lease epoch held by a controller. {s['controller_tenures']} "
            f"tenures; {s['controller_gaps']} gaps without a controller, "
            f"{human_s(s['controller_gap_total_s'])} in all.",
            _table(results.tenures[-args.top:],
                   [("epoch", "epoch", str), ("node", "node", str),
                    ("start_ms", "start (UTC)", lambda v: _dt(v).isoformat(timespec="seconds")),
                    ("length_s", "held", human_s), ("ended_by", "ended by", str),
                    ("gap_after_s", "gap after", human_s)]))  # fmt: skip
