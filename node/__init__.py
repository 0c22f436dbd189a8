"""The pure composition of the three cores (`ShoalNode`), imported by both
drivers: the agent (shoal.daemon) and the simulator (shoal.sim)."""

from shoal.node.composition import ShoalNode

__all__ = ["ShoalNode"]
