"""Lifeguard local health awareness (Lifeguard §IV-A, memberlist awareness.go).

A node that misses acks may be the slow one itself (CPU starvation, a full
socket buffer). Its Local Health Multiplier (LHM) score rises on evidence of
its own trouble and falls on success; every probe interval and timeout is
multiplied by (score + 1), so a struggling node probes less eagerly and gives
others more time before it suspects them.

Evidence, as in memberlist:
- a probe answered in time: -1;
- a failed probe: +1 for each expected Nack that did not come (the relays
  could not hear us either), or +1 when no relay could be asked;
- having to refute a suspicion about ourselves: +1.
"""

from __future__ import annotations


class LocalHealth:
    """The LHM score, bounded to [0, max_multiplier - 1]."""

    __slots__ = ("score", "max_score")

    def __init__(self, max_multiplier: int) -> None:
        self.score = 0
        self.max_score = max_multiplier - 1

    def apply(self, delta: int) -> None:
        """Raise or lower the score by `delta`, within bounds."""
        self.score = min(self.max_score, max(0, self.score + delta))

    def scale(self, seconds: float) -> float:
        """A probe interval or timeout stretched by the current score."""
        return seconds * (self.score + 1)
