"""Controller election by a quorum lease on the membership view (sans-IO)."""

# Registers the election's message tags with the kernel's codec.
from shoal.election import messages as _messages  # noqa: F401
from shoal.election.config import LeaseConfig
from shoal.election.events import (
    ControllerChanged,
    ControllerElected,
    ControllerLost,
    VotersChanged,
)
from shoal.election.lease import LeaseElection
from shoal.election.voters import VoterConfig

__all__ = [
    "ControllerChanged",
    "ControllerElected",
    "ControllerLost",
    "LeaseConfig",
    "LeaseElection",
    "VoterConfig",
    "VotersChanged",
]
