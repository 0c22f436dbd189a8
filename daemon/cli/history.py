"""`shoal history` (the local log) and `shoal churn` (the Spark report)."""

from __future__ import annotations

import argparse
import json
import os
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
    verbs = hist.add_subparsers(dest="history_command", metavar="{collect}")
    collect = verbs.add_parser(
        "collect",
        help="copy every live member's history log into "
        "DIR/<node>/ through the agents' API (resumable)",
    )
    collect.add_argument("--out", required=True, help="local directory, one folder per node")
    collect.add_argument("--api", default=os.environ.get("SHOAL_API", "127.0.0.1:7947"),
                         help="the local agent's API, for the member list (default "
                         "%(default)s, or $SHOAL_API)")  # fmt: skip
    collect.add_argument("--token-file", dest="token_file",
                         default=os.environ.get("SHOAL_API_TOKEN_FILE", ""),
                         help="file holding the API token (or $SHOAL_API_TOKEN_FILE, or the "
                         "token in $SHOAL_API_TOKEN); the same for every agent")  # fmt: skip
    collect.add_argument("--api-port", dest="api_port", type=int,
                         help="other agents' API port (default: --api's); a member's `api` "
                         "tag (HOST:PORT) wins")  # fmt: skip
    churn = sub.add_parser("churn", help="run the Spark churn report over history logs")
    from shoal.churn.job import add_arguments

    add_arguments(churn)


def history_command(args: argparse.Namespace) -> int:
    """Print the local history, oldest first (or run `history collect`)."""
    if getattr(args, "history_command", None) == "collect":
        from shoal.daemon.cli.remote import agent_errors

        with agent_errors():
            return collect_command(args)
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


# Events whose `source` is a node (who raised it, who had suspected), in
# both schema versions' words.
_ACCUSED = ("member-suspected", "member-failed", "member-refuted", "suspect", "dead", "alive")


def format_row(row: dict[str, Any]) -> str:
    """One event as a line of text."""
    when = datetime.fromtimestamp(row["ts_ms"] / 1000, UTC).isoformat(timespec="milliseconds")
    event, node = row.get("event"), row.get("node")
    text = f"{when.replace('+00:00', 'Z')}  {row.get('observer', '?'):<16} {event:<19} {node}"
    if row.get("incarnation") is not None:
        text += f" (incarnation {row['incarnation']})"
    if row.get("epoch") is not None:
        text += f" epoch {row['epoch']}"
    if event == "voter-replaced":  # `source`: the data directory's id before
        new, old = row.get("node_id"), row.get("source")
        text += f" came back with a new data directory {new} (was {old})"
    elif row.get("source"):
        text += f" by {row['source']}" if event in _ACCUSED else f" ({row['source']})"
    if row.get("tags"):
        text += " tags " + ",".join(f"{k}={v}" for k, v in sorted(row["tags"].items()))
    return text


def churn_command(args: argparse.Namespace) -> int:
    """Run the Spark job in-process (local mode unless --master). Its
    arguments, paths and the `churn` extra are checked before Spark starts
    (churn.job.preflight): a problem is one line and exit 2."""
    from shoal.churn.job import run

    try:
        summary = run(args)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    print(json.dumps(summary, indent=2))
    return 0


def collect_command(args: argparse.Namespace) -> int:
    """`shoal history collect`: each live member's log files into
    DIR/<node>/, fetched from `GET /v1/history` on its agent. Rotated files
    are fetched once; the current one from the size already held (from the
    start again when it rotated in between). One line per member; exit 1
    when a member could not be reached (the others are still collected)."""
    import sys

    from shoal.client import Client, ShoalError
    from shoal.daemon.cli.remote import make_client
    from shoal.daemon.network.addresses import parse_address

    out = Path(args.out)
    local = make_client(args)
    members = local.members(status="alive")
    port = args.api_port or parse_address("--api", args.api)[1]
    failed = 0
    for m in sorted(members, key=lambda m: m.name):
        host = m.address.rsplit(":", 1)[0]
        api = dict(m.tags).get("api") or f"{host}:{port}"
        client = Client(api, token=local.token) if api != args.api else local
        try:
            copied = _collect_one(client, out / _safe(m.name))
        except ShoalError as exc:
            failed += 1
            print(f"{m.name}: {exc.message}", file=sys.stderr)
            continue
        print(f"{m.name}: {copied:,} new bytes from {api}")
    print(f"history of {len(members) - failed} of {len(members)} members in {out} "
          f"(shoal churn --history {out})")  # fmt: skip
    return 1 if failed else 0


def _safe(name: str) -> str:
    """A member name as a folder name: no separators, no dot-names."""
    cleaned = "".join(c if c.isalnum() or c in "-_.@" else "_" for c in name)
    return cleaned if cleaned.strip(".") else "_"


def _collect_one(client: Any, folder: Path) -> int:
    """Bring `folder` up to date with one agent's log; the bytes copied."""
    from shoal.client.calls import Call
    from shoal.storage.history import CURRENT

    def raw(path: str) -> bytes:
        return bytes(client.send(Call("GET", path, lambda b: b, needs="GET /v1/history")))

    listing = json.loads(raw("/v1/history"))
    folder.mkdir(parents=True, exist_ok=True)
    copied = 0
    for entry in listing["files"]:
        name, size = str(entry["name"]), int(entry["bytes"])
        if "/" in name or name.startswith("."):
            continue
        target = folder / name
        held = target.stat().st_size if target.exists() else 0
        if name == CURRENT and held and (held > size or _head(target) != raw(
                f"/v1/history?file={name}&after=0&limit={min(held, 4096)}")):  # fmt: skip
            held = 0  # it rotated since: the held copy is in a rotated file now
            target.unlink()
        if name != CURRENT and held == size:
            continue
        part = target if name == CURRENT else target.with_name(f".{name}.part")
        with open(part, "ab" if name == CURRENT else "wb") as f:
            offset = held if name == CURRENT else 0
            while True:
                chunk = raw(f"/v1/history?file={name}&after={offset}")
                f.write(chunk)
                offset += len(chunk)
                copied += len(chunk)
                if len(chunk) < (1 << 20):
                    break
        if part != target:
            part.replace(target)
    return copied


def _head(path: Path) -> bytes:
    with open(path, "rb") as f:
        return f.read(4096)
