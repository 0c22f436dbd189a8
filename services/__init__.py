"""The pure core of the platform features, composed by ShoalNode: user-event
delivery (the ledger, the rescans) and the health checks' state machines;
beside it, driven by the agent's network layer and by the simulator, the
first-contact handshake (handshake.py), key operations' rules
(keyrounds.py) and query rounds (queries.py)."""

from shoal.services.checks import CheckMachines
from shoal.services.core import Services
from shoal.services.delivery import EventLedger, UserEventReceived

__all__ = ["CheckMachines", "EventLedger", "Services", "UserEventReceived"]
