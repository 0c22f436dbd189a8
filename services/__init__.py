"""The pure core of the platform features (user events...), composed by ShoalNode."""

from shoal.services.core import Services
from shoal.services.delivery import EventLedger, UserEventReceived

__all__ = ["EventLedger", "Services", "UserEventReceived"]
