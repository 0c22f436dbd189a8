"""`shoal event` and `shoal query` (docs/events.md), like Serf's.

`query` prints one line per member expected to answer (fixed by the agent
when the query is sent): its name, what it did, and its answer. It exits 0
only when at least `--min-responses` members answered (default: all that
were expected), so a script can gate on it. A bad regex, timeout or count is
one line on stderr and exit 2, and nothing is sent.

The payload: the argument, or `-` for stdin; without one, a piped (or
redirected) stdin is read, as `echo data | shoal event deploy` means, and a
terminal or anything else (a socket, /dev/null) is never read: the payload
is empty, as it was before, and the command never waits for a keyboard.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import re
import stat
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from shoal.client import calls
from shoal.kernel.errors import ConfigError

if TYPE_CHECKING:
    from shoal.client import Client, QueryResult


def add_parsers(sub: Any, api_arg: Callable[[argparse.ArgumentParser], None]) -> None:
    """Add `event` and `query` to the CLI's subcommands."""
    event = sub.add_parser("event", help="fire a user event: every member runs its handlers "
                           "for NAME at least once")  # fmt: skip
    api_arg(event)
    event.add_argument("name", help="the event's name (1 to 128 characters, no spaces)")
    event.add_argument(
        "payload",
        nargs="?",
        default=None,
        help="the payload (at most 64 KiB), or - to read it from stdin (the "
        "default when stdin is a pipe or a file)",
    )
    query = sub.add_parser("query", help="ask members to run their handler for NAME and "
                           "print each one's answer")  # fmt: skip
    api_arg(query)
    query.add_argument("name", help="the query's name")
    query.add_argument(
        "payload",
        nargs="?",
        default=None,
        help="the payload (at most 64 KiB), or - to read it from stdin (the "
        "default when stdin is a pipe or a file)",
    )
    query.add_argument(
        "--node",
        metavar="REGEX",
        help="only members whose name matches (re.search: anchor with ^...$)",
    )
    query.add_argument(
        "--tag",
        action="append",
        default=[],
        metavar="KEY=REGEX",
        help="only members whose tag KEY matches REGEX (repeatable)",
    )
    query.add_argument(
        "--timeout",
        default="5",
        metavar="S",
        help="seconds to wait for answers (default 5, at most 300)",
    )
    query.add_argument("--min-responses", dest="min_responses", metavar="K",
                       help="exit 0 when at least K members answered (default: every "
                       "member expected)")  # fmt: skip
    query.add_argument("--json", action="store_true", help="print the agent's JSON answer")


def _payload(text: str | None) -> bytes:
    """The payload argument; `-`, or none with a piped stdin: stdin."""
    if text is None:
        return sys.stdin.buffer.read() if _stdin_is_data() else b""
    return sys.stdin.buffer.read() if text == "-" else text.encode()


def _stdin_is_data() -> bool:
    """Whether stdin is a pipe or a regular file: what a script hands over.
    A terminal is never read without `-` (the command would wait for the
    keyboard), nor a socket or a device (a service's stdin)."""
    if sys.stdin is None:
        return False
    try:
        mode = os.fstat(sys.stdin.fileno()).st_mode
    except (OSError, ValueError):
        return False
    return stat.S_ISFIFO(mode) or stat.S_ISREG(mode)


def event_command(client: Client, args: argparse.Namespace) -> int:
    """`shoal event NAME [PAYLOAD]`."""
    sent = client.event(args.name, _payload(args.payload))
    print(f"Event {sent.name} fired: id {sent.id}, {sent.payload_bytes} bytes of payload")
    return 0


def _query_args(args: argparse.Namespace) -> tuple[float, int | None, dict[str, str]]:
    """The timeout, the minimum of answers and the tag filters, checked
    here so that a mistake costs nothing on the cluster."""
    try:
        timeout_s = float(args.timeout)
    except ValueError:
        timeout_s = -1.0
    if not 0 < timeout_s <= 300:
        raise ConfigError(f"--timeout: seconds above 0, at most 300, got {args.timeout!r}")
    minimum = None
    if args.min_responses is not None:
        if not args.min_responses.isdigit():
            raise ConfigError(f"--min-responses: a count (0 or more), got {args.min_responses!r}")
        minimum = int(args.min_responses)
    tags = {}
    for spec in args.tag:
        key, sep, pattern = spec.partition("=")
        if not sep or not key:
            raise ConfigError(f"--tag: expected KEY=REGEX, got {spec!r}")
        _check_regex("--tag", pattern)
        tags[key] = pattern
    if args.node is not None:
        _check_regex("--node", args.node)
    return timeout_s, minimum, tags


def _check_regex(flag: str, pattern: str) -> None:
    try:
        re.compile(pattern)
    except re.error as exc:
        raise ConfigError(f"{flag}: {pattern!r} is not a regular expression: {exc}") from None


def query_command(client: Client, args: argparse.Namespace) -> int:
    """`shoal query NAME [PAYLOAD]`: 0 when enough members answered, else 1."""
    timeout_s, minimum, tags = _query_args(args)
    payload = _payload(args.payload)
    call = calls.query(args.name, payload, args.node, tags, timeout_s)
    typed: Callable[[bytes], QueryResult] = call.decode

    def both(body: bytes) -> tuple[Any, QueryResult]:
        return json.loads(body), typed(body)

    # --json prints the agent's own JSON (an answer as text and as base64).
    raw, result = client.send(calls.Call(call.method, call.path, both, call.body, call.wait_s,
                                         call.needs))  # fmt: skip
    wanted = result.expected if minimum is None else minimum
    if args.json:
        print(json.dumps(raw, indent=2))
    else:
        width = max((len(n) for n in result.members), default=0)
        for name, member in result.members.items():
            said = member.error if member.status == "error" else _shown(member.answer) \
                if member.status == "answered" else ""  # fmt: skip
            print(f"{name.ljust(width)}  {member.status.ljust(10)}  {said}".rstrip())
        print(f"{result.answered} of {result.expected} answered in {result.duration_s:.3f} s"
              + ("" if result.complete else " (timed out)"), file=sys.stderr)  # fmt: skip
    if result.answered < wanted:
        print(f"shoal: {result.answered} answered, {wanted} wanted", file=sys.stderr)
        return 1
    return 0


def _shown(answer: bytes) -> str:
    """An answer on one line: its text, or base64 for bytes that are not UTF-8."""
    try:
        text = answer.decode()
    except UnicodeDecodeError:
        return "base64:" + base64.b64encode(answer).decode()
    return text.rstrip("\n").replace("\n", "\\n")
