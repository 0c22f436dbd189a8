"""What the metadata log core reports, and its settings and counters."""

from __future__ import annotations

import msgspec

from shoal.kernel.counters import Counters
from shoal.metalog.state import TxnApplied


class MetaConfig(msgspec.Struct, frozen=True):
    """The log's timing, and its snapshots (metalog/snapshot.py)."""

    heartbeat_s: float = 0.1  # the leader's heartbeat (and resend) interval
    answer_timeout_s: float = 3.0  # a forwarded write or read unanswered: unknown
    snapshot_every: int = 10_000  # applied entries between snapshots (0: never)
    keep_entries: int = 1_000  # entries kept behind a snapshot, for followers slightly behind
    chunk_bytes: int = 64 * 1024  # a snapshot is sent in chunks of this size
    chunk_window: int = 4  # chunks in flight to one follower
    max_snapshot_bytes: int = 512 * 1024 * 1024  # the largest snapshot a follower takes


class MetaCounters(Counters):
    """What the log did, for metrics."""

    appended: int = 0
    committed: int = 0
    appends_refused_epoch: int = 0  # from a deposed controller
    appends_refused_gap: int = 0  # prev entry not held: the leader backs up
    proposals_not_applied: int = 0
    proposals_unknown: int = 0
    reads_served: int = 0
    snapshots_taken: int = 0
    snapshots_installed: int = 0  # received whole from the leader, checked, installed
    snapshot_chunks_sent: int = 0
    snapshot_chunks_refused: int = 0  # damaged (checksum), sent again
    snapshot_chunks_too_large: int = 0  # of a snapshot over max_snapshot_bytes: dropped
    snapshot_chunks_inconsistent: int = 0  # at odds with the size or digest declared: dropped
    sessions_expired: int = 0  # ends appended by this node as leader, for a silent session
    keepalives_served: int = 0  # renewal requests answered as leader


class ProposalDone(msgspec.Struct, frozen=True):
    """The outcome of this node's proposal `pid` (OUTCOME_*; `revision`:
    the commit's, or the key's current one on a conflict; `txn`: a
    committed transaction's branch and results)."""

    pid: int
    outcome: int
    revision: int
    txn: TxnApplied | None = None


class ReadDone(msgspec.Struct, frozen=True):
    """The answer to this node's read `rid` (`ok` False: not served)."""

    rid: int
    ok: bool
    value: bytes | None
    mod_revision: int
    revision: int


class KeepaliveDone(msgspec.Struct, frozen=True):
    """The answer to this node's renewal `rid` (`ok` False: not served, no
    controller answered: try again; else every session renewed but
    `ended`)."""

    rid: int
    ok: bool
    ended: tuple[bytes, ...] = ()


class SessionEnded(msgspec.Struct, frozen=True):
    """Session `id` ended at `revision` (applied here): its metadata keys
    went with it; the agent hides its kv keys (`reason`: state.END_*)."""

    id: bytes
    reason: int
    revision: int
