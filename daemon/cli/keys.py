"""`shoal keys generate | list | install KEY | use KEY | remove KEY`.

Like `serf keys`: each change is applied by the agent the CLI talks to and
by every live member, and the command says how many acknowledged; it exits
1 unless all did, so a rotation script stops at the first incomplete step.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from shoal.client import Client


def add_parsers(sub: Any, api_arg: Callable[[argparse.ArgumentParser], None]) -> None:
    """Add `keys` to the CLI's subcommands."""
    keys = sub.add_parser("keys", help="manage the encryption keyring across the cluster")
    keys_sub = keys.add_subparsers(dest="keys_command", required=True, metavar="ACTION")
    keys_sub.add_parser("generate", help="print a new random key (no agent needed)")
    listing = keys_sub.add_parser("list", help="the keys installed on the members")
    api_arg(listing)
    listing.add_argument("--local", action="store_true", help="only this agent's keys")
    listing.add_argument("--json", action="store_true", help="print JSON")
    for name, help_text in (("install", "add a key to every keyring (accepted, not used)"),
                            ("use", "make an installed key the one used to send"),
                            ("remove", "remove a key that is not in use")):  # fmt: skip
        p = keys_sub.add_parser(name, help=help_text)
        api_arg(p)
        p.add_argument("key", help="the key, base64 (from shoal keys generate)")
        p.add_argument("--local", action="store_true",
                       help="change only this agent (after a key was stolen: see "
                       "docs/security.md)")  # fmt: skip


def keys_command(client: Client, args: argparse.Namespace) -> int:
    """Run one `shoal keys` action; 0 if every member acknowledged."""
    action = args.keys_command
    if action == "list":
        answer = client.request("GET", "/v1/keys" + ("?local=1" if args.local else ""))
        if args.json:
            import json

            print(json.dumps(answer, indent=2))
        else:
            print(f"Keys installed on {answer['members']} members:")
            primary = answer.get("primary", {})
            for key, count in sorted(answer["keys"].items(), key=lambda kv: -kv[1]):
                mark = f"  primary on {primary[key]}" if key in primary else ""
                print(f"  {key}  [{count}/{answer['members']}]{mark}")
        _print_errors(answer)
        return 0 if not answer["errors"] else 1
    answer = client.request("POST", f"/v1/keys/{action}", {"key": args.key, "local": args.local})
    doing = {"install": "Installing the key", "use": "Changing the primary key",
             "remove": "Removing the key"}  # fmt: skip
    print(f"{doing[action]}: {answer['acks']}/{answer['members']} members acknowledged")
    _print_errors(answer)
    return 0 if answer["acks"] == answer["members"] else 1


def _print_errors(answer: dict[str, Any]) -> None:
    for node, error in sorted(answer["errors"].items()):
        print(f"  {node}: {error}")


def generate() -> int:
    """`shoal keys generate`."""
    from shoal.daemon.keys import generate_key  # the agent's keyring module: not for `keys list`

    print(generate_key())
    return 0
