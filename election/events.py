"""What the election core reports (past tense, like membership events)."""

from __future__ import annotations

import msgspec

from shoal.election.voters import VoterConfig


class ControllerElected(msgspec.Struct, frozen=True):
    """This node became controller with `epoch`."""

    epoch: int


class ControllerLost(msgspec.Struct, frozen=True):
    """This node stopped being controller (`reason`: expired, released, merged)."""

    epoch: int
    reason: str


class ControllerChanged(msgspec.Struct, frozen=True):
    """The controller this node knows of changed (`node` empty: none known)."""

    node: str
    epoch: int


class VotersChanged(msgspec.Struct, frozen=True):
    """This node adopted a new voter configuration."""

    config: VoterConfig


class PersistElection(msgspec.Struct, frozen=True):
    """The highest epoch this node granted and its voter configuration must
    be durable before any grant based on them leaves the node."""

    granted_epoch: int
    config: VoterConfig | None


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
                    "voters": list(config.voters), "lineage": config.lineage.hex()}  # fmt: skip
    raise TypeError(f"not an election event: {event!r}")
