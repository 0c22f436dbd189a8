"""Virtual time: one global timeline, and each node's view of it.

The simulator keeps *true* time globally; each node sees
`local = offset + true * (1 + drift)`, so election tests can give nodes
clocks that run fast or slow within the configured drift bound while the
safety checker judges on true time.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class NodeClock:
    """A node's clock: an offset and a rate error relative to true time."""

    offset_s: float = 0.0
    drift: float = 0.0

    def local(self, true_s: float) -> float:
        """The node's reading at true time `true_s`."""
        return self.offset_s + true_s * (1.0 + self.drift)

    def true(self, local_s: float) -> float:
        """The true time at which the node's clock reads `local_s`."""
        return (local_s - self.offset_s) / (1.0 + self.drift)
