"""`shoal kv put|get|delete|list|watch`: the key-value store from the shell.

`get` writes the raw value to stdout, with no newline added unless stdout is
a terminal (so binary values survive a pipe byte for byte);
`--json` prints the value with its version, as the agent gives it. A
missing key exits 1 with a message on stderr, as `consul kv get` does.
`watch` prints one line per change as it happens (`put KEY VALUE`, `delete
KEY`, with why when it is not a write here), resuming by itself after a
dropped connection or an agent restart (shoal.client's watch).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any
from urllib.parse import quote, urlencode

from shoal.client import Client, KvEvent, NotFound
from shoal.kernel.errors import ConfigError


def kv_command(client: Client, args: argparse.Namespace) -> int:
    """Run one `shoal kv` action; returns the exit code."""
    action: str = args.kv_command
    if action == "list":
        return _list(client, args)
    if action == "watch":
        return _watch(client, args)
    if not args.key:
        raise ConfigError("key: must not be empty")
    if action == "put":
        fence = _fence(args.fence)
        value = sys.stdin.buffer.read() if args.value == "-" else args.value.encode()
        written = client.kv.put(args.key, value, fence=fence, ephemeral=args.ephemeral)
        under = f" (epoch {written.epoch})" if fence is not None else ""
        print(f"Success! Data written to: {args.key}{under}")
        return 0
    if action == "delete":
        client.kv.delete(args.key, fence=_fence(args.fence))
        print(f"Success! Deleted key: {args.key}")
        return 0
    try:
        if args.json:  # the agent's own JSON: text value and base64 both
            record = client.request("GET", "/v1/kv/" + quote(args.key, safe="/"))
            print(json.dumps(record, indent=2))
            return 0
        value = client.kv.get(args.key).value
    except NotFound:
        print(f"shoal: no key {args.key!r}", file=sys.stderr)
        return 1
    # A newline only for a person at a terminal: piped, the bytes are the value.
    sys.stdout.buffer.write(value + b"\n" if sys.stdout.isatty() else value)
    return 0


def _fence(text: str | None) -> int | None:
    if text is None:
        return None
    if not text.isdigit():
        raise ConfigError(f"--fence: a controller epoch (an integer), got {text!r}")
    return int(text)


def _watch(client: Client, args: argparse.Namespace) -> int:
    """Follow the keys under the prefix until interrupted (or the stream
    cannot be opened at all: then the client's error, exit 1)."""
    import msgspec

    with client.kv.watch(args.prefix) as watch:
        print(f"Watching keys under {args.prefix!r} at {client.base} (Ctrl-C to stop)",
              file=sys.stderr, flush=True)  # fmt: skip
        for event in watch:
            if args.json:
                print(json.dumps(msgspec.to_builtins(event)), flush=True)
            else:
                print(change_line(event), flush=True)
    return 0


def change_line(event: KvEvent) -> str:
    """One change on one line: `put KEY VALUE [(why)]` or `delete KEY [(why)]`;
    a value that is not UTF-8 is shown as base64:..., a newline as \\n."""
    why = "" if event.reason in ("", "write") else f" ({event.reason})"
    if event.deleted:
        return f"delete {event.key}{why}"
    value = event.value or b""
    try:
        shown = value.decode().replace("\n", "\\n")
    except UnicodeDecodeError:
        import base64

        shown = "base64:" + base64.b64encode(value).decode()
    return f"put {event.key} {shown}{why}"


def _list(client: Client, args: argparse.Namespace) -> int:
    if args.json:
        print(json.dumps(_raw_items(client, args.prefix), indent=2))
        return 0
    for item in client.kv.list(args.prefix):
        if args.values:
            try:
                shown = item.value.decode()
            except UnicodeDecodeError:
                import base64

                shown = base64.b64encode(item.value).decode()
            print(f"{item.key}:{shown}")
        else:
            print(item.key)
    return 0


def _raw_items(client: Client, prefix: str) -> list[dict[str, Any]]:
    """Every listed key as the agent's JSON (for `--json`)."""
    items: list[dict[str, Any]] = []
    after = ""
    while True:
        query = urlencode({"prefix": prefix, "after": after, "limit": 1000})
        answer = client.request("GET", f"/v1/kv/?{query}")
        items.extend(answer["items"])
        if answer["next_after"] is None:
            return items
        after = answer["next_after"]
