"""The churn job on small hand-built histories, figures worked out by hand.

Three nodes a, b, c observe each other for 10,000 s from T0:
- a is up throughout.
- b crashes: first suspected at 1002 s, declared dead at 1010 s; back at
  1500 s (incarnation 2); leaves at 4000 s; back at 5000 s (incarnation 3).
- c is suspected at 2000 s and refutes at 2001 s (a false suspicion).
- a is controller (epoch 1) from 10 s, releases at 3000 s; c is elected
  (epoch 2) at 3002.5 s.
"""

from __future__ import annotations

import pytest

from shoal.churn.job import run
from tests.spark.conftest import HistoryBuilder, job_args, read_csv

pytestmark = pytest.mark.spark


def three_nodes(v1_observers: frozenset[str] = frozenset()) -> HistoryBuilder:
    h = HistoryBuilder(v1_observers=v1_observers)
    for who, t in (("a", 0), ("b", 1), ("c", 2)):
        h.add(who, t, "join", "a")
    for who, t in (("b", 0), ("a", 0.5), ("c", 1.5)):
        h.add(who, t, "join", "b")
    for who, t in (("c", 0), ("a", 0.3), ("b", 0.6)):
        h.add(who, t, "join", "c")
    h.add("a", 1002, "suspect", "b", 1, source="a")
    h.add("c", 1003, "suspect", "b", 1, source="a")
    h.add("a", 1010, "dead", "b", 1, source="a")
    h.add("c", 1011, "dead", "b", 1, source="a")
    for who, t in (("b", 1500), ("a", 1500.2), ("c", 1500.4)):
        h.add(who, t, "join", "b", 2)
    for who, t in (("b", 4000), ("a", 4000.1), ("c", 4000.3)):
        h.add(who, t, "left", "b", 2)
    for who, t in (("b", 5000), ("a", 5000.5), ("c", 5001)):
        h.add(who, t, "join", "b", 3)
    h.add("a", 2000, "suspect", "c", 1, source="a")
    h.add("b", 2000.5, "suspect", "c", 1, source="a")
    for who, t in (("c", 2001), ("a", 2001.2), ("b", 2001.4)):
        h.add(who, t, "alive", "c", 2, source="a")
    h.add("a", 10, "controller_elected", "a", epoch=1)
    h.add("a", 3000, "controller_lost", "a", epoch=1, source="released")
    h.add("c", 3002.5, "controller_elected", "c", epoch=2)
    h.add("a", 10000, "update", "c", 2)  # the last row: the window ends here
    return h


@pytest.fixture(scope="module")
def report(spark, tmp_path_factory):
    base = tmp_path_factory.mktemp("three")
    history = three_nodes().write(base / "logs", {"a": ["{not json", '{"v": 1}', ""]})
    out = base / "out"
    summary = run(job_args(history, out))
    return summary, out


def test_sessions_downtimes_and_availability_match_the_hand_computation(report):
    s, _ = report
    assert s["nodes"] == 3
    assert s["sessions_completed"] == 2  # b: 0-1002 and 1500-4000
    assert (s["session_p50_s"], s["session_p90_s"], s["session_p99_s"]) == (1002, 2500, 2500)
    assert s["downtimes_completed"] == 2  # b: 1002-1500 (dead) and 4000-5000 (left)
    assert (s["downtime_p50_s"], s["downtime_p90_s"]) == (498, 1000)
    assert s["up_total_s"] == 10000 + 1002 + 2500 + 5000 + 10000
    assert s["down_total_s"] == 498 + 1000
    assert s["failures"] == 1 and s["leaves"] == 1
    assert s["mtbf_s"] == 28502 and s["mttr_s"] == 498
    assert s["availability_ratio"] == round(28502 / 30000, 6)


def test_logs_of_schema_1_and_2_mixed_give_the_same_report(report, tmp_path):
    """Agents upgraded one by one: a's log in schema 1's words (`dead`), b's
    and c's in schema 2's (`member-failed`): the job reads both alike."""
    s, _ = report
    mixed = three_nodes(frozenset({"a"})).write(tmp_path / "logs")
    assert '"event":"dead"' in (mixed / "a.history.jsonl").read_text().replace(" ", "")
    assert '"event":"member-failed"' in (mixed / "c.history.jsonl").read_text().replace(" ", "")
    again = run(job_args(mixed, tmp_path / "out"))
    assert {k: again[k] for k in FIGURES} == {k: s[k] for k in FIGURES}


FIGURES = ("nodes", "sessions_completed", "downtimes_completed", "failures", "leaves",
           "suspicions", "false_suspicions", "mtbf_s", "mttr_s", "availability_ratio",
           "dissemination_p50_s", "dissemination_p99_s")  # fmt: skip


def test_per_node_table(report):
    _, out = report
    nodes = {r["node"]: r for r in read_csv(out / "csv" / "nodes.csv")}
    b = nodes["b"]
    assert float(b["availability"]) == pytest.approx(0.8502)
    assert float(b["mtbf_s"]) == 8502 and float(b["mttr_s"]) == 498
    assert int(b["sessions"]) == 3 and int(b["changes"]) == 6
    assert nodes["a"]["mtbf_s"] == "" and float(nodes["a"]["availability"]) == 1.0
    assert int(nodes["c"]["false_suspicions"]) == 1


def test_failures_per_day_and_flapping_are_per_node(report):
    """b failed once in its 10,000 s: 8.64 failures a day, not flapping
    (that takes 3 within 24 h)."""
    s, out = report
    nodes = {r["node"]: r for r in read_csv(out / "csv" / "nodes.csv")}
    assert float(nodes["b"]["failures_per_day"]) == pytest.approx(8.64)
    assert int(nodes["b"]["max_failures_in_window"]) == 1
    assert nodes["b"]["flapping"] == "false" and s["flapping_nodes"] == 0
    assert s["failures_per_node_day"] == round(1 / (30000 / 86400), 6)


def test_false_suspicions_are_the_refuted_ones(report):
    s, _ = report
    assert s["suspicions"] == 2 and s["false_suspicions"] == 1  # b's was real


def test_dissemination_delay_counts_observers_up_at_the_time(report):
    """Ten changes, each from first to last observer: 2.0 (a joins), 1.5,
    0.6, 1.0 (suspect b), 1.0 (dead b), 0.4 (b back), 0.3 (b leaves), 1.0,
    0.5, 0.4 (c refutes)."""
    s, out = report
    assert s["changes_measured_for_spread"] == 10
    assert s["dissemination_p50_s"] == 0.6
    assert s["dissemination_p90_s"] == 1.5
    assert s["dissemination_p99_s"] == 2.0
    rows = read_csv(out / "csv" / "dissemination.csv")
    left = [r for r in rows if r["event"] == "member-left"]
    assert float(left[0]["delay_s"]) == pytest.approx(0.3)  # the leaver's own row counts


def test_controller_tenures_and_gaps(report):
    s, out = report
    assert s["controller_tenures"] == 2
    assert s["controller_gaps"] == 1 and s["controller_gap_total_s"] == 2.5
    rows = read_csv(out / "csv" / "controller_tenures.csv")
    first = [r for r in rows if r["epoch"] == "1"][0]
    assert first["node"] == "a" and float(first["length_s"]) == 2990
    assert first["ended_by"] == "released"


def test_bad_lines_are_counted_and_skipped(report):
    s, _ = report
    assert s["bad_lines"] == 2  # "{not json" and a row with no time; the empty line is no row
    assert s["events"] == 31  # 27 membership rows, 3 controller rows, 1 update


def test_the_report_is_one_page_with_every_plot_embedded(report):
    _, out = report
    page = (out / "report.html").read_text()
    assert page.count("data:image/png;base64,") == 7
    assert 'src="http' not in page and "src='http" not in page
    for title in (
        "Cluster size over time",
        "Failures per node",
        "False suspicions",
        "Controller tenures",
        "What was counted, censored and left out",
    ):
        assert title in page
    assert (out / "parquet" / "sessions").is_dir()


@pytest.mark.parametrize(
    "stamp, fmt",
    [(lambda s: str(1_767_225_600 + s), "epoch-s"),
     (lambda s: str((1_767_225_600 + s) * 1000), "epoch-ms"),
     (lambda s: f"2026-01-01T{s // 3600:02d}:{s // 60 % 60:02d}:{s % 60:02d}Z", "iso-8601")],
)  # fmt: skip
def test_an_events_csv_from_another_system_gives_the_same_figures(spark, tmp_path, stamp, fmt):
    """x is up for 1000 s, down 200 s, up 1800 s, leaves; y is up throughout."""
    lines = ["timestamp,node,event"]
    for s, node, event in (
        (0, "x", "up"),
        (0, "y", "join"),
        (1000, "x", "down"),
        (1200, "x", "up"),
        (3000, "x", "leave"),
        (3600, "y", "up"),
    ):
        lines.append(f"{stamp(s)},{node},{event}")
    lines += ["garbage", f"{stamp(5)},x,exploded", f"{stamp(6)},,up"]
    path = tmp_path / "events.csv"
    path.write_text("\n".join(lines) + "\n")
    s = run(job_args(path, tmp_path / "out", "--format", "events-csv"))
    assert s["timestamp_format"] == fmt
    assert s["bad_lines"] == 3
    assert (s["sessions_completed"], s["session_p50_s"], s["session_p90_s"]) == (2, 1000, 1800)
    assert (s["downtimes_completed"], s["downtime_p50_s"]) == (1, 200)
    assert s["failures"] == 1 and s["leaves"] == 1
    # Each node over its own span: x to its leave at 3000 s, y to its
    # repeated `up` at 3600 s (a repeat, counted, but proof it was watched).
    assert s["availability_ratio"] == round((3600 + 2800) / (3600 + 3000), 6)
    assert s["excluded"]["repeated_status_events"] == 1
    assert fmt in (tmp_path / "out" / "report.html").read_text()


def test_a_missing_history_is_a_clear_error(spark, tmp_path):
    with pytest.raises(ValueError, match="no such file or directory"):
        run(job_args(tmp_path / "nowhere" / "*.jsonl", tmp_path / "out"))
