"""`shoal history` (the local log) and `shoal churn` (the Spark report)."""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from shoal.kernel.errors import ConfigError


def add_parsers(sub: Any) -> None:
    """The two subcommands' flags."""
    hist = sub.add_parser("history", help="print membership events from this node's history log")
    hist.add_argument("--config", help="TOML config file, for its data_dir (or $SHOAL_CONFIG)")
    hist.add_argument("--data-dir", dest="data_dir", help="the agent's state directory")
    hist.add_argument("--since", help="ISO-8601 time (UTC if no zone), or an age: 30m, 12h, 7d")
    hist.add_argument("--node", help="only events about this node")
    hist.add_argument("--limit", type=int, default=0, help="only the last N events")
    hist.add_argument("--json", action="store_true", help="print the rows as JSON Lines")
    churn = sub.add_parser("churn", help="run the Spark churn report over history logs")
    from shoal.churn.job import add_arguments

    add_arguments(churn)


def history_command(args: argparse.Namespace) -> int:
    """Print the local history, oldest first."""
    from shoal.churn.job import parse_time
    from shoal.daemon import config as config_mod
    from shoal.storage.history import ReadStats, read_history

    if args.limit < 0:
        raise ConfigError("--limit: expected a positive number")
    try:
        since = parse_time(args.since)
    except ValueError as exc:
        raise ConfigError(f"--since: {exc}") from None
    cfg = config_mod.load({"config": args.config, "data_dir": args.data_dir, "node_name": "-"})
    directory = Path(cfg.data_dir) / "history"
    if not directory.is_dir():
        raise ConfigError(f"no history log in {directory} (is --data-dir right?)")
    stats = ReadStats()
    rows: Iterator[dict[str, Any]] = (r for r in read_history(directory, stats)
            if (since is None or r["ts_ms"] >= since)
            and (args.node is None or r.get("node") == args.node))  # fmt: skip
    if args.limit:
        from collections import deque

        rows = iter(deque(rows, maxlen=args.limit))
    for row in rows:
        print(json.dumps(row) if args.json else format_row(row), flush=False)
    if stats.bad_lines:
        import sys

        print(f"shoal history: skipped {stats.bad_lines} bad lines", file=sys.stderr)
    return 0


def format_row(row: dict[str, Any]) -> str:
    """One event as a line of text."""
    when = datetime.fromtimestamp(row["ts_ms"] / 1000, UTC).isoformat(timespec="milliseconds")
    event, node = row.get("event"), row.get("node")
    text = f"{when.replace('+00:00', 'Z')}  {row.get('observer', '?'):<16} {event:<19} {node}"
    if row.get("incarnation") is not None:
        text += f" (incarnation {row['incarnation']})"
    if row.get("epoch") is not None:
        text += f" epoch {row['epoch']}"
    if row.get("source"):
        text += f" by {row['source']}" if event in ("suspect", "dead", "alive") else \
            f" ({row['source']})"
    if row.get("tags"):
        text += " tags " + ",".join(f"{k}={v}" for k, v in sorted(row["tags"].items()))
    return text


def churn_command(args: argparse.Namespace) -> int:
    """Run the Spark job in-process (local mode unless --master)."""
    from shoal.churn.job import run

    if args.top < 1:
        raise ConfigError("--top: expected a positive number")
    try:
        summary = run(args)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    print(json.dumps(summary, indent=2))
    return 0
