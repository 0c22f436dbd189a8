"""The pure core of the platform features, composed by ShoalNode: user-event
delivery (the ledger, the rescans) and the health checks' state machines."""

from shoal.services.checks import CheckMachines
from shoal.services.core import Services
from shoal.services.delivery import EventLedger, UserEventReceived

__all__ = ["CheckMachines", "EventLedger", "Services", "UserEventReceived"]
