"""The churn job on a real Spark standalone cluster (master and worker from
the pyspark package, on loopback), submitted with spark-submit: the same
figures as local mode."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from shoal.churn.job import run
from tests.conftest import poll_until
from tests.spark.conftest import job_args, summary_of
from tests.spark.test_churn_censoring import check_truth, truth_csv
from tests.spark.test_churn_job import three_nodes

pytestmark = pytest.mark.spark
ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def standalone(tmp_path):
    import pyspark

    home = Path(pyspark.__file__).parent
    env = {**os.environ, "SPARK_HOME": str(home), "SPARK_LOCAL_IP": "127.0.0.1",
           "SPARK_LOG_DIR": str(tmp_path), "SPARK_WORKER_DIR": str(tmp_path / "work")}  # fmt: skip
    port, ui = free_port(), free_port()
    cls = str(home / "bin" / "spark-class")
    log = open(tmp_path / "cluster.log", "wb")
    master = subprocess.Popen([cls, "org.apache.spark.deploy.master.Master", "--host",
                               "127.0.0.1", "--port", str(port), "--webui-port", str(ui)],
                              env=env, stdout=log, stderr=log)  # fmt: skip
    url = f"spark://127.0.0.1:{port}"
    worker = subprocess.Popen([cls, "org.apache.spark.deploy.worker.Worker", url, "--host",
                               "127.0.0.1", "--cores", "1", "--memory", "1g",
                               "--webui-port", str(free_port())],
                              env=env, stdout=log, stderr=log)  # fmt: skip

    def alive_workers() -> int:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{ui}/json", timeout=2) as r:
                return int(json.loads(r.read())["aliveworkers"])
        except OSError:
            return 0

    try:
        poll_until(alive_workers, 90, interval_s=0.5)
        yield url, home, env
    finally:
        for p in (worker, master):
            p.terminate()
        for p in (worker, master):
            try:
                p.wait(20)
            except subprocess.TimeoutExpired:
                p.kill()
        log.close()


def test_spark_submit_on_a_standalone_cluster_gives_the_local_figures(spark, standalone,
                                                                       tmp_path):  # fmt: skip
    url, home, env = standalone
    history = three_nodes().write(tmp_path / "logs")
    local = run(job_args(history, tmp_path / "local"))
    env = {**env, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    out = tmp_path / "cluster"
    done = subprocess.run([str(home / "bin" / "spark-submit"), "--master", url,
                           str(ROOT / "churn" / "job.py"), "--history", str(history),
                           "--out", str(out)],
                          env=env, capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert summary_of(out) == local
    assert (out / "report.html").exists()
    # The hand-built censoring truth set: the same exact figures on the cluster.
    truth_out = tmp_path / "truth"
    done = subprocess.run([str(home / "bin" / "spark-submit"), "--master", url,
                           str(ROOT / "churn" / "job.py"), "--format", "events-csv",
                           "--history", str(truth_csv(tmp_path / "truth.csv")),
                           "--out", str(truth_out)],
                          env=env, capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    check_truth(summary_of(truth_out), truth_out)
