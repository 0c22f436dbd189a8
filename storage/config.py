"""SyncConfig: the replicated store's settings (config file table `[store]`).

Every default carries the reason for its value.
"""

from __future__ import annotations

import msgspec

from shoal.storage.merkle import MAX_DEPTH

# A responder stops adding records to one answer at this many bytes (and
# says `more`); the initiator then starts the next session at once. Frames
# are capped at 64 MiB, and a node catching up on a large store should not
# hold a single giant frame in memory.
SESSION_BUDGET_BYTES = 4 * 1024 * 1024


class SyncConfig(msgspec.Struct, frozen=True):
    """Anti-entropy and replication settings (config file: `[store]`)."""

    # Seconds between anti-entropy sessions. A session between equal
    # replicas is one round trip of ~40 bytes, so this can be short;
    # memberlist's push-pull of the member list runs every 30 s. While
    # sessions find the replicas equal and nothing is written, the interval
    # doubles, up to 4x (20 s).
    sync_interval_s: float = 5.0
    # Members a fresh write is pushed to at once (Serf's user events use
    # the gossip fan-out, 3 on a LAN).
    push_fanout: int = 3
    # A write goes to every alive member while there are at most this many;
    # beyond, to push_fanout members, who forward what is news to them.
    push_all_max: int = 64
    # The forwarding in larger clusters (storage/antientropy.py); off: only
    # the writer pushes.
    forward_pushes: bool = True
    # 16**4 = 65,536 leaves: ~15 keys per leaf at a million keys.
    tree_depth: int = 4
    # A remote HLC more than this ahead of our wall clock is refused.
    # CockroachDB's default maximum clock offset is 500 ms; a LAN of bare
    # metal without NTP discipline drifts more, so allow a minute.
    max_skew_ms: int = 60_000
    # An agent whose clock is further than this from its peers' (measured
    # from probe round trips, membership/clockskew.py) refuses writes (503):
    # its stamps would make them win or lose against real order. LAN clocks
    # under NTP agree within milliseconds; CockroachDB stops a node at 80 %
    # of its 500 ms maximum offset. A second leaves room for a VM without
    # NTP for a day (tens to hundreds of ms of drift).
    max_offset_ms: int = 1000
    # How long a delete is kept. A replica away for longer than this may
    # bring a deleted key back (Cassandra's gc_grace_seconds, 10 days by
    # default, has the same meaning); one day suits a LAN cluster.
    tombstone_grace_s: float = 86_400.0
    session_timeout_s: float = 10.0
    record_switch_count: int = 16
    gc_interval_s: float = 60.0
    # How long a user event (`shoal event`) is kept and delivered: a member
    # down or cut off for less than this still runs its handlers.
    event_retention_s: float = 3600.0
    mtu_bytes: int = 1400

    def __post_init__(self) -> None:
        if self.sync_interval_s <= 0 or self.session_timeout_s <= 0 or self.gc_interval_s <= 0:
            raise ValueError("sync_interval_s, session_timeout_s and gc_interval_s must be > 0")
        if not 1 <= self.tree_depth <= MAX_DEPTH:
            raise ValueError(f"tree_depth must be 1 to {MAX_DEPTH}, got {self.tree_depth}")
        if self.push_fanout < 0 or self.record_switch_count < 0 or self.max_skew_ms < 0:
            raise ValueError("push_fanout, record_switch_count and max_skew_ms must be >= 0")
        if self.max_offset_ms <= 0:
            raise ValueError("max_offset_ms must be > 0")
        if self.tombstone_grace_s < 0 or self.mtu_bytes < 512:
            raise ValueError("tombstone_grace_s must be >= 0 and mtu_bytes at least 512")
