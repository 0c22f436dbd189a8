"""The membership history log: every change an agent observes, one JSON
object per line, for `shoal history` and the churn job (docs/history.md).

This module holds the schema (`SCHEMA_VERSION`, `FIELDS`, `EVENTS`), which
the churn job imports without the cores, and the IO: `HistoryWriter`
appends rows from a thread of its own, so the event loop only enqueues, and
`read_history` reads them back. Rows are built from core events above the
cores, in `node/history.py`.

The current file is `history.jsonl`; it rotates by size and by age into
`history-<first event, UTC>-<n>.jsonl.gz`, and rotated files older than the
retention are removed. `close()` writes everything queued before it returns,
so a clean shutdown loses nothing; each batch is flushed to the kernel as it
is written, so a killed agent loses at most what was still queued.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import msgspec

# Version 2 (issue 23) names events as `shoal monitor`, handlers and watches
# do (`member-joined`, `member-failed`, ...); version 1 used short words
# (`join`, `dead`, ...). Readers accept both (docs/history.md, "Changes").
SCHEMA_VERSION = 2
SUPPORTED_VERSIONS = (1, 2)
CURRENT = "history.jsonl"
ROTATED_GLOB = "history-*.jsonl.gz"
# Every row has every field, in this order; absent values are null. The
# churn job's Spark schema is built from this list (churn/schema.py).
FIELDS: tuple[tuple[str, str], ...] = (
    ("v", "int"),  # schema version
    ("ts_ms", "long"),  # observer's wall clock, UTC, milliseconds
    ("cluster", "string"),
    ("observer", "string"),  # who wrote the row
    ("observer_id", "string"),  # its node id, hex
    ("event", "string"),  # one of EVENTS
    ("node", "string"),  # the subject: name, id, gossip address
    ("node_id", "string"),
    ("address", "string"),
    ("incarnation", "long"),
    ("source", "string"),  # suspected/failed: who raised it; refuted: who had suspected
    # voter-replaced: the old data directory's id (node_id: the new one)
    ("epoch", "long"),  # controller events
    ("tags", "map"),  # member-joined and member-updated
)
FIELD_NAMES = tuple(name for name, _ in FIELDS)
# member-joined: became alive (new, or back after failed/left);
# member-refuted: refuted a suspicion; member-updated: tags or address
# changed; member-reaped: forgotten after its reap timeout; controller-*: the
# observer itself became or stopped being controller, with the epoch;
# voter-replaced: the observer, as controller, saw a voter come back with a
# new data directory (its old id leaves the voter set).
EVENTS = ("member-joined", "member-refuted", "member-suspected", "member-failed",
          "member-left", "member-updated", "member-reaped", "controller-elected",
          "controller-lost", "voter-replaced")  # fmt: skip
# Schema 1's words for the same events, in the same order (schema 1 never
# wrote `voter_replaced`: it is the churn job's code for the newer row).
EVENTS_V1 = ("join", "alive", "suspect", "dead", "left", "update", "reap",
             "controller_elected", "controller_lost", "voter_replaced")  # fmt: skip


class HistoryConfig(msgspec.Struct, frozen=True):
    """`[history]`: when the log rotates and how long rotated files stay."""

    max_file_mb: float = 64.0
    rotate_hours: float = 24.0
    retention_days: float = 30.0

    def __post_init__(self) -> None:
        for name in self.__struct_fields__:
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")


def encode_row(row: dict[str, Any]) -> str:
    """One line of the log (no newline)."""
    return json.dumps(row, separators=(",", ":"), ensure_ascii=False)


# -- the writer (IO) ----------------------------------------------------------------------

_CLOSE = object()


class HistoryWriter:
    """Appends rows to `directory` from its own thread.

    `write` never blocks (an unbounded queue: rows are small and arrive at
    gossip speed); `written` counts rows on disk, `errors` failed writes
    (a full disk is logged by the caller through `on_error`, not fatal).
    """

    def __init__(
        self,
        directory: Path,
        config: HistoryConfig | None = None,
        on_error: Callable[[str], None] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.directory = Path(directory)
        self.config = config or HistoryConfig()
        self.on_error = on_error or (lambda message: None)
        self.clock = clock
        self.written = 0
        self.rotations = 0
        self.errors = 0
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self.directory.mkdir(parents=True, exist_ok=True)
        self._file: Any = None
        self._size = 0
        self._opened_ms = 0
        self._thread = threading.Thread(target=self._run, name="shoal-history", daemon=True)
        self._thread.start()

    def write(self, row: dict[str, Any]) -> None:
        """Queue one row (from the event loop: returns at once)."""
        self._queue.put(row)

    def reconfigure(self, config: HistoryConfig) -> None:
        """New limits, applied from the next row on."""
        self.config = config

    def close(self, timeout_s: float = 10.0) -> None:
        """Write what is queued, close the file, stop the thread."""
        if self._thread.is_alive():
            self._queue.put(_CLOSE)
            self._thread.join(timeout_s)

    # -- the thread -----------------------------------------------------------------------

    def _run(self) -> None:
        done = False
        while not done:
            batch = [self._queue.get()]
            with contextlib.suppress(queue.Empty):
                while len(batch) < 4096:
                    batch.append(self._queue.get_nowait())
            rows = [r for r in batch if r is not _CLOSE]
            done = len(rows) < len(batch)
            try:
                self._append(rows)
            except OSError as exc:
                self.errors += len(rows)
                self.on_error(f"history log: {exc}")
                self._file = None
        if self._file is not None:
            self._file.close()

    def _append(self, rows: list[dict[str, Any]]) -> None:
        for row in rows:
            line = (encode_row(row) + "\n").encode()
            if self._file is None:
                self._open()
            if self._due(len(line)):
                self._rotate()
                self._open()
            if self._size == 0:
                self._opened_ms = int(row.get("ts_ms") or self.clock() * 1000)
            self._file.write(line)
            self._size += len(line)
            self.written += 1
        if self._file is not None:
            self._file.flush()

    def _due(self, incoming: int) -> bool:
        cfg = self.config
        if self._size and self._size + incoming > cfg.max_file_mb * 1_000_000:
            return True
        age_ms = self.clock() * 1000 - self._opened_ms
        return bool(self._size) and age_ms > cfg.rotate_hours * 3_600_000

    def _open(self) -> None:
        path = self.directory / CURRENT
        self._file = open(path, "ab")  # noqa: SIM115 - held open across batches
        self._size = path.stat().st_size
        if self._size:
            self._opened_ms = _first_ts_ms(path) or int(path.stat().st_mtime * 1000)
        self._prune()

    def _rotate(self) -> None:
        self._file.close()
        self._file = None
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(self._opened_ms / 1000))
        n = 1  # names sort in time order, rotations within one second too
        target = self.directory / f"history-{stamp}-{n:03d}.jsonl.gz"
        while target.exists():
            n += 1
            target = self.directory / f"history-{stamp}-{n:03d}.jsonl.gz"
        current = self.directory / CURRENT
        partial = target.with_suffix(".gz.part")
        import gzip  # (gzip and shutil: not at module level, to keep the start light)
        import shutil

        with open(current, "rb") as src, gzip.open(partial, "wb") as dst:
            shutil.copyfileobj(src, dst)
        os.replace(partial, target)
        current.unlink()
        self._size = 0
        self.rotations += 1

    def _prune(self) -> None:
        horizon = self.clock() - self.config.retention_days * 86_400
        for path in self.directory.glob(ROTATED_GLOB):
            with contextlib.suppress(OSError):
                if path.stat().st_mtime < horizon:
                    path.unlink()


def _first_ts_ms(path: Path) -> int | None:
    with contextlib.suppress(OSError, ValueError, TypeError, AttributeError):
        with open(path, "rb") as f:
            return int(json.loads(f.readline())["ts_ms"])
    return None


# -- reading (for `shoal history`) --------------------------------------------------------


class ReadStats(msgspec.Struct):
    """What `read_history` skipped."""

    bad_lines: int = 0


def history_files(directory: Path) -> list[Path]:
    """Rotated files oldest first, then the current one."""
    rotated = sorted(Path(directory).glob(ROTATED_GLOB))
    current = Path(directory) / CURRENT
    return rotated + ([current] if current.exists() else [])


def read_history(directory: Path, stats: ReadStats | None = None) -> Iterator[dict[str, Any]]:
    """Every row in `directory`, oldest file first; bad lines are counted in
    `stats` and skipped."""
    import gzip

    stats = stats if stats is not None else ReadStats()
    for path in history_files(directory):
        opener: Any = gzip.open if path.suffix == ".gz" else open
        try:
            with opener(path, "rt", encoding="utf-8", errors="replace") as f:
                for line in f:
                    row = _parse_line(line)
                    if row is None:
                        stats.bad_lines += 1
                    else:
                        yield row
        except (OSError, EOFError):
            stats.bad_lines += 1  # a truncated gzip member: keep what was read


def _parse_line(line: str) -> dict[str, Any] | None:
    try:
        row = json.loads(line)
    except ValueError:
        return None
    if not isinstance(row, dict) or not isinstance(row.get("ts_ms"), int):
        return None
    if not isinstance(row.get("event"), str) or not isinstance(row.get("node"), str):
        return None
    return row
