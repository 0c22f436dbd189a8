"""`shoal snapshot restore FILE --offline --data-dir DIR --node-name NAME`:
a new data directory seeded from a backup, for a new cluster.

etcdutl's rules: only an empty (or absent) directory is seeded, never one
that holds anything (an operator's typo must not overwrite a live node's
disk); and the result is a *new* cluster: a new data directory id (the node
id, made as for any new directory: daemon/disk/dataformat.py) and a new
voter lineage (election/voters.py), so that nothing of the old cluster (an
old voter started again, its notices and votes) is taken for part of this
one. The cluster *name* is the backup's unless the operator gives another.

What is written, in one directory made by `DataDir` as an agent makes it:

- the metadata log's snapshot: the backup's state at its revision and
  epoch, the log empty behind it (metalog/log.py's `resume` starts there);
- the election state: granted epoch = the backup's epoch (the first
  controller's epoch is above it, so above every entry's), and the voter
  configuration `[NAME]` alone, with this directory's id, at version 2
  (election/voters.py: level 2 configurations carry ids);
- the kv records, each with its version as backed up (a newer write wins
  as usual once the cluster runs).

The agent started on it with `--node-name NAME` is then the only voter:
it elects itself, and the agents that join it are promoted one at a time
as voters are (docs/operations.md, "Restoring").
"""

from __future__ import annotations

import os
from pathlib import Path

import msgspec

from shoal.daemon.backup import Backup, BackupError
from shoal.daemon.disk.datadir import DataDir
from shoal.election.voters import VoterConfig
from shoal.metalog.snapshot import PersistSnapshot
from shoal.storage.config import SyncConfig

_VERSION = 2  # a configuration with ids (election/voters.py)


class Seeded(msgspec.Struct, frozen=True):
    """What an offline restore wrote."""

    revision: int
    meta_keys: int
    kv_records: int
    lineage: str
    node_id: str


def seed_data_dir(backup: Backup, path: Path, name: str, cluster: str,
                  tree_depth: int | None = None) -> Seeded:  # fmt: skip
    """Seed the empty directory `path` with `backup` for node `name` of
    `cluster` (module docstring).

    Raises:
        BackupError: `path` is not empty (nothing written there).
        DataDirError: it cannot be made.
    """
    if path.exists() and (not path.is_dir() or any(path.iterdir())):
        raise BackupError(
            f"{path} is not empty: an offline restore seeds a new data "
            "directory only; give an empty or absent one (nothing written)"
        )
    depth = SyncConfig().tree_depth if tree_depth is None else tree_depth
    data_dir = DataDir(path, depth, cluster)
    try:
        node_id = data_dir.load_identity().node_id
        snapshot = backup.snapshot
        data_dir.save_snapshot(PersistSnapshot(snapshot, snapshot.index))
        lineage = os.urandom(8)
        data_dir.save_election(snapshot.epoch, VoterConfig(lineage, _VERSION, (name,),
                                                           (node_id,)))  # fmt: skip
        data_dir.engine.records.apply(list(backup.records), [])
        data_dir.engine.sync()
    finally:
        data_dir.close()
    return Seeded(snapshot.index, int(backup.manifest.get("meta_keys", 0)),
                  len(backup.records), lineage.hex(), node_id.hex())  # fmt: skip
