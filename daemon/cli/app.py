"""`shoal`: the agent and the commands that talk to it.

Usage errors and bad settings print one line on stderr and exit 2 (argparse
does the same for unknown flags); other failures exit 1. Imports are lazy so
that `shoal members` and the agent's start-up stay fast: a command named
first on the command line gets a parser of that command alone (`_parser`),
so it loads neither the other commands' modules nor the agent's
configuration and logging; `tests/unit/daemon/test_cli_imports.py` pins what
`shoal members` loads.
"""

from __future__ import annotations

import argparse
import gc
import os
import sys

from shoal.kernel.errors import ShoalError

# Not `typing` itself: `shoal members` would load it for annotations alone.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

DEFAULT_API = "127.0.0.1:7947"


def _api_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--api",
        default=os.environ.get("SHOAL_API", DEFAULT_API),
        help="the agent's API: ADDR:PORT or unix:PATH (default %(default)s, or $SHOAL_API)",
    )
    p.add_argument("--token-file", dest="token_file",
                   default=os.environ.get("SHOAL_API_TOKEN_FILE", ""),
                   help="file holding the API token (or $SHOAL_API_TOKEN_FILE, "
                   "or the token in $SHOAL_API_TOKEN)")  # fmt: skip


# Every command, and the module whose `add_parsers` adds it (None: here).
COMMANDS: dict[str, str | None] = {
    "agent": None, "members": None, "tags": None, "info": None, "join": None, "leave": None,
    "monitor": None, "controller": None, "rtt": None, "force-leave": None, "kv": None,
    "demo": None, "history": "history", "churn": "history", "keys": "keys",
    "sessions": "liveness", "checks": "liveness", "event": "events", "query": "events",
    "completion": "manual", "man": "manual", "simulate": None, "features": None,
    "meta": "meta", "recover": "recover",
}  # fmt: skip


def _columns() -> int:
    """`shutil.get_terminal_size().columns`, without importing shutil (with
    bz2 and lzma: about 8 ms of a `shoal members`): $COLUMNS, else the
    terminal's width, else 80."""
    try:
        columns = int(os.environ.get("COLUMNS", "0"))
    except ValueError:
        columns = 0
    if columns <= 0:
        try:
            stdout = sys.__stdout__
            columns = 0 if stdout is None else os.get_terminal_size(stdout.fileno()).columns
        except (AttributeError, ValueError, OSError):
            columns = 0
    return columns or 80


class _Formatter(argparse.HelpFormatter):
    """argparse's formatter at the width it would choose (see `_columns`)."""

    def __init__(self, prog: str, indent_increment: int = 2, max_help_position: int = 24,
                 width: int | None = None) -> None:  # fmt: skip
        super().__init__(prog, indent_increment, max_help_position,
                         _columns() - 2 if width is None else width)  # fmt: skip


class _Parser(argparse.ArgumentParser):
    """argparse's parser with `_Formatter`; its subcommands' parsers are of
    this class too (argparse makes them of the parent's class)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", _Formatter)
        super().__init__(*args, **kwargs)


class _OneCommand:
    """The subcommands action, building the parser of one command only: the
    others' parsers are throwaways, never attached (and their modules are
    not imported, see `_parser`)."""

    def __init__(self, sub: Any, only: str | None) -> None:
        self._sub = sub
        self._only = only

    def add_parser(self, name: str, **kwargs: Any) -> argparse.ArgumentParser:
        if self._only is None or name == self._only:
            parser: argparse.ArgumentParser = self._sub.add_parser(name, **kwargs)
            return parser
        return _Parser(add_help=False)


def _parser(only: str | None = None) -> argparse.ArgumentParser:
    """The command line; with `only` (a command's name), that command alone.

    `shoal agent`'s start is timed (a whole cluster may start at once), and
    the other commands' parsers cost it about 4 ms; a client command such as
    `shoal members` is run in loops by scripts and health checks, and the
    modules the other commands' parsers live in (keys, history, events...)
    cost it more than its own work (issue 42)."""
    from shoal import __version__

    parser = _Parser(prog="shoal", description="shoal cluster membership")
    parser.add_argument("--version", action="version", version=f"shoal {__version__}")
    sub = _OneCommand(parser.add_subparsers(dest="command", required=True, metavar="COMMAND"),
                      only)  # fmt: skip

    agent = sub.add_parser("agent", help="run the agent in the foreground")
    agent.add_argument("--config", help="TOML config file (or $SHOAL_CONFIG)")
    agent.add_argument("--node-name", dest="node_name", help="unique node name (default: hostname)")
    agent.add_argument("--cluster", help="cluster name; agents of other clusters are ignored")
    agent.add_argument(
        "--bind", help="gossip address ADDR:PORT, UDP and TCP (default 0.0.0.0:7946)"
    )
    agent.add_argument("--advertise", help="address others should use, ADDR[:PORT]")
    agent.add_argument("--join", action="append", help="ADDR[:PORT] to join (repeatable)")
    agent.add_argument("--data-dir", dest="data_dir", help="state directory")
    agent.add_argument("--api", help="HTTP API address ADDR:PORT (default 127.0.0.1:7947)")
    agent.add_argument("--tag", dest="tags", action="append", help="KEY=VALUE (repeatable)")
    agent.add_argument("--profile", help="timing profile: lan, local or wan")
    agent.add_argument("--log-level", dest="log_level", help="debug, info, warning or error")
    agent.add_argument("--log-format", dest="log_format", help="auto, json or console")
    agent.add_argument(
        "--discovery",
        dest="discovery",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="find peers by multicast DNS-SD (default on)",
    )
    agent.add_argument("--discovery-interface", dest="discovery_interfaces", action="append",
                       help="IPv4 address of an interface for discovery (repeatable; default: "
                       "the advertised address)")  # fmt: skip

    agent.add_argument("--meta", dest="meta", action="store_const", const={"enabled": True},
                       help="run the metadata log (a preview: docs/metadata.md; "
                       "[meta] enabled in the config)")  # fmt: skip
    agent.add_argument("--bootstrap-expect", dest="bootstrap_expect", type=int,
                       help="eligible nodes to wait for before the first controller "
                       "election (default 3; 1 for a single node)")  # fmt: skip
    agent.add_argument(
        "--controller-handler",
        dest="controller_handler",
        help="command run on becoming or ceasing to be controller",
    )
    agent.add_argument("--event-handler", dest="event_handlers", action="append",
                       help="[EVENT=]COMMAND run on membership events (repeatable)")  # fmt: skip
    agent.add_argument("--encrypt", help="the cluster key, base64 (shoal keys generate); "
                       "seeds the keyring file")  # fmt: skip
    agent.add_argument("--api-socket", dest="api_socket", help="also serve the API on this "
                       "unix socket")  # fmt: skip
    agent.add_argument(
        "--api-token-file",
        dest="api_token_file",
        help="file holding the API token (docs/security.md)",
    )
    agent.add_argument("--dev", action="store_true",
                       help="a one-node cluster for trying shoal as any user: loopback only, "
                       "a fresh data directory removed at exit, no discovery, bootstrap "
                       "expect 1 (flags given beside it win)")  # fmt: skip
    if only == "agent":
        return parser

    members = sub.add_parser("members", help="list the members an agent knows")
    _api_arg(members)
    members.add_argument("--json", action="store_true", help="print JSON")
    members.add_argument("--status", help="only members in this state (alive, suspect, ...)")
    members.add_argument("--tag", action="append", default=[], metavar="KEY=REGEX",
                         help="only members whose tag KEY matches REGEX in full (repeatable; "
                         "Serf's -tag)")  # fmt: skip
    members.add_argument("--name", metavar="REGEX", help="only members whose name matches")
    members.add_argument("--health", choices=("passing", "warning", "critical"),
                         help="only members whose health checks say this (the worst of them; a "
                         "member without checks is passing)")  # fmt: skip
    members.add_argument(
        "--near",
        metavar="NODE",
        help="nearest to NODE first, by network coordinates (docs/coordinates.md)",
    )
    members.add_argument(
        "--healthy",
        action="store_true",
        help="only members whose checks all pass (--health passing)",
    )
    members.add_argument(
        "--detailed",
        action="store_true",
        help="add each member's protocol versions (min-max), feature level "
        "and part in the election (voter, or replaced), noting a member "
        "back with a new data directory and its old id",
    )

    tags = sub.add_parser("tags", help="set or delete this agent's tags (kept across restarts)")
    _api_arg(tags)
    tags.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", dest="set_tags")
    tags.add_argument("--delete", action="append", default=[], metavar="KEY")

    info = sub.add_parser("info", help="this agent: node, cluster, controller, counters")
    _api_arg(info)
    info.add_argument("--json", action="store_true", help="print JSON")

    features = sub.add_parser(
        "features",
        help="the cluster's feature level, and the operator's "
        "cap on it (lower it before a downgrade: docs/operations.md)",
    )
    _api_arg(features)
    cap = features.add_mutually_exclusive_group()
    cap.add_argument(
        "--cap",
        type=int,
        metavar="LEVEL",
        help="never run above LEVEL (written to the store: every controller obeys)",
    )
    cap.add_argument("--uncap", action="store_true", help="remove the cap")
    features.add_argument("--json", action="store_true", help="print JSON")

    join = sub.add_parser("join", help="ask an agent to join through addresses")
    _api_arg(join)
    join.add_argument("addrs", nargs="+", metavar="ADDR[:PORT]")

    leave = sub.add_parser("leave", help="make an agent leave the cluster")
    _api_arg(leave)

    monitor = sub.add_parser("monitor", help="follow an agent's membership events")
    _api_arg(monitor)
    monitor.add_argument("--text", action="store_true",
                         help="one readable line per event (default: JSON lines)")  # fmt: skip

    ctl = sub.add_parser("controller", help="show the controller and its epoch")
    _api_arg(ctl)
    ctl.add_argument("--json", action="store_true", help="print JSON")
    ctl.add_argument("--watch", action="store_true", help="print every change until Ctrl-C")

    rtt = sub.add_parser("rtt", help="estimated round trip between two members (Vivaldi "
                         "network coordinates; B: this agent)")  # fmt: skip
    _api_arg(rtt)
    rtt.add_argument("a", metavar="A")
    rtt.add_argument("b", metavar="B", nargs="?")
    rtt.add_argument("--json", action="store_true", help="print JSON")

    force = sub.add_parser("force-leave", help="remove a failed voter (from any agent: it asks "
                           "the controller's; a live member is refused)")  # fmt: skip
    _api_arg(force)
    force.add_argument("node")

    kv = sub.add_parser("kv", help="read and write the replicated key-value store")
    kv_sub = kv.add_subparsers(dest="kv_command", required=True, metavar="ACTION")
    for name, help_text in (
        ("put", "set KEY to VALUE (or stdin with -)"),
        ("get", "print the value of KEY"),
        ("delete", "delete KEY"),
        ("list", "list keys (and values) under a prefix"),
        (
            "watch",
            "print each change of the keys under a prefix as it "
            "happens, until Ctrl-C (resumes after a dropped connection)",
        ),
    ):
        p = kv_sub.add_parser(name, help=help_text)
        _api_arg(p)
        if name in ("list", "watch"):
            p.add_argument("prefix", nargs="?", default="")
        else:
            p.add_argument("key")
        if name == "list":
            p.add_argument("--values", action="store_true", help="print values too")
        if name == "put":
            p.add_argument("value", help="the value, or - to read it from stdin")
            p.add_argument(
                "--ephemeral",
                action="store_true",
                help="the key vanishes when this agent's member fails or leaves",
            )
        if name in ("put", "delete"):
            p.add_argument("--fence", metavar="EPOCH",
                           help="write under this controller epoch; refused once a newer one "
                           "is known or wrote the key")  # fmt: skip
        if name in ("get", "list", "watch"):
            p.add_argument("--json", action="store_true", help="print JSON with versions")

    demo = sub.add_parser("demo", help="run a demo cluster of agents on loopback")
    demo.add_argument("--nodes", type=int, default=5, help="agents to start (default 5)")
    demo.add_argument("--keep", action="store_true", help="keep the cluster running at the end")

    modules = {COMMANDS[only]} if only is not None else set(COMMANDS.values())
    if "history" in modules:
        from shoal.daemon.cli.history import add_parsers

        add_parsers(sub)
    if "keys" in modules:
        from shoal.daemon.cli.keys import add_parsers as add_keys_parsers

        add_keys_parsers(sub, _api_arg)
    if "liveness" in modules:
        from shoal.daemon.cli import liveness

        liveness.add_parsers(sub, _api_arg)
    if "events" in modules:
        from shoal.daemon.cli import events

        events.add_parsers(sub, _api_arg)
    if "meta" in modules:
        from shoal.daemon.cli import meta

        meta.add_parsers(sub, _api_arg)
    if "manual" in modules:
        from shoal.daemon.cli import manual

        manual.add_parsers(sub)
    if "recover" in modules:
        from shoal.daemon.cli import recover

        recover.add_parsers(sub)

    sim = sub.add_parser("simulate", help="simulate a cluster with the real protocol code")
    sim.add_argument("--nodes", type=int, default=200)
    sim.add_argument("--duration", type=float, default=120.0, help="simulated seconds")
    sim.add_argument("--loss", type=float, default=0.0, help="datagram loss, 0..1")
    sim.add_argument("--crash", type=int, default=0, help="nodes to crash during the run")
    sim.add_argument(
        "--crash-mode",
        dest="crash_mode",
        default="host",
        help="host: a crashed node's host goes silent (the worst case); "
        "process: only the agent dies, its host answers port unreachable",
    )
    sim.add_argument("--seed", type=int, default=1)
    sim.add_argument("--profile", default="lan", help="timing profile: lan, local or wan")
    sim.add_argument("--formed", action="store_true",
                     help="start with every node knowing every other (skips formation, "
                          "which takes hours at 10,000 nodes)")  # fmt: skip
    sim.add_argument("--json", action="store_true", help="print one JSON object")
    sim.add_argument(
        "--history-out",
        dest="history_out",
        metavar="DIR",
        help="churn the cluster and write every node's history log into DIR "
        "(with truth.json, what really happened)",
    )
    sim.add_argument(
        "--session-mean",
        dest="session_mean",
        type=float,
        default=600.0,
        help="with --history-out: mean session length, s (exponential)",
    )
    sim.add_argument(
        "--downtime-mean",
        dest="downtime_mean",
        type=float,
        default=300.0,
        help="with --history-out: mean downtime, s (exponential)",
    )
    sim.add_argument(
        "--leave-ratio",
        dest="leave_ratio",
        type=float,
        default=0.3,
        help="with --history-out: share of sessions ending in a leave, not a crash",
    )
    return parser


def main(argv: list[str] | None = None) -> None:
    """Entry point of the `shoal` console script."""
    # An agent's start allocates a few hundred thousand objects (modules,
    # classes, config) and frees almost none, so the collector's passes over
    # them are wasted: about 5 % of the start's CPU. The agent turns it back
    # on, with those objects frozen out of it, once it runs (Agent.run).
    gc.disable()
    exits = argv is None  # the console script: the process ends with this call
    argv = sys.argv[1:] if argv is None else argv
    first = argv[0] if argv else ""
    args = _parser(first if first in COMMANDS else None).parse_args(argv)
    if args.command != "agent":
        gc.enable()
    try:
        code = _run(args)
    except ShoalError as exc:
        print(f"shoal: {exc}", file=sys.stderr)
        code = exc.exit_code
    except KeyboardInterrupt:
        code = 130
    if exits:
        # The process ends here: the collection at exit would walk what is
        # left (a simulation: the whole cluster, held in cycles by its
        # observers) only to free what the exit frees anyway. Measured: 0.6 s
        # of CPU after `shoal simulate --nodes 1000 --duration 60`.
        gc.freeze()
    sys.exit(code)


def _run(args: argparse.Namespace) -> int:
    command: str = args.command
    if command == "agent":
        return _agent(args)
    if command == "demo":
        from shoal.daemon.cli.demo import run_demo
        from shoal.daemon.cli.remote import agent_errors

        with agent_errors():
            return run_demo(args.nodes, keep=args.keep)
    if command in ("history", "churn"):
        from shoal.daemon.cli import history as history_cli

        return (
            history_cli.history_command(args)
            if command == "history"
            else history_cli.churn_command(args)
        )
    if command == "recover":
        from shoal.daemon.cli.recover import recover_command

        return recover_command(args)
    if command == "simulate":
        from shoal.sim.report import simulate_command

        return simulate_command(args)
    if command in ("completion", "man"):
        from shoal.daemon.cli import manual

        return manual.completion_command(args, _parser) if command == "completion" else \
            manual.man_command()  # fmt: skip
    if command == "keys" and args.keys_command == "generate":
        from shoal.daemon.cli.keys import generate

        return generate()
    from shoal.daemon.cli.remote import remote_command

    return remote_command(args)


def _agent(args: argparse.Namespace) -> int:
    from shoal.daemon import config as config_mod

    flags: dict[str, Any] = {
        k: getattr(args, k)
        for k in (
            "config",
            "node_name",
            "cluster",
            "bind",
            "advertise",
            "join",
            "data_dir",
            "api",
            "tags",
            "profile",
            "log_level",
            "log_format",
            "discovery",
            "discovery_interfaces",
            "bootstrap_expect",
            "controller_handler",
            "event_handlers",
            "encrypt",
            "api_socket",
            "api_token_file",
            "meta",
        )  # fmt: skip
    }
    dev_dir = _dev_defaults(flags) if args.dev else None
    try:
        cfg = config_mod.load(flags)
        from shoal.daemon import logging as shoal_logging

        shoal_logging.configure(cfg.log_level, cfg.log_format)
        import uvloop

        from shoal.daemon.agent import Agent

        agent = Agent(cfg, flags)
        return uvloop.run(agent.run())
    finally:
        if dev_dir is not None:
            import shutil

            shutil.rmtree(dev_dir, ignore_errors=True)


def _dev_defaults(flags: dict[str, Any]) -> str:
    """`shoal agent --dev`: what a user trying shoal on a laptop needs, where
    no flag says otherwise (Consul's `-dev`). Returns the data directory,
    made here and removed at exit: nothing of a dev agent is kept."""
    import tempfile

    data_dir = tempfile.mkdtemp(prefix="shoal-dev-")
    defaults = {"data_dir": data_dir, "bind": "127.0.0.1:7946", "api": "127.0.0.1:7947",
                "discovery": False, "bootstrap_expect": 1, "profile": "local",
                "log_format": "console"}  # fmt: skip
    for key, value in defaults.items():
        if flags.get(key) is None:
            flags[key] = value
    return data_dir
