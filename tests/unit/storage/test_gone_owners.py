"""An ended session's (or a failed member's) gone-at time is kept only as
long as it can still hide something: the tombstone grace, while nothing
of it is held here (Replica.collect_gone)."""

import random

from shoal.storage import hlc
from shoal.storage.antientropy import AntiEntropy
from shoal.storage.config import SyncConfig
from shoal.storage.records import Record
from shoal.storage.store import MemoryStore, Replica

WALL = 1_800_000_000_000
SKEW_MS = 60_000
GRACE_MS = 3_600_000
SID = b"\x5e" * 16  # a session's id, owner of ephemeral keys
PEER = b"\xbb" * 16


def replica() -> Replica:
    return Replica(MemoryStore(2), b"\xaa" * 16, SKEW_MS, GRACE_MS)


def owned(key: bytes, value: bytes | None, wall_ms: int, owner: bytes = SID) -> Record:
    """A peer's version of `key` stamped at `wall_ms`, owned by `owner`."""
    return Record(key, value, hlc.pack(wall_ms, 1), PEER, 0, owner if value else b"")


def test_an_ended_session_is_forgotten_after_the_grace_and_not_before():
    """The session's key is hidden from its end; its gone-at time is kept
    through the grace (a late copy of its key stays hidden), then dropped
    once no key of it is held here and it is not gone now."""
    rep = replica()
    rep.merge([owned(b"lock", b"me", WALL - 1_000)], WALL)
    rep.owner_gone(SID, WALL, "session-ended")
    assert not rep.visible(rep.get(b"lock")) and rep.gone_owners == 1
    rep.merge([owned(b"lock", None, WALL + 10)], WALL + 10)  # the controller's delete
    rep.owner_back(SID)  # the node stopped sweeping for it (a minute on)
    late = owned(b"other", b"me", WALL - 500)  # a copy from a peer not yet synced
    assert rep.merge([late], WALL + GRACE_MS - 1) == [late]
    assert not rep.visible(late)  # still hidden: the gone-at time is kept
    assert rep.collect_gone(WALL + GRACE_MS - 1) == 0 and rep.gone_owners == 1
    rep.merge([owned(b"other", None, WALL + GRACE_MS)], WALL + GRACE_MS)  # deleted too
    assert rep.collect_gone(WALL + GRACE_MS + 1) == 1
    assert rep.gone_owners == 0 and rep.counters.owners_forgotten == 1
    assert rep.collect_gone(WALL + 2 * GRACE_MS) == 0  # once


def test_an_owner_still_gone_or_still_owning_keys_here_is_kept():
    """A member still failed, or a session whose key this node still holds
    (hidden), keeps its gone-at time past the grace; it goes once that ends."""
    rep = replica()
    member = b"\x0d" * 16
    rep.merge([owned(b"held", b"v", WALL - 1_000)], WALL)
    rep.owner_gone(SID, WALL, "session-ended")
    rep.owner_back(SID)
    rep.owner_gone(member, WALL, "failed")
    after = WALL + GRACE_MS + 1
    assert rep.collect_gone(after) == 0 and rep.gone_owners == 2
    assert not rep.visible(rep.get(b"held"))  # still hidden
    rep.owner_back(member)
    assert rep.collect_gone(after + 1) == 1 and rep.gone_owners == 1
    rep.merge([owned(b"held", None, after)], after)
    assert rep.collect_gone(after + 2) == 1 and rep.gone_owners == 0


def test_an_owner_gone_again_is_kept_from_its_latest_going():
    """Gone twice: the grace counts from the later time."""
    rep = replica()
    rep.owner_gone(SID, WALL, "failed")
    rep.owner_back(SID)
    rep.owner_gone(SID, WALL + GRACE_MS, "failed")
    rep.owner_back(SID)
    assert rep.collect_gone(WALL + GRACE_MS + 1) == 0 and rep.gone_owners == 1
    assert rep.collect_gone(WALL + 2 * GRACE_MS + 1) == 1 and rep.gone_owners == 0


def test_the_sync_core_forgets_them_on_its_collection_rounds():
    """Wired: the anti-entropy core's periodic collection (with the
    tombstones') forgets an ended session once the grace has passed."""
    cfg = SyncConfig()
    grace_ms = 10_000
    rep = Replica(MemoryStore(cfg.tree_depth), b"\x01" * 16, cfg.max_skew_ms, grace_ms)
    core = AntiEntropy(rep, cfg, random.Random(1), lambda rng, k: [], WALL)
    core.start(0.0)
    rep.owner_gone(SID, WALL, "session-ended")  # at the core's time 0
    rep.owner_back(SID)
    now = 0.0
    while rep.gone_owners and now < 4 * cfg.gc_interval_s:
        now += 1.0
        core.tick(now)
    assert rep.gone_owners == 0 and rep.counters.owners_forgotten == 1
    assert grace_ms / 1000 < now <= grace_ms / 1000 + cfg.gc_interval_s + 1
