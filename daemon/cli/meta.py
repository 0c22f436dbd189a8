"""`shoal meta put|get|delete|list|watch|txn`: the metadata log from the shell
(docs/metadata.md).

Each write prints its outcome: `Committed: KEY at revision R` (exit 0); a
`--cas` that did not match, a write not applied (safe to retry) or one
whose outcome is unknown (it may have been committed: read it back) is one
line on stderr and exit 1, saying which. `get` writes the raw value to
stdout as `shoal kv get` does (a newline only at a terminal); `--json`
prints the key with its revisions; `--stale` reads this agent's applied
state instead of asking the controller. `list PREFIX` prints `KEY VALUE`
lines (`--json`: the listing with revisions); `watch PREFIX [--from R]`
prints one line per committed change, `REVISION put KEY VALUE` or
`REVISION delete KEY`, until interrupted, resuming by itself; a revision
no longer kept is one line on stderr and exit 1.

`txn FILE|-` sends a JSON transaction (docs/metadata.md) and prints the
answer as JSON: exit 0 when its compares held, 1 when its failure branch
ran (a line on stderr says so; both committed), 1 for not applied and
unknown as the writes; a document that is not JSON, or one the agent
refuses as given (400, 413), is one line and exit 2.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from shoal.kernel.errors import ConfigError

if TYPE_CHECKING:
    from shoal.client import Client


def add_parsers(sub: Any, api_arg: Callable[[argparse.ArgumentParser], None]) -> None:
    """Add `meta` and its actions to the CLI's subcommands."""
    meta = sub.add_parser("meta", help="read and write the metadata log (one history, a "
                          "majority's disks; a preview: [meta] enabled)")  # fmt: skip
    actions = meta.add_subparsers(dest="meta_command", required=True, metavar="ACTION")
    for name, help_text in (("put", "set KEY to VALUE (or stdin with -), once committed"),
                            ("get", "print the value of KEY (read through the controller)"),
                            ("delete", "delete KEY, once committed")):  # fmt: skip
        p = actions.add_parser(name, help=help_text)
        api_arg(p)
        p.add_argument("key")
        if name == "put":
            p.add_argument("value", help="the value, or - to read it from stdin")
        if name in ("put", "delete"):
            p.add_argument("--cas", metavar="REVISION",
                           help="only if the key's mod revision is REVISION (0: only if "
                           "absent); refused otherwise, with the current one")  # fmt: skip
        else:
            p.add_argument(
                "--stale",
                action="store_true",
                help="read this agent's applied state (fast; may be behind)",
            )
            p.add_argument("--json", action="store_true", help="print JSON with revisions")
    _add_list_watch(actions, api_arg)
    _add_txn_parser(actions, api_arg)


def _add_list_watch(actions: Any, api_arg: Callable[[argparse.ArgumentParser], None]) -> None:
    """`meta list` and `meta watch` (client/metawatch.py)."""
    p = actions.add_parser("list", help="print the keys under PREFIX with their values "
                           "(read through the controller)")  # fmt: skip
    api_arg(p)
    p.add_argument("prefix", nargs="?", default="")
    p.add_argument(
        "--stale", action="store_true", help="list this agent's applied state (fast; may be behind)"
    )
    p.add_argument("--json", action="store_true", help="print JSON with revisions")
    p = actions.add_parser("watch", help="print every committed change under PREFIX, "
                           "by revision, until interrupted")  # fmt: skip
    api_arg(p)
    p.add_argument("prefix", nargs="?", default="")
    p.add_argument(
        "--from",
        dest="from_revision",
        metavar="REVISION",
        help="from this revision on (kept changes first); default: from now",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object per change")


def meta_command(client: Client, args: argparse.Namespace) -> int:
    """Run one `shoal meta` action; returns the exit code."""
    from urllib.parse import quote

    from shoal.client import NotFound

    action: str = args.meta_command
    if action == "txn":
        return txn_command(client, args.file)
    if action in ("list", "watch"):
        return _list(client, args) if action == "list" else _watch(client, args)
    if not args.key:
        raise ConfigError("key: must not be empty")
    if action == "put":
        value = sys.stdin.buffer.read() if args.value == "-" else args.value.encode()
        written = client.meta.put(args.key, value, cas=_cas(args.cas))
        print(f"Committed: {args.key} at revision {written.revision}")
        return 0
    if action == "delete":
        written = client.meta.delete(args.key, cas=_cas(args.cas))
        print(f"Committed: deleted {args.key} at revision {written.revision}")
        return 0
    try:
        if args.json:
            path = "/v1/meta/" + quote(args.key, safe="/") + ("?stale=1" if args.stale else "")
            print(json.dumps(client.request("GET", path), indent=2))
            return 0
        value = client.meta.get(args.key, stale=args.stale).value
    except NotFound:
        print(f"shoal: no key {args.key!r}", file=sys.stderr)
        return 1
    sys.stdout.buffer.write(value + b"\n" if sys.stdout.isatty() else value)
    return 0


def _cas(text: str | None) -> int | None:
    if text is None:
        return None
    if not text.isdigit():
        raise ConfigError(f"--cas: a mod revision (an integer, 0: only if absent), got {text!r}")
    return int(text)


# -- transactions --------------------------------------------------------------------


def _add_txn_parser(actions: Any, api_arg: Callable[[argparse.ArgumentParser], None]) -> None:
    p = actions.add_parser("txn", help="run a transaction (JSON: compare, success, failure) "
                           "atomically, once committed")  # fmt: skip
    api_arg(p)
    p.add_argument("file", metavar="FILE", help="the JSON transaction, or - to read stdin")


def txn_command(client: Client, source: str) -> int:
    """`shoal meta txn FILE|-`: send the document, print the answer."""
    from shoal.client import BadRequest, TooLarge
    from shoal.client.metatxn import txn_document_call

    try:
        body = sys.stdin.buffer.read() if source == "-" else _read(source)
        json.loads(body)
    except ValueError as exc:
        raise ConfigError(f"{source}: not a JSON transaction ({exc})") from None
    try:
        answer = client.run(_one(txn_document_call(body)))
    except (BadRequest, TooLarge) as exc:
        raise ConfigError(f"{source}: {exc}") from None
    print(json.dumps(answer, indent=2))
    if answer.get("succeeded"):
        return 0
    print(f"shoal: compares did not hold: the failure branch ran at revision "
          f"{answer.get('revision')}", file=sys.stderr)  # fmt: skip
    return 1


def _read(path: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read it ({exc.strerror})") from None


def _one(call: Any) -> Any:
    from shoal.client import calls

    return calls.one(call)


def _shown(value: bytes | None) -> str:
    """A value on one line: text with newlines as \\n, else base64:..."""
    value = value or b""
    try:
        return value.decode().replace("\n", "\\n")
    except UnicodeDecodeError:
        import base64

        return "base64:" + base64.b64encode(value).decode()


def _list(client: Client, args: argparse.Namespace) -> int:
    import msgspec

    listing = client.meta.list(args.prefix, stale=args.stale)
    if args.json:
        print(json.dumps(msgspec.to_builtins(listing), indent=2))
        return 0
    for item in listing.items:
        print(f"{item.key} {_shown(item.value)}")
    return 0


def _watch(client: Client, args: argparse.Namespace) -> int:
    """Follow the changes under the prefix until interrupted."""
    import msgspec

    from shoal.client import Compacted

    start = args.from_revision
    if start is not None and not (start.isdigit() and int(start) >= 1):
        raise ConfigError(f"--from: a revision (an integer >= 1), got {start!r}")
    try:
        with client.meta.watch(args.prefix, None if start is None else int(start)) as watch:
            print(f"Watching meta keys under {args.prefix!r} from revision {watch.next_from} "
                  f"at {client.base} (Ctrl-C to stop)", file=sys.stderr, flush=True)  # fmt: skip
            for event in watch:
                if args.json:
                    print(json.dumps(msgspec.to_builtins(event)), flush=True)
                elif event.type == "delete":
                    print(f"{event.revision} delete {event.key}", flush=True)
                else:
                    print(f"{event.revision} put {event.key} {_shown(event.value)}", flush=True)
    except Compacted as exc:
        print(f"shoal: {exc.message} (compacted revision {exc.revision})", file=sys.stderr)
        return 1
    return 0
