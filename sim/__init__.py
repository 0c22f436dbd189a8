"""Deterministic simulator: many ShoalNodes on a virtual, faulty network."""

from sim.cluster import SimCluster
from sim.network import LinkProfile, SimNetwork
from sim.scenarios import SimResult, run_simulation

__all__ = ["LinkProfile", "SimCluster", "SimNetwork", "SimResult", "run_simulation"]
