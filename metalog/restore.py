"""Restoring a backup into a running cluster: the keys replaced through the log.

`shoal snapshot restore FILE` (daemon/api/snapshot.py) proposes one
`MetaRestore` entry carrying a backup's metadata state, as a snapshot
encodes it (metalog/snapshot.py: its bytes are opaque here, decoded only by
`snapshot.restore`). Every node applies it at the same index, as any entry:

- every key the state held goes; every key of the backup is put, its
  create and mod revision the entry's index and its version 1 (a change at
  this revision, as etcd counts them: the backup's own revisions belong to
  another history, and a `cas` on one of them must not match by accident);
- sessions (ZooKeeper's ephemeral nodes): the open sessions stay open, and
  the keys they own now stay as they are (a restore does not take a lock
  from its live holder); the backup's session-owned keys are not restored
  (their sessions are of the past: their holders write them again, as
  after any session's end). A live session's key wins over the backup's
  key of the same name;
- the dedup memory of proposals stays (it is about this log's proposals);
- the watches are told to resync: `changes` set back to None, as when a
  snapshot is installed (daemon/metawatch.py ends every stream and answers
  a resume from before the restore with 410: list again).

One entry, not a staged series: a state staged over several entries would
have to survive a snapshot taken half-way (the snapshot encoding is not
this module's), and a restore is rare. The price is the entry's size: it
travels in one `Propose` and one `Append` each way (a stream frame is at
most 64 MiB, kernel/codec.py), is held in the log until the next
compaction, and is hashed and decoded on every node's loop (measured in
bench/backup.py). So the encoded state is capped at `MAX_RESTORE_BYTES`;
a larger backup is restored offline into a new cluster
(`shoal snapshot restore FILE --offline --data-dir DIR`, docs/operations.md).

A damaged state (its digest does not match, or it does not decode) changes
nothing and is a `Conflict`: every node holds the same bytes, so every node
refuses it alike; the API checks it before proposing anyway. Pure.
"""

from __future__ import annotations

from shoal.metalog.snapshot import Snapshot, restore
from shoal.metalog.state import Applied, Conflict, KeyState, MetaRestore, MetaState

# The largest encoded state an online restore carries: under a stream
# frame's 64 MiB with room for the entry's framing.
MAX_RESTORE_BYTES = 48 * 1024 * 1024


def restored_keys(op: MetaRestore, index: int,
                  live: dict[bytes, KeyState]) -> dict[bytes, KeyState] | None:  # fmt: skip
    """The keys after `op` at `index` over the `live` ones, or None when
    its state is damaged (module docstring)."""
    if len(op.data) > MAX_RESTORE_BYTES:
        return None
    try:
        backup = restore(Snapshot(index, 0, op.data, op.digest))
    except ValueError:
        return None
    keys = {key: KeyState(held.value, index, index, 1)
            for key, held in backup.keys.items() if not held.session}  # fmt: skip
    keys.update((key, held) for key, held in live.items() if held.session)
    return keys


def replace_keys(state: MetaState, index: int, op: MetaRestore) -> Applied | Conflict:
    """Apply `op` at `index` (its revision is set already): the keys replaced
    and the watches told to resync (module docstring). The sessions and the
    keys they own are unchanged, so `owned` still holds."""
    keys = restored_keys(op, index, state.keys)
    if keys is None:
        return Conflict(0)
    state.keys = keys
    state.changes = None
    return Applied(index)


MetaState.restorer = replace_keys  # how state.py applies a `MetaRestore` (`MetaState.restorer`)
