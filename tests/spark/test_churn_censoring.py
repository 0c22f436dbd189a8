"""The churn job on a hand-built trace that holds every censoring case,
figures worked out by hand (events-csv, epoch seconds from T0; `end` rows
say when the trace stopped watching a node):

- A: first event down (0-100 s, a complete downtime), up, down again
  1000-1300, up until its end row at 2000 (a censored session, 700 s).
- B: up 0-500, down 500-600, up 600-1500, down at 1500 and never repaired
  (last event down: a failure with no repair time, nothing after it).
- C: a single failure 200-260 and its repair, nothing more.
- D: a zero-length downtime at 400, another 900-950, end row at 1200.
- E: overlapping rows: down at 300 twice (the same row) and again at 350,
  up at 500.
- F: seen once, failing at 700.
- G: every event word (join, leave, 1, FAIL, up) and an end row.
- H: flapping, three failures within 40 s, then up until 100,000 s.
"""

from __future__ import annotations

import pytest

from shoal.churn.job import run
from tests.spark.conftest import job_args, read_csv

pytestmark = pytest.mark.spark
T0 = 1_767_225_600
TRUTH_EVENTS = [
    (0, "A", "down"), (100, "A", "up"), (1000, "A", "down"), (1300, "A", "up"), (2000, "A", "end"),
    (0, "B", "up"), (500, "B", "down"), (600, "B", "up"), (1500, "B", "down"),
    (200, "C", "down"), (260, "C", "up"),
    (0, "D", "up"), (400, "D", "down"), (400, "D", "up"), (900, "D", "down"), (950, "D", "up"),
    (1200, "D", "end"),
    (0, "E", "up"), (300, "E", "down"), (300, "E", "down"), (350, "E", "down"), (500, "E", "up"),
    (700, "F", "fail"),
    (0, "G", "join"), (100, "G", "leave"), (200, "G", "1"), (300, "G", "FAIL"), (400, "G", "up"),
    (500, "G", "end"),
    (0, "H", "up"), (10, "H", "down"), (20, "H", "up"), (30, "H", "dead"), (40, "H", "up"),
    (50, "H", "failed"), (60, "H", "up"), (100_000, "H", "end"),
]  # fmt: skip
BAD_LINES = ["garbage", "x,A,up", f"{T0 + 5},,up", f"{T0 + 6},A,exploded"]
SESSIONS = [900, 500, 900, 400, 500, 300, 100, 100, 10, 10, 10]  # start and end seen
DOWNTIMES = [100, 300, 100, 60, 0, 50, 200, 100, 100, 10, 10, 10]
UP = {"A": 1600, "B": 1400, "C": 0, "D": 1150, "E": 300, "F": 0, "G": 300, "H": 99970}
DOWN = {"A": 400, "B": 100, "C": 60, "D": 50, "E": 200, "F": 0, "G": 200, "H": 30}
FAILURES = {"A": 2, "B": 2, "C": 1, "D": 2, "E": 1, "F": 1, "G": 1, "H": 3}
REPAIR_S = 100 + 300 + 100 + 60 + 0 + 50 + 200 + 100 + 30  # after failures, repaired: 11


def truth_csv(path):
    lines = ["timestamp,node,event", *[f"{T0 + s},{n},{e}" for s, n, e in TRUTH_EVENTS]]
    path.write_text("\n".join(lines + BAD_LINES) + "\n")
    return path


def nearest_rank(values, q):
    ordered = sorted(values)
    return float(ordered[max(0, -(-int(q * 100) * len(ordered) // 100) - 1)])


EXPECTED = {
    "input_format": "events-csv", "nodes": 8, "events": 37, "bad_lines": 4,
    "sessions_completed": 11, "sessions_zero_length": 0,
    "session_mean_s": round(sum(SESSIONS) / 11, 3),
    "session_p50_s": nearest_rank(SESSIONS, 0.5), "session_p90_s": nearest_rank(SESSIONS, 0.9),
    "session_p99_s": nearest_rank(SESSIONS, 0.99),
    "downtimes_completed": 12, "downtimes_zero_length": 1,
    "downtime_mean_s": round(sum(DOWNTIMES) / 12, 3),
    "downtime_p50_s": nearest_rank(DOWNTIMES, 0.5), "downtime_p90_s": nearest_rank(DOWNTIMES, 0.9),
    "downtime_p99_s": nearest_rank(DOWNTIMES, 0.99),
    "up_total_s": sum(UP.values()), "down_total_s": sum(DOWN.values()),
    "failures": 13, "repairs": 11, "leaves": 1,
    "mtbf_s": round(sum(UP.values()) / 13, 3), "mttr_s": round(REPAIR_S / 11, 3),
    "availability_ratio": round(sum(UP.values()) / (sum(UP.values()) + sum(DOWN.values())), 6),
    # Per node, for the six seen up at all (C and F were only ever down).
    "availability_mean_ratio": round(sum(UP[n] / (UP[n] + DOWN[n]) for n in "ABDEGH") / 6, 6),
    "nodes_without_availability": 2,
    "failures_per_node_day": round(13 / ((sum(UP.values()) + sum(DOWN.values())) / 86400), 6),
    "flapping_nodes": 1,
    "censored": {"sessions_end_unseen": 6,  # A D G H, and C E whose record ends on a repair
                 "downtimes_end_unseen": 2,  # B F
                 "downtimes_start_unseen": 0, "nodes_first_event_down": 3, "nodes_seen_once": 1},
    "excluded": {"repeated_status_events": 2, "nodes_without_status_events": 0},
}  # fmt: skip


def check_truth(summary, out):
    """The summary and the per-node table hold exactly the hand figures."""
    got = {k: summary[k] for k in EXPECTED}
    assert got == EXPECTED
    nodes = {r["node"]: r for r in read_csv(out / "csv" / "nodes.csv")}
    assert sorted(nodes) == list("ABCDEFGH")  # nobody vanished, not even F (seen once)
    for n, row in nodes.items():
        assert (float(row["up_s"]), float(row["down_s"])) == (UP[n], DOWN[n]), n
        assert int(row["failures"]) == FAILURES[n], n
        assert (row["flapping"] == "true") == (n == "H"), n
    assert nodes["C"]["availability"] == "" and nodes["F"]["availability"] == ""
    assert float(nodes["A"]["availability"]) == 0.8 and float(nodes["E"]["availability"]) == 0.6
    assert int(nodes["H"]["max_failures_in_window"]) == 3


@pytest.fixture(scope="module")
def truth_report(spark, tmp_path_factory):
    base = tmp_path_factory.mktemp("truth")
    out = base / "out"
    summary = run(job_args(truth_csv(base / "truth.csv"), out, "--format", "events-csv"))
    return summary, out


def test_every_censoring_case_matches_the_hand_figures_exactly(truth_report):
    check_truth(*truth_report)


def test_censored_intervals_are_in_the_tables_but_never_measured(truth_report):
    _, out = truth_report
    sessions = read_csv(out / "csv" / "sessions.csv")
    open_ = sorted((r["node"], float(r["length_s"])) for r in sessions if r["complete"] == "false")
    assert open_ == [("A", 700), ("C", 0), ("D", 250), ("E", 0), ("G", 100), ("H", 99940)]
    downtimes = read_csv(out / "csv" / "downtimes.csv")
    assert sorted(r["node"] for r in downtimes if r["complete"] == "false") == ["B", "F"]


def test_a_report_of_an_imported_trace_says_what_it_cannot_show(truth_report):
    _, out = truth_report
    page = (out / "report.html").read_text()
    assert "observers' history logs" not in page and "false / all suspicions" not in page
    assert "Not shown: these need shoal's own history logs" in page
    assert "1 lasted no time at all" in page  # the zero-length downtime, counted apart
    assert "What was counted, censored and left out" in page and "MTBF" in page
    assert page.count("data:image/png;base64,") == 5  # size, 2 histograms, failures, availability


def test_an_intervals_trace_is_merged_and_censored_the_same_way(spark, tmp_path):
    """p: down 0-100 and 50-150 (overlapping: one downtime 0-150), a
    zero-length one at 1000, one 2000-2100 (state left empty: down). q: up
    0-500, down 500-600, up 600-1000 (its last: the end of observation, not
    a failure). A row whose stop is before its start is bad."""
    rows = [
        "host,begin,end,state",
        "p,0,100,down",
        "p,50,150,DOWN",
        "p,1000,1000,down",
        "p,2000,2100,",
        "q,0,500,up",
        "q,500,600,down",
        "q,600,1000,up",
        "r,100,50,down",
    ]
    lines = [rows[0]] + [
        ",".join([r.split(",")[0], *(str(T0 + int(x)) for x in r.split(",")[1:3]), r.split(",")[3]])
        for r in rows[1:]
    ]
    path = tmp_path / "intervals.csv"
    path.write_text("\n".join(lines) + "\n")
    s = run(job_args(path, tmp_path / "out", "--format", "intervals"))
    assert s["excluded"]["overlapping_intervals_merged"] == 1 and s["bad_lines"] == 1
    assert (s["failures"], s["repairs"], s["downtimes_zero_length"]) == (4, 4, 1)
    assert (s["up_total_s"], s["down_total_s"]) == (850 + 1000 + 500 + 400, 150 + 100 + 100)
    assert s["sessions_completed"] == 3 and s["downtimes_completed"] == 4
    assert s["mttr_s"] == 87.5 and s["censored"]["sessions_end_unseen"] == 2


def test_the_page_loads_in_a_real_browser_with_every_image_and_no_console_error(truth_report):
    """Debian's chromium, driven by Selenium: every <img> decoded, nothing
    in the console. CI must have it; elsewhere a missing browser skips."""
    import os
    import shutil

    from tests.conftest import IN_CI

    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    driver_bin = shutil.which("chromedriver")
    try:
        from selenium import webdriver
    except ImportError:
        webdriver = None
    if chromium is None or driver_bin is None or webdriver is None:
        why = ("needs chromium, chromium-driver (apt-get install -y chromium chromium-driver) "
               f"and selenium (pip); found chromium={chromium}, chromedriver={driver_bin}, "
               f"selenium={'yes' if webdriver else 'no'}")  # fmt: skip
        if IN_CI:
            pytest.fail(f"CI=true but the browser check cannot run: {why}")
        pytest.skip(why)
    _, out = truth_report
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for arg in ("--headless=new", "--disable-gpu", "--no-sandbox" if os.geteuid() == 0 else ""):
        if arg:
            options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    service = webdriver.ChromeService(executable_path=driver_bin)
    browser = webdriver.Chrome(options=options, service=service)
    try:
        browser.get((out / "report.html").as_uri())
        images = browser.execute_script(
            "return Array.from(document.images).map(i => [i.alt, i.complete, i.naturalWidth])"
        )
        errors = [e for e in browser.get_log("browser") if e["level"] in ("SEVERE", "ERROR")]
    finally:
        browser.quit()
    assert len(images) == 5
    assert [alt for alt, done, width in images if not (done and width > 0)] == []
    assert errors == []
