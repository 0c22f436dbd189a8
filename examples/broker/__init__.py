"""A small message-queue cluster that coordinates only through shoal.

Brokers register through sessions bound to a TTL check; topics and the
partition assignment live in shoal's metadata log, changed with
compare-and-set (the broker beside the shoal controller assigns partition
leaders); every broker serves the partitions it leads. See README.md in this folder.
"""

from .assignment import Assignment, assign
from .broker import Broker
from .client import BrokerClient, BrokerError

__all__ = ["Assignment", "Broker", "BrokerClient", "BrokerError", "assign"]
