"""The commands that talk to a running agent, through `shoal.client`:
members, info, tags, join, leave, monitor, controller, force-leave, kv,
keys, sessions, checks, event and query. A refusal or an absent agent
becomes one line on stderr and exit 1 (`ApiError`): "cannot reach the
agent at ...", or "the agent refused: ...".

`shoal members` (the command scripts poll) asks with one plain GET
(oneshot.py) and imports `shoal.client` only when that does not get a plain
answer, or for `--near`; the other commands use `Client`.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from shoal.kernel.errors import ApiError, ConfigError

# Not `typing` itself: `shoal members` would load it for annotations alone.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from shoal.client import Client

STATUSES = ("alive", "suspect", "dead", "left")
# `shoal.client.Member`'s fields in its order, with their defaults: what
# `members --json` prints for each member (a test holds the two together).
MEMBER_FIELDS: tuple[tuple[str, Any], ...] = (
    ("name", ""), ("node_id", ""), ("address", ""), ("status", ""), ("incarnation", 0),
    ("tags", {}), ("health", None), ("versions", None), ("voter", None),
    ("former_node_id", None),
)  # fmt: skip


@contextmanager
def agent_errors() -> Iterator[None]:
    """Turn the client's errors into the CLI's one-line ApiError."""
    from shoal.client import ShoalError

    try:
        yield
    except ShoalError as exc:
        # An absent agent's message says so; a 404's names what is missing.
        refused = exc.status is not None and exc.status != 404
        raise ApiError(f"the agent refused: {exc.message}" if refused else exc.message) from None


def make_client(args: argparse.Namespace) -> Client:
    """The client for `--api` and `--token-file` (or $SHOAL_API_TOKEN[_FILE])."""
    from shoal.client import Client

    check_api(args)
    return Client(args.api, token=_token(args))


def check_api(args: argparse.Namespace) -> None:
    """`--api` is ADDR:PORT or unix:PATH (ConfigError naming the flag)."""
    from shoal.daemon.network.addresses import parse_address

    if not args.api.startswith("unix:"):
        parse_address("--api", args.api)  # its error names the flag


def _token(args: argparse.Namespace) -> str:
    token = os.environ.get("SHOAL_API_TOKEN", "")
    if args.token_file:
        from pathlib import Path

        from shoal.daemon.api.access import read_token_file

        token = read_token_file(Path(args.token_file), "--token-file")
    return token


def remote_command(args: argparse.Namespace) -> int:
    """Run one command against the agent; its exit code."""
    if args.command == "members" and not args.near:
        check_api(args)
        return _members(None, args)
    client = make_client(args)
    with agent_errors():
        return _dispatch(client, args)


def _dispatch(client: Client, args: argparse.Namespace) -> int:
    command: str = args.command
    if command == "keys":
        from shoal.daemon.cli.keys import keys_command

        return keys_command(client, args)
    if command == "kv":
        from shoal.daemon.cli.kv import kv_command

        return kv_command(client, args)
    if command == "meta":
        from shoal.daemon.cli.meta import meta_command

        return meta_command(client, args)
    if command in ("sessions", "checks"):
        from shoal.daemon.cli import liveness

        return (liveness.sessions_command if command == "sessions" else
                liveness.checks_command)(client, args)  # fmt: skip
    if command in ("event", "query"):
        from shoal.daemon.cli import events

        return (events.event_command if command == "event" else
                events.query_command)(client, args)  # fmt: skip
    handler = {"members": _members, "info": _info, "tags": _tags, "join": _join,
               "controller": _controller, "force-leave": _force_leave, "leave": _leave,
               "monitor": _monitor, "rtt": _rtt, "features": _features}[command]  # fmt: skip
    return handler(client, args)


def _tags(client: Client, args: argparse.Namespace) -> int:
    if not args.set_tags and not args.delete:
        raise ConfigError("tags: give --set KEY=VALUE or --delete KEY (repeatable)")
    from shoal.daemon.config import parse_tags

    pairs = dict(parse_tags("--set", args.set_tags))
    tags = client.request("POST", "/v1/tags", {"set": pairs, "delete": args.delete})["tags"]
    print("Tags now: " + (", ".join(f"{k}={v}" for k, v in sorted(tags.items())) or "(none)"))
    return 0


def _join(client: Client, args: argparse.Namespace) -> int:
    addrs = [f"{a}" if ":" in a else f"{a}:7946" for a in args.addrs]
    answer = client.join(addrs)
    for addr, ok in answer.results.items():
        print(f"{addr}: " + ("joined" if ok else "no answer (is an agent of this cluster "
                             "listening there, with the same key?)"))  # fmt: skip
    joined, asked = answer.joined, len(answer.results)
    if not joined:
        print(f"shoal: joined no one: none of the {asked} address(es) answered", file=sys.stderr)
        return 1
    print(f"Joined the cluster through {joined} of {asked} address(es).")
    return 0


def _force_leave(client: Client, args: argparse.Namespace) -> int:
    client.force_leave(args.node)
    print(f"Removing voter {args.node}.")
    return 0


def _leave(client: Client, args: argparse.Namespace) -> int:
    client.leave()
    print("Graceful leave complete.")
    return 0


def _monitor(client: Client, args: argparse.Namespace) -> int:
    """Follow the events; 1, with a line saying so, when the agent ends it."""
    print(f"Monitoring the agent at {client.base} (Ctrl-C to stop)", file=sys.stderr, flush=True)
    for event in client.events():
        if args.text:
            fields = " ".join(f"{k}={v}" for k, v in event.items() if k not in ("type", "at_ms"))
            when = time.strftime("%H:%M:%S", time.localtime(event.get("at_ms", 0) / 1000))
            print(f"{when} {event.get('type', '?')} {fields}", flush=True)
        else:
            print(json.dumps(event), flush=True)
    print(f"shoal: the agent at {client.base} ended the stream (it stopped or is leaving)",
          file=sys.stderr)  # fmt: skip
    return 1


def _controller(client: Client, args: argparse.Namespace) -> int:
    info = client.request("GET", "/v1/controller")
    while True:
        if args.json:
            print(json.dumps(info), flush=True)
        elif info["controller"] is None:
            print("No controller known.", flush=True)
        else:
            print(f"{info['controller']} (epoch {info['epoch']})", flush=True)
        if not args.watch:
            return 0 if info["controller"] is not None else 1
        info = client.request("GET", f"/v1/controller?wait=60&epoch={info['epoch']}", wait=60)


def _member_filters(args: argparse.Namespace) -> dict[str, re.Pattern[str]]:
    """{tag: pattern} from --tag; ConfigError naming the flag if one is bad."""
    filters = {}
    for spec in args.tag:
        key, sep, pattern = spec.partition("=")
        if not sep or not key:
            raise ConfigError(f"--tag: expected KEY=REGEX, got {spec!r}")
        filters[key] = _compile("--tag", pattern)
    return filters


def _compile(flag: str, pattern: str) -> re.Pattern[str]:
    try:
        return re.compile(pattern)
    except re.error as exc:
        raise ConfigError(f"{flag}: {pattern!r} is not a regular expression: {exc}") from None


def _members_by_client(client: Client, status: str | None, health: str | None,
                       tags: dict[str, re.Pattern[str]],
                       name: re.Pattern[str] | None) -> list[dict[str, Any]]:  # fmt: skip
    import msgspec

    listed: list[dict[str, Any]] = msgspec.to_builtins(
        client.members(status=status, tags=tags, name=name, health=health)
    )
    return listed


def _members_plainly(args: argparse.Namespace, health: str | None,
                     tags: dict[str, re.Pattern[str]],
                     name: re.Pattern[str] | None) -> list[dict[str, Any]] | None:  # fmt: skip
    """The members as `_members_by_client` gives them, from one plain GET
    (oneshot.py), filtered as `shoal.client.calls.member_filter` filters;
    None when that got no plain answer, or a token file is to be read."""
    if args.token_file:
        return None
    from shoal.daemon.cli import oneshot

    query = "&".join(f"{k}={v}" for k, v in (("status", args.status), ("health", health)) if v)
    body = oneshot.get(args.api, "/v1/members" + ("?" + query if query else ""),
                       os.environ.get("SHOAL_API_TOKEN", ""))  # fmt: skip
    if body is None:
        return None
    try:
        listed = json.loads(body)["members"]
        members = [{k: m.get(k, default) for k, default in MEMBER_FIELDS} for m in listed]
    except (ValueError, KeyError, TypeError, AttributeError):
        return None
    return [m for m in members if _selected(m, tags, name)]


def _selected(member: dict[str, Any], tags: dict[str, re.Pattern[str]],
              name: re.Pattern[str] | None) -> bool:  # fmt: skip
    if name is not None and not name.fullmatch(member["name"]):
        return False
    for key, pattern in tags.items():
        value = member["tags"].get(key)
        if value is None or not pattern.fullmatch(value):
            return False
    return True


def _info(client: Client, args: argparse.Namespace) -> int:
    """Serf's `info`: this agent, its controller, its counters."""
    me = client.request("GET", "/v1/self")
    ctl, root = client.request("GET", "/v1/controller"), client.request("GET", "/")
    if args.json:
        print(json.dumps({"agent": me, "controller": ctl, "version": root["version"],
                          "hot_path": root.get("hot_path")}, indent=2))  # fmt: skip
        return 0
    print("agent:")
    for key in ("name", "node_id", "cluster", "address", "status", "incarnation", "data_format"):
        print(f"  {key} = {me.get(key)}")
    print(f"  version = {root['version']}")
    print(f"  hot_path = {root.get('hot_path')}")
    print(f"  clock_offset_ms = {me.get('clock_offset_ms')}")
    print(f"  health_score = {me.get('health_score')}")
    print("versions:")
    print(f"  understands = {_ranges(me.get('versions'))}")
    print(f"  cluster_speaks = {me.get('speaks')}")
    print(f"  feature_level = {me.get('feature_level')}")
    print(f"  held_back_by = {', '.join(me.get('held_back_by') or []) or '(nobody)'}")
    print("controller:")
    for key in ("controller", "epoch", "is_self", "voters"):
        print(f"  {key} = {ctl.get(key)}")
    print("counters:")
    for key, value in sorted(me["counters"].items()):
        print(f"  {key} = {value}")
    return 0


def _ranges(versions: Any) -> str:
    """`envelope 1-1 membership 1-2 ... features 2`, or `?` from an older agent."""
    if not isinstance(versions, dict):
        return "?"
    parts = [f"{k} {v[0]}-{v[1]}" for k, v in versions.items() if isinstance(v, list)]
    return " ".join(parts) + f" features {versions.get('features', '?')}"


_CAP_KEY = "shoal/features/cap"  # node/features.py


def _features(client: Client, args: argparse.Namespace) -> int:
    """`shoal features [--cap N | --uncap]`: the level, who holds it back, the cap."""
    if args.cap is not None:
        if not 1 <= args.cap <= 65535:
            raise ConfigError(f"--cap: expected a feature level from 1 to 65535, got {args.cap}")
        client.kv.put(_CAP_KEY, str(args.cap).encode())
    elif args.uncap:
        client.kv.delete(_CAP_KEY)
    from shoal.client import NotFound

    me = client.request("GET", "/v1/self")
    try:
        cap: str | None = client.kv.get(_CAP_KEY).value.decode(errors="replace")
    except NotFound:
        cap = None
    report = {"feature_level": me.get("feature_level"), "supported": me["versions"]["features"],
              "held_back_by": me.get("held_back_by", []), "cap": cap}  # fmt: skip
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    level = report["feature_level"] or "not announced yet (no controller)"
    print(f"feature level: {level} (this agent supports up to {report['supported']})")
    print(f"held back by: {', '.join(report['held_back_by']) or '(nobody)'}")
    print(f"cap: {cap or '(none)'}")
    if args.cap is not None:
        print(
            f"The controller announces at most {args.cap} within a second; check with "
            "`shoal features` on every agent before a downgrade."
        )
    return 0


def _rtt(client: Client, args: argparse.Namespace) -> int:
    """`shoal rtt A [B]`: the estimate, its error bar, and whether measured."""
    from urllib.parse import urlencode

    query = {"a": args.a, **({"b": args.b} if args.b else {})}
    answer = client.request("GET", f"/v1/rtt?{urlencode(query)}")
    if args.json:
        print(json.dumps(answer, indent=2))
        return 0
    how = "probed directly" if answer["direct"] else "not probed directly: an estimate"
    print(
        f"{answer['a']} <-> {answer['b']}: {answer['rtt_ms']:.3f} ms "
        f"± {answer['error_ms']:.3f} ms ({how}; by {answer['measured_by']})"
    )
    return 0


def _members(client: Client | None, args: argparse.Namespace) -> int:
    """`shoal members`; without `client`, asked with one plain GET first."""
    if args.status and args.status not in STATUSES:
        raise ConfigError(f"--status: expected alive, suspect, dead or left, got {args.status!r}")
    name = _compile("--name", args.name) if args.name else None
    tags = _member_filters(args)
    if args.healthy and args.health not in (None, "passing"):
        raise ConfigError(f"--healthy is --health passing: not with --health {args.health}")
    health = "passing" if args.healthy else args.health
    members = _members_plainly(args, health, tags, name) if client is None else None
    if members is None:
        if client is None:
            client = make_client(args)
        with agent_errors():
            members = _members_by_client(client, args.status, health, tags, name)
    if args.near:  # the agent's order by estimated distance (GET /v1/coordinates?near=)
        assert client is not None
        from urllib.parse import quote

        rows = client.request("GET", f"/v1/coordinates?near={quote(args.near)}")["coordinates"]
        order = {row["name"]: i for i, row in enumerate(rows)}
        members.sort(key=lambda m: order.get(m["name"], len(order)))
    if args.json:
        print(json.dumps(members, indent=2))
        return 0
    if not members:
        wanted = " and ".join(w for w in (args.status, health) if w)
        print(f"no member is {wanted}" if wanted else "no members")
        return 0
    from shoal.daemon.cli.format import format_members

    print(format_members(members, detailed=args.detailed))
    return 0
