"""`shoal sessions` and `shoal checks`: what keeps an application's keys
alive on this agent (daemon/sessions.py, daemon/health.py)."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import msgspec

if TYPE_CHECKING:
    from shoal.client import Client


def add_parsers(sub: Any, api_arg: Callable[[argparse.ArgumentParser], None]) -> None:
    """Add `sessions` and `checks` to the CLI's subcommands."""
    sessions = sub.add_parser("sessions", help="the client sessions open on an agent, with "
                              "their keys")  # fmt: skip
    api_arg(sessions)
    sessions.add_argument("--json", action="store_true", help="print JSON")
    checks = sub.add_parser("checks", help="an agent's health checks and its member's health")
    api_arg(checks)
    checks.add_argument("--json", action="store_true", help="print JSON")


def sessions_command(client: Client, args: argparse.Namespace) -> int:
    """`shoal sessions`: one row per open session."""
    sessions = client.sessions()
    if args.json:
        print(json.dumps(msgspec.to_builtins(sessions), indent=2))
        return 0
    if not sessions:
        print("no sessions")
        return 0
    rows = [(s.id, s.name or "-", f"{s.ttl_s:g}s",
             "-" if s.expires_in_s is None else f"{s.expires_in_s:.1f}s",
             "-" if s.replicated else str(s.renewals), ",".join(s.checks) or "-",
             s.node or "-", ",".join((*s.meta_keys, *s.keys)) or "-")
            for s in sessions]  # fmt: skip
    print(table(("ID", "Name", "TTL", "Expires in", "Renewals", "Checks", "Opened on", "Keys"),
                rows))  # fmt: skip
    return 0


def checks_command(client: Client, args: argparse.Namespace) -> int:
    """`shoal checks`: the member's health, then one row per check."""
    listing = client.checks()
    if args.json:
        print(json.dumps(msgspec.to_builtins(listing), indent=2))
        return 0
    print(f"Health: {listing.health}")
    if not listing.checks:
        print("no checks (a member without checks counts as passing)")
        return 0
    rows = [(c.id, c.kind, c.status, c.target or (f"ttl {c.ttl_s:g}s" if c.kind == "ttl" else ""),
             " ".join(c.output.split())[:80]) for c in listing.checks]  # fmt: skip
    print(table(("ID", "Kind", "Status", "Target", "Output"), rows))
    return 0


def table(header: tuple[str, ...], rows: Sequence[tuple[str, ...]]) -> str:
    """Columns padded to their widest cell, as `shoal members` prints them."""
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip()
                     for row in [header, *rows])  # fmt: skip
