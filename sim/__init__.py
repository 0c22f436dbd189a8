"""Deterministic simulator: many ShoalNodes on a virtual, faulty network."""

from shoal.sim.cluster import SimCluster
from shoal.sim.network import LinkProfile, SimNetwork
from shoal.sim.scenarios import SimResult, run_simulation

__all__ = ["LinkProfile", "SimCluster", "SimNetwork", "SimResult", "run_simulation"]
