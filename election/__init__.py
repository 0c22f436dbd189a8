"""Controller election by a quorum lease on the membership view (sans-IO)."""

from election.config import LeaseConfig
from election.events import ControllerChanged, ControllerElected, ControllerLost, VotersChanged
from election.lease import LeaseElection
from election.voters import VoterConfig

__all__ = [
    "ControllerChanged",
    "ControllerElected",
    "ControllerLost",
    "LeaseConfig",
    "LeaseElection",
    "VoterConfig",
    "VotersChanged",
]
