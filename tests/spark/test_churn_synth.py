"""The churn job on a synthetic trace shaped like the public failure
archives (churn/synth.py: every node's record begins with a failure and
ends with its repair, a quarter of the nodes fail once): its figures are
the trace's own, worked out by the generator from the input's intervals,
with and without each node's final repair."""

from __future__ import annotations

import pytest

from shoal.churn.job import run
from shoal.churn.synth import failure_trace
from tests.spark.conftest import job_args

pytestmark = pytest.mark.spark


@pytest.mark.parametrize("final_repair", [True, False])
def test_a_failure_archive_shaped_trace_gives_its_own_figures(spark, tmp_path, final_repair):
    truth = failure_trace(tmp_path / "trace.csv", nodes=200, years=3, seed=5,
                          final_repair=final_repair)  # fmt: skip
    s = run(job_args(tmp_path / "trace.csv", tmp_path / "out", "--format", "events-csv"))
    assert s["nodes"] == 200  # none vanished
    assert s["censored"]["nodes_first_event_down"] == 200
    assert (s["failures"], s["repairs"]) == (truth["failures"], truth["repairs"])
    assert s["up_total_s"] == truth["up_s"] and s["down_total_s"] == truth["down_s"]
    assert s["availability_ratio"] == round(truth["availability_ratio"], 6)
    assert s["mttr_s"] == round(truth["mttr_s"], 3)
    assert s["mtbf_s"] == round(truth["mtbf_s"], 3)
    unrepaired = s["censored"]["downtimes_end_unseen"]
    assert unrepaired == (0 if final_repair else 200)
