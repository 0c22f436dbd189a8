"""`shoal snapshot save | inspect | restore`: backups (docs/operations.md, "Backups").

`save FILE` asks the agent for a backup (`GET /v1/snapshot`: consistent
through the controller), checks it as `inspect` would, and writes it to
FILE atomically (a temporary file renamed). `inspect FILE` reads the file
here, without an agent: it prints the manifest and verifies every sum.
`restore FILE [--kv merge|replace]` checks the file here, then sends it to
the agent, which replaces the metadata state through the log and merges or
replaces the kv records; `restore FILE --offline --data-dir DIR --node-name
NAME` seeds an empty data directory instead (daemon/disk/seed.py), for a
new one-voter cluster.

A bad file (damaged, cut short, foreign, of a newer format), a refusal by
the agent as given (4xx) or a non-empty directory is one line on stderr and
exit 2; not applied (503) or unknown (504) is one line and exit 1.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from shoal.kernel.errors import ApiError, ConfigError

_TIMEOUT_S = 300.0  # a backup of 10^5 keys takes seconds; the restore's kv writes more


def add_parsers(sub: Any, api_arg: Callable[[argparse.ArgumentParser], None]) -> None:
    """Add `snapshot` and its actions to the CLI's subcommands."""
    snapshot = sub.add_parser("snapshot", help="save, inspect and restore backups of the "
                              "metadata log and the kv store")  # fmt: skip
    actions = snapshot.add_subparsers(dest="snapshot_command", required=True, metavar="ACTION")
    p = actions.add_parser("save", help="save a consistent backup into FILE")
    api_arg(p)
    p.add_argument("file", metavar="FILE")
    p = actions.add_parser("inspect", help="print FILE's manifest and verify its checksums")
    p.add_argument("file", metavar="FILE")
    p = actions.add_parser("restore", help="restore FILE into the running cluster, or "
                           "(--offline) into an empty data directory")  # fmt: skip
    api_arg(p)
    p.add_argument("file", metavar="FILE")
    p.add_argument("--kv", choices=("merge", "replace"), default="merge",
                   help="merge: write each backed-up kv record anew (default); replace: "
                   "also delete the live kv keys the backup does not hold")  # fmt: skip
    p.add_argument(
        "--offline",
        action="store_true",
        help="seed the empty --data-dir for a new one-voter cluster",
    )
    p.add_argument(
        "--data-dir",
        dest="data_dir",
        metavar="DIR",
        help="with --offline: the new, empty data directory",
    )
    p.add_argument(
        "--node-name",
        dest="node_name",
        metavar="NAME",
        help="with --offline: the name the seeded agent will run under",
    )
    p.add_argument(
        "--cluster", metavar="NAME", help="with --offline: the cluster name (default: the backup's)"
    )


def snapshot_command(args: argparse.Namespace) -> int:
    """Run one `shoal snapshot` action; returns the exit code."""
    action: str = args.snapshot_command
    if action == "inspect":
        return _inspect(Path(args.file))
    if action == "save":
        return _save(args)
    if args.offline:
        return _offline(args)
    if args.data_dir or args.node_name or args.cluster:
        raise ConfigError("--data-dir, --node-name and --cluster go with --offline")
    return _restore(args)


def _read_file(path: Path) -> Any:
    from shoal.daemon.backup import BackupError, read_backup

    try:
        data = path.read_bytes()
    except OSError as exc:
        raise BackupError(f"{path}: cannot read it: {exc.strerror}") from None
    return data, read_backup(data, str(path))


def _inspect(path: Path) -> int:
    from shoal.daemon.backup import describe

    _, backup = _read_file(path)
    for line in describe(backup.manifest):
        print(line)
    print(f"{'checksums':<15} ok ({len(backup.snapshot.data)} bytes of metadata state, "
          f"{len(backup.records)} kv records)")  # fmt: skip
    return 0


def _request(args: argparse.Namespace, method: str, path: str,
             body: bytes | None = None) -> tuple[int, bytes]:  # fmt: skip
    """One request to the agent; its status and body."""
    import http.client

    from shoal.client.endpoint import headers, parse_endpoint, resolve_token
    from shoal.daemon.cli.remote import check_api

    check_api(args)
    endpoint = parse_endpoint(args.api)
    try:
        token = resolve_token(None, args.token_file or None)
    except (OSError, ValueError) as exc:
        raise ConfigError(f"--token-file: {exc}") from None
    conn = endpoint.connect(_TIMEOUT_S)
    sent = headers(token, body)
    if body is not None:
        sent["Content-Type"] = "application/x-tar"
    try:
        conn.request(method, path, body=body, headers=sent)
        answer = conn.getresponse()
        return answer.status, answer.read()
    except (OSError, http.client.HTTPException) as exc:
        raise ApiError(f"no agent answered at {endpoint.base} ({exc}); "
                       "is it running? (--api, $SHOAL_API)") from None  # fmt: skip
    finally:
        conn.close()


def _refusal(status: int, body: bytes) -> int:
    """Print the agent's refusal; the exit code (2: as given, 1: try again)."""
    try:
        message = json.loads(body).get("error", "")
    except (ValueError, AttributeError):
        message = body[:200].decode(errors="replace")
    print(f"shoal: the agent refused ({status}): {message}", file=sys.stderr)
    return 2 if 400 <= status < 500 else 1


def _save(args: argparse.Namespace) -> int:
    from shoal.daemon.backup import BackupError, read_backup

    target = Path(args.file)
    status, body = _request(args, "GET", "/v1/snapshot")
    if status != 200:
        return _refusal(status, body)
    try:
        backup = read_backup(body, "the agent's backup")
    except BackupError as exc:  # damaged on its way here: nothing written
        raise ApiError(str(exc)) from None
    tmp = target.with_name(target.name + ".part")
    try:
        with open(tmp, "wb") as out:
            out.write(body)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, target)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise ConfigError(f"{target}: cannot write it: {exc.strerror}") from None
    m = backup.manifest
    print(f"Saved {target}: revision {m['revision']}, {m['meta_keys']} metadata keys, "
          f"{m['kv_records']} kv records, {len(body)} bytes")  # fmt: skip
    return 0


def _restore(args: argparse.Namespace) -> int:
    data, backup = _read_file(Path(args.file))  # checked here first: refused before sending
    status, body = _request(args, "POST", f"/v1/snapshot/restore?kv={args.kv}", data)
    if status != 200:
        return _refusal(status, body)
    done = json.loads(body)
    skipped = done.get("kv_skipped_ephemeral")  # None: an agent older than the count
    print(f"Restored {args.file}: {done['meta_keys']} metadata keys at revision "
          f"{done['revision']}; kv ({args.kv}): {done['kv_written']} written, "
          f"{done['kv_deleted']} deleted, {done['kv_refused']} refused"
          + ("" if skipped is None else f", {skipped} skipped (live ephemeral keys)"))  # fmt: skip
    return 0


def _offline(args: argparse.Namespace) -> int:
    from shoal.daemon.disk.seed import seed_data_dir

    if not args.data_dir or not args.node_name:
        raise ConfigError("--offline needs --data-dir DIR and --node-name NAME")
    _, backup = _read_file(Path(args.file))
    cluster = args.cluster or backup.manifest.get("cluster", "shoal")
    seeded = seed_data_dir(backup, Path(args.data_dir), args.node_name, cluster)
    print(f"Seeded {args.data_dir} for cluster {cluster!r}: {seeded.meta_keys} metadata keys "
          f"at revision {seeded.revision}, {seeded.kv_records} kv records; voter "
          f"{args.node_name} alone (new lineage {seeded.lineage}, node id {seeded.node_id}). "
          f"Start it: shoal agent --node-name {args.node_name} --cluster {cluster} "
          f"--data-dir {args.data_dir}; then join the others")  # fmt: skip
    return 0
