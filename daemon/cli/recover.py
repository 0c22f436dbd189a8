"""`shoal recover plan | apply`: the way out of a lost majority (issue 39).

Two steps, run on each survivor with its agent stopped:

1. `shoal recover plan --survivors a,b` reads this survivor's data
   directory, probes for the voters left off the list (daemon/recover.py)
   and prints its summary: one word.
2. `shoal recover apply --survivors a,b --summaries W1,W2` (every
   survivor's word, the same on each) computes the decision every survivor
   computes alike (node/recovery.py: the base, the new configuration, the
   epoch), probes again, and writes it.

Why two steps and not a meeting over the network: the survivors' agents
are stopped and the network may be the reason the cluster is in trouble;
the operator sees the base and the new epoch before anything is written,
and each survivor checks that its own disk is still what its word says.
"""

from __future__ import annotations

import argparse
from typing import Any

from shoal.kernel.errors import ConfigError


def add_parsers(sub: Any) -> None:
    """`recover` and its two verbs."""
    rec = sub.add_parser("recover", help="make the surviving voters the voter set when most "
                         "are lost for good (offline, on each survivor)")  # fmt: skip
    verbs = rec.add_subparsers(dest="recover_command", metavar="{plan,apply}", required=True)
    plan = verbs.add_parser("plan", help="print this survivor's summary (writes nothing)")
    apply = verbs.add_parser("apply", help="write the recovery decided from every survivor's "
                             "summary")  # fmt: skip
    for verb in (plan, apply):
        verb.add_argument("--survivors", required=True,
                          help="the surviving nodes' names, comma-separated (the same list "
                          "on each)")  # fmt: skip
        verb.add_argument("--config", help="TOML config file (or $SHOAL_CONFIG)")
        verb.add_argument("--data-dir", dest="data_dir", help="this node's state directory")
        verb.add_argument("--node-name", dest="node_name",
                          help="this node's name (default: the name its voter configuration "
                          "gives this data directory)")  # fmt: skip
        verb.add_argument("--cluster", help="the cluster's name (default: the config's)")
        verb.add_argument("--probe", action="append", default=[], metavar="HOST[:PORT]",
                          help="a voter left off the list: refuse if it answers there "
                          "(its gossip address; repeat for each)")  # fmt: skip
        verb.add_argument("--no-discovery", dest="no_discovery", action="store_true",
                          help="do not look for the voters left off by multicast DNS")  # fmt: skip
    plan.add_argument(
        "--summaries",
        default="",
        help="every survivor's summary, comma-separated: print the decision too",
    )
    apply.add_argument(
        "--summaries",
        required=True,
        help="every survivor's summary, comma-separated, as plan printed them",
    )


def recover_command(args: argparse.Namespace) -> int:
    """Run `recover plan` or `recover apply` (module docstring)."""
    from shoal.daemon import config as config_mod
    from shoal.daemon import recover as io
    from shoal.node import recovery

    survivors = [n.strip() for n in args.survivors.split(",") if n.strip()]
    if not survivors or len(set(survivors)) != len(survivors):
        raise ConfigError("--survivors: expected distinct node names, comma-separated")
    flags = {"config": args.config, "data_dir": args.data_dir,
             "node_name": args.node_name or "-", "cluster": args.cluster}  # fmt: skip
    cfg = config_mod.load({k: v for k, v in flags.items() if v is not None})
    depth = cfg.store.tree_depth
    _probe_addresses(args, cfg)  # before the data directory is opened
    me = io.read_survivor(cfg.data_dir, depth, cfg.cluster, cfg.node_name)
    if me.name not in survivors:
        raise ConfigError(f"--survivors: this node, {me.name}, is not on the list")
    _probe_discovery(args, cfg, me, survivors)
    try:
        words = [w.strip() for w in args.summaries.split(",") if w.strip()]
        summaries = [recovery.from_token(w) for w in words]
        decision = recovery.plan(survivors, summaries) if summaries else None
    except recovery.RecoveryRefused as exc:
        raise ConfigError(f"recover: {exc}") from None
    if summaries and me not in summaries:
        raise ConfigError(f"recover: the summary of {me.name} given is not what its data "
                          "directory holds now: run `shoal recover plan` here again")  # fmt: skip
    if args.recover_command == "plan":
        return _print_plan(me, survivors, summaries, decision)
    assert decision is not None
    io.write_recovery(cfg.data_dir, depth, cfg.cluster, me, decision)
    for line in recovery.describe(decision, summaries):
        print(line)
    print(f"recovered {me.name}: start its agent (every survivor's, once each has applied)")
    return 0


def _probe_addresses(args: argparse.Namespace, cfg: Any) -> None:
    """Refuse while an agent answers at a `--probe` address (daemon/recover.py)."""
    from shoal.daemon import recover as io

    port = cfg.bind[1]
    answered = io.answering([io.parse_probe(p, port) for p in args.probe])
    if answered:
        raise ConfigError(f"recover: an agent answers at {', '.join(answered)}: a voter left "
                          "off the list still runs; stop it, or list it as a survivor")  # fmt: skip


def _probe_discovery(args: argparse.Namespace, cfg: Any, me: Any, survivors: list[str]) -> None:
    """Refuse while multicast DNS finds a voter left off the list."""
    from shoal.daemon import recover as io

    left_off = set(me.config.voters if me.config is not None else ()) - set(survivors)
    if cfg.discovery and not args.no_discovery and left_off:
        host = (cfg.advertise or cfg.bind)[0]
        interfaces = list(cfg.discovery_interfaces) or ([host] if host != "0.0.0.0" else None)
        running = sorted(io.advertised(interfaces, cfg.cluster, cfg.discovery_service) & left_off)
        if running:
            raise ConfigError(f"recover: {', '.join(running)} still runs (multicast DNS): "
                              "a voter left off the list; stop it, or list it as a "
                              "survivor")  # fmt: skip


def _print_plan(me: Any, survivors: list[str], summaries: list[Any], decision: Any) -> int:
    from shoal.node import recovery

    c = me.config
    print(f"{me.name}: last entry epoch {me.last_epoch} index {me.last_index}, snapshot "
          f"{me.snapshot_index}, granted epoch {me.granted_epoch}")  # fmt: skip
    if c is not None:
        print(f"voters: {', '.join(c.voters)} (version {c.version}, recovery {c.recovery})")
    print(f"summary: {recovery.to_token(me)}")
    if decision is not None:
        for line in recovery.describe(decision, summaries):
            print(line)
    else:
        print(f"next: run `shoal recover plan` on each of {', '.join(survivors)}, then on each "
              "`shoal recover apply --survivors ... --summaries W1,W2,...`")  # fmt: skip
    return 0
