"""`shoal churn` on what a simulated 200-node cluster with churn wrote, checked
against what the simulator knows really happened.

Both commands run as a user runs them (subprocesses). A crash is seen one
probe round late (the first suspicion), so a session that ends in a crash
reads a second or two long and the downtime after it as much short: each
one is matched to the truth within that bound, and the totals and means
within 1 %.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.spark.conftest import read_csv

pytestmark = pytest.mark.spark
SHOAL = [sys.executable, "-m", "shoal.daemon.cli"]
ROOT = Path(__file__).resolve().parents[2]
# The wait for the first probe of a crashed member. Each live member probes
# one member a second, and each member once per pass, so a member is probed
# at about (probers / members probed) per second: about 1/s, less under churn,
# where probers also spend their slots on crashed members not yet detected and
# Lifeguard stretches the intervals of probers whose relays died unnoticed.
# The wait is then roughly exponential: traced on this run (seed 3), the
# probes of node-00067 ran at 0.4-0.9/s in the 100 s before its crash, and
# the crash waited 9.4 s. Over 172 crashes: median 1.75 s, 90th percentile
# 3.5 s, three over 5 s (5.2, 5.5, 9.4). The bound covers such a tail.
DETECTION_BOUND_S = 15.0


@pytest.fixture(scope="module")
def churned(tmp_path_factory):
    base = tmp_path_factory.mktemp("sim")
    logs, out = base / "logs", base / "out"
    sim = subprocess.run(
        [*SHOAL, "simulate", "--nodes", "200", "--duration", "900", "--seed", "3",
         "--session-mean", "480", "--downtime-mean", "480", "--history-out", str(logs)],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert sim.returncode == 0, sim.stderr
    job = subprocess.run([*SHOAL, "churn", "--history", str(logs), "--out", str(out)],
                         cwd=ROOT, capture_output=True, text=True, timeout=600)  # fmt: skip
    assert job.returncode == 0, job.stderr
    truth = json.loads((logs / "truth.json").read_text())
    return truth, json.loads((out / "summary.json").read_text()), out, job.stderr


def _close(observed: float, true: float, rel: float) -> bool:
    return abs(observed - true) <= rel * true


def test_every_session_and_downtime_is_found(churned):
    truth, s, _, _ = churned
    assert s["nodes"] == 200
    assert s["sessions_completed"] == len(truth["sessions"]) > 150
    assert s["downtimes_completed"] == len(truth["downtimes"]) > 80


def test_sessions_and_downtimes_match_the_ground_truth_within_1_percent(churned):
    truth, s, out, _ = churned
    for table, key in (("sessions", "session"), ("downtimes", "downtime")):
        true = [x["length_s"] for x in truth[table]]
        rows = [r for r in read_csv(out / "csv" / f"{table}.csv") if r["complete"] == "true"]
        seen = [float(r["length_s"]) for r in rows]
        assert _close(sum(seen), sum(true), 0.01), table
        assert _close(s[f"{key}_mean_s"], sum(true) / len(true), 0.01), table
        # One by one. Starts (of sessions) and ends (of downtimes) are restarts,
        # which the restarted node logs itself, to the millisecond.
        base = truth["wall_base_s"]
        edge = "start" if table == "sessions" else "end"
        by_edge = {(r["node"], round(int(r[f"{edge}_ms"]) / 1000 - base)): float(r["length_s"])
                   for r in rows}  # fmt: skip
        for x in truth[table]:
            near = [by_edge.get((x["node"], round(x[f"{edge}_s"]) + d)) for d in (-1, 0, 1)]
            found = [v for v in near if v is not None]
            assert found, (table, x)
            assert min(abs(v - x["length_s"]) for v in found) <= DETECTION_BOUND_S, (table, x)


def test_failures_and_leaves_are_told_apart(churned):
    truth, s, _, _ = churned
    causes = [d["cause"] for d in truth["downtimes"]]
    assert s["leaves"] >= causes.count("left")  # the last leave of a node may not be back yet
    assert s["failures"] >= causes.count("crash")


def test_news_spreads_in_seconds_and_the_terminal_stays_readable(churned):
    _, s, _, stderr = churned
    assert 0 < s["dissemination_p50_s"] < 1.0
    assert s["dissemination_p99_s"] < 5.0
    noise = [line for line in stderr.splitlines()
             if line.strip() and not line.startswith("churn [")
             and "incubator modules" not in line]  # fmt: skip
    assert noise == []
    assert "churn [" in stderr and "report in" in stderr
