"""`shoal kv put|get|delete|list`: the key-value store from the shell.

`get` writes the raw value to stdout, with no newline added unless stdout is
a terminal (so binary values survive a pipe byte for byte);
`--json` prints the value with its version. A missing key exits 1 with a
message on stderr, as `consul kv get` does.
"""

from __future__ import annotations

import argparse
import base64
import json
import sys
from typing import Any
from urllib.parse import quote, urlencode

from shoal.daemon.api.client import ApiClient, NotFoundError
from shoal.kernel.errors import ConfigError


def kv_command(client: ApiClient, args: argparse.Namespace) -> int:
    """Run one `shoal kv` action; returns the exit code."""
    action: str = args.kv_command
    if action == "list":
        return _list(client, args)
    path = "/v1/kv/" + quote(args.key, safe="/")
    if not args.key:
        raise ConfigError("key: must not be empty")
    if action == "put":
        value = sys.stdin.buffer.read() if args.value == "-" else args.value.encode()
        client.request("PUT", path, value)
        print(f"Success! Data written to: {args.key}")
        return 0
    if action == "delete":
        client.request("DELETE", path)
        print(f"Success! Deleted key: {args.key}")
        return 0
    try:
        record = client.get(path)
    except NotFoundError:
        print(f"shoal: no key {args.key!r}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(record, indent=2))
    else:
        value = base64.b64decode(record["value_base64"])
        # A newline only for a person at a terminal: piped, the bytes are the value.
        sys.stdout.buffer.write(value + b"\n" if sys.stdout.isatty() else value)
    return 0


def _list(client: ApiClient, args: argparse.Namespace) -> int:
    items: list[dict[str, Any]] = []
    after = ""
    while True:
        query = urlencode({"prefix": args.prefix, "after": after, "limit": 1000})
        answer = client.get(f"/v1/kv/?{query}")
        items.extend(answer["items"])
        if answer["next_after"] is None:
            break
        after = answer["next_after"]
    if args.json:
        print(json.dumps(items, indent=2))
        return 0
    for item in items:
        if args.values:
            shown = item["value"] if item["value"] is not None else item["value_base64"]
            print(f"{item['key']}:{shown}")
        else:
            print(item["key"])
    return 0
