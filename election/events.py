"""What the election core reports: events (past tense, like membership
events), the write it persists, and its counters."""

from __future__ import annotations

import msgspec

from shoal.election.voters import VoterConfig
from shoal.kernel.counters import Counters


class ControllerElected(msgspec.Struct, frozen=True):
    """This node became controller with `epoch`."""

    epoch: int


class ControllerLost(msgspec.Struct, frozen=True):
    """This node stopped being controller (`reason`: expired, released, merged,
    superseded)."""

    epoch: int
    reason: str


class ControllerChanged(msgspec.Struct, frozen=True):
    """The controller this node knows of changed (`node` empty: none known)."""

    node: str
    epoch: int


class VotersChanged(msgspec.Struct, frozen=True):
    """This node adopted a new voter configuration."""

    config: VoterConfig


class VoterReplaced(msgspec.Struct, frozen=True):
    """Voter `name` came back with a new data directory (`new_id`, where the
    configuration names `old_id`): the controller removes the old identity,
    which never votes again, and may add the new one as a new voter."""

    name: str
    old_id: bytes
    new_id: bytes


class PersistElection(msgspec.Struct, frozen=True):
    """The highest epoch this node granted and its voter configuration must
    be durable before any grant based on them leaves the node."""

    granted_epoch: int
    config: VoterConfig | None


class ElectionCounters(Counters):
    """What the election did, for metrics."""

    campaigns: int = 0
    elected: int = 0
    renewals: int = 0
    renewals_failed: int = 0
    grants: int = 0
    rejects: int = 0
    voter_changes: int = 0
    stale_messages: int = 0
    resends: int = 0  # requests asked again of voters that had not answered
    pre_votes: int = 0  # pre-votes this node sent as a candidate
    pre_votes_answered: int = 0  # pre-votes this node answered as a voter
    notice_queries: int = 0  # fresh notices asked for after one was lost
    superseded: int = 0  # leases given up on a notice of a successor (our clock slow)
    log_refusals: int = 0  # new grants refused: the candidate's metadata log was behind ours
    # Requests refused, or grants not counted, for a data directory other
    # than the one the configuration names (voters.py, "Identity").
    identity_refusals: int = 0
    voters_replaced: int = 0  # old identities removed (a voter's disk was wiped)


# What the controller does about a voter back with a new data directory, as
# `voter-replaced` says it (the log line, `/v1/events`, the status page).
REPLACED_ACTION = ("its old id leaves the voter set; it rejoins as a non-voter, a voter "
                   "again once it has caught up")  # fmt: skip


def election_fields(event: object) -> dict[str, object]:
    """An election event as a flat JSON object with a `type`."""
    match event:
        case ControllerElected(epoch):
            return {"type": "controller-elected", "epoch": epoch}
        case ControllerLost(epoch, reason):
            return {"type": "controller-lost", "epoch": epoch, "reason": reason}
        case ControllerChanged(node, epoch):
            return {"type": "controller-changed", "controller": node, "epoch": epoch}
        case VotersChanged(config):
            return {"type": "voters-changed", "version": config.version,
                    "voters": list(config.voters), "lineage": config.lineage.hex(),
                    "voter_ids": [i.hex() for i in config.ids]}  # fmt: skip
        case VoterReplaced(name, old_id, new_id):
            return {"type": "voter-replaced", "node": name, "old_id": old_id.hex(),
                    "new_id": new_id.hex(), "reason": "came back with a new data directory",
                    "action": REPLACED_ACTION}  # fmt: skip
    raise TypeError(f"not an election event: {event!r}")
