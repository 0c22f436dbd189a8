"""What the election core reports (past tense, like membership events)."""

from __future__ import annotations

from dataclasses import dataclass

from election.voters import VoterConfig


@dataclass(frozen=True, slots=True)
class ControllerElected:
    """This node became controller with `epoch`."""

    epoch: int


@dataclass(frozen=True, slots=True)
class ControllerLost:
    """This node stopped being controller (`reason`: expired, released, merged)."""

    epoch: int
    reason: str


@dataclass(frozen=True, slots=True)
class ControllerChanged:
    """The controller this node knows of changed (`node` empty: none known)."""

    node: str
    epoch: int


@dataclass(frozen=True, slots=True)
class VotersChanged:
    """This node adopted a new voter configuration."""

    config: VoterConfig


@dataclass(frozen=True, slots=True)
class PersistElection:
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
