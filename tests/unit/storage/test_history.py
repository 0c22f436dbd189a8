"""The history writer: rows on disk, rotation by size and age, gzip,
retention, nothing lost on close, bad lines skipped on reading."""

from __future__ import annotations

import gzip
import json
import os
import time

from shoal.storage.history import (
    FIELD_NAMES,
    SCHEMA_VERSION,
    HistoryConfig,
    HistoryWriter,
    ReadStats,
    read_history,
)

# A "member-failed" row as node/history.py builds it (the writer does not read rows).
ROW = {**dict.fromkeys(FIELD_NAMES), "v": SCHEMA_VERSION, "cluster": "prod", "observer": "n1",
       "observer_id": "aa" * 16, "event": "member-failed", "node": "n2", "node_id": "02" * 16,
       "address": "10.0.0.2:7946", "incarnation": 7, "source": "n3"}  # fmt: skip


def rows(n: int, t0: int = 1_800_000_000_000) -> list[dict]:
    return [{**ROW, "ts_ms": t0 + i} for i in range(n)]


def test_close_writes_everything_queued(tmp_path):
    w = HistoryWriter(tmp_path)
    for row in rows(5000):
        w.write(row)
    w.close()
    got = list(read_history(tmp_path))
    assert len(got) == 5000 and w.written == 5000
    assert [r["ts_ms"] for r in got] == sorted(r["ts_ms"] for r in got)


def test_rotates_by_size_into_gzip_and_reads_back_in_order(tmp_path):
    w = HistoryWriter(tmp_path, HistoryConfig(max_file_mb=0.05))  # 50 kB
    for row in rows(1000):
        w.write(row)
    w.close()
    rotated = sorted(tmp_path.glob("history-*.jsonl.gz"))
    assert len(rotated) >= 4 and w.rotations == len(rotated)
    with gzip.open(rotated[0], "rt") as f:
        first = json.loads(f.readline())
    assert first["ts_ms"] == 1_800_000_000_000
    assert all(p.stat().st_size < 50_000 for p in rotated)
    got = [r["ts_ms"] for r in read_history(tmp_path)]
    assert got == [r["ts_ms"] for r in rows(1000)]


def test_rotates_by_age(tmp_path):
    start = (int(time.time()) // 3600 - 2) * 3600  # two hours ago, on the hour
    now = [float(start)]
    w = HistoryWriter(tmp_path, HistoryConfig(rotate_hours=1), clock=lambda: now[0])
    w.write(rows(1, t0=int(now[0] * 1000))[0])
    w.close()
    now[0] += 3601
    w = HistoryWriter(tmp_path, HistoryConfig(rotate_hours=1), clock=lambda: now[0])
    w.write(rows(1, t0=int(now[0] * 1000))[0])
    w.close()
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(start))
    assert [p.name for p in tmp_path.glob("history-*.jsonl.gz")] == [
        f"history-{stamp}-001.jsonl.gz"
    ]
    assert len(list(read_history(tmp_path))) == 2


def test_retention_removes_old_rotated_files(tmp_path):
    old = tmp_path / "history-20200101T000000Z.jsonl.gz"
    keep = tmp_path / "history-20270101T000000Z.jsonl.gz"
    for p in (old, keep):
        with gzip.open(p, "wt") as f:
            f.write("")
    os.utime(old, (1_000_000_000, 1_000_000_000))
    w = HistoryWriter(tmp_path, HistoryConfig(retention_days=30))
    w.write(rows(1)[0])
    w.close()
    assert not old.exists() and keep.exists()


def test_bad_lines_are_counted_and_skipped(tmp_path):
    good = json.dumps(rows(1)[0])
    (tmp_path / "history.jsonl").write_text(
        f'{good}\nnot json\n[1, 2]\n{{"ts_ms": "soon", "event": "join"}}\n{good}\n'
    )
    stats = ReadStats()
    assert len(list(read_history(tmp_path, stats))) == 2
    assert stats.bad_lines == 3


def test_a_write_error_is_reported_not_raised(tmp_path):
    errors: list[str] = []
    target = tmp_path / "h"
    w = HistoryWriter(target, on_error=errors.append)
    (target / "history.jsonl").mkdir()  # the log's path is taken by a directory
    w.write(rows(1)[0])
    w.close()
    assert errors and "history log" in errors[0] and w.errors == 1
