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
from shoal.storage.history import EVENTS, EVENTS_V1, encode_row

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
    """Rows of several observers, written one file per observer. Events are
    given in schema 1's short words (`join`, `dead`); rows are written as
    today's agent writes them (schema 2: `member-joined`, ...), except the
    observers in `v1_observers`, written as an agent of schema 1 did."""

    def __init__(self, cluster: str = "test", v1_observers: frozenset[str] = frozenset()) -> None:
        self.cluster = cluster
        self.v1_observers = v1_observers
        self.rows: dict[str, list[dict[str, Any]]] = {}

    def add(self, observer: str, t_s: float, event: str, node: str, incarnation: int = 1,
            source: str | None = None, epoch: int | None = None) -> None:  # fmt: skip
        from shoal.membership.member import MemberState, MemberView

        obs = Observer(self.cluster, observer, observer.encode().hex())
        ts = T0_MS + round(t_s * 1000)
        view = MemberView(node, node.encode(), ("10.0.0.1", 7946), {}, incarnation,
                          MemberState.ALIVE)  # fmt: skip
        v1 = observer in self.v1_observers
        name = event if v1 else dict(zip(EVENTS_V1, EVENTS, strict=True)).get(event, event)
        row = member_row(obs, ts, name, view, source)
        if v1:
            row["v"] = 1
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
