"""One local[2] Spark session for the whole directory (a session costs ~5 s),
and helpers to write hand-built histories."""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from shoal.churn.job import LOG4J, add_arguments
from shoal.node.history import Observer, member_row
from shoal.storage.history import encode_row

T0_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z


@pytest.fixture(scope="session")
def spark():
    if shutil.which("java") is None:
        pytest.fail("Spark needs Java (the README's set-up installs it)")
    from pyspark.sql import SparkSession

    session = (
        SparkSession.builder.master("local[2]")
        .appName("shoal-tests")
        .config("spark.driver.memory", "1g")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.extraJavaOptions", f"-Dlog4j2.configurationFile=file:{LOG4J}")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


def job_args(history: Path | str, out: Path, *extra: str) -> argparse.Namespace:
    """The job's arguments, as `shoal churn` would parse them."""
    p = argparse.ArgumentParser()
    add_arguments(p)
    return p.parse_args(["--history", str(history), "--out", str(out), *extra])


class HistoryBuilder:
    """Rows of several observers, written one file per observer."""

    def __init__(self, cluster: str = "test") -> None:
        self.cluster = cluster
        self.rows: dict[str, list[dict[str, Any]]] = {}

    def add(self, observer: str, t_s: float, event: str, node: str, incarnation: int = 1,
            source: str | None = None, epoch: int | None = None) -> None:  # fmt: skip
        from shoal.membership.member import MemberState, MemberView

        obs = Observer(self.cluster, observer, observer.encode().hex())
        ts = T0_MS + round(t_s * 1000)
        view = MemberView(node, node.encode(), ("10.0.0.1", 7946), {}, incarnation,
                          MemberState.ALIVE)  # fmt: skip
        row = member_row(obs, ts, event, view, source)
        if epoch is not None:
            row.update(node=observer, node_id=obs.node_id, address=None, incarnation=None,
                       epoch=epoch, tags=None)  # fmt: skip
        self.rows.setdefault(observer, []).append(row)

    def write(self, directory: Path, extra_lines: dict[str, list[str]] | None = None) -> Path:
        directory.mkdir(parents=True, exist_ok=True)
        for observer, rows in self.rows.items():
            lines = [encode_row(r) for r in sorted(rows, key=lambda r: r["ts_ms"])]
            lines += (extra_lines or {}).get(observer, [])
            (directory / f"{observer}.history.jsonl").write_text("\n".join(lines) + "\n")
        return directory


def read_csv(path: Path) -> list[dict[str, str]]:
    import csv

    with open(path) as f:
        return list(csv.DictReader(f))


def summary_of(out: Path) -> dict[str, Any]:
    return json.loads((out / "summary.json").read_text())
