"""Lifeguard's dynamic suspicion timeout (Lifeguard §IV-B, memberlist suspicion.go).

A suspicion starts with a long timeout, `max_s`, and shrinks towards `min_s`
as independent members confirm it. With `k` expected confirmations the
timeout after `n` of them is

    max_s - log(n + 1) / log(k + 1) * (max_s - min_s),   never below min_s,

so a suspicion that nobody else shares takes long to become a death (a false
positive needs time to be refuted), and one the whole cluster shares
completes in `min_s`. The timer is a stored start and a computed deadline;
the core's deadline heap decides when to look at it again.
"""

from __future__ import annotations

import math


def suspicion_timeout_s(n: int, k: int, min_s: float, max_s: float) -> float:
    """The total suspicion timeout after `n` of `k` expected confirmations.

    A pure port of memberlist's remainingSuspicionTime (without the elapsed
    part): it is floored to whole milliseconds like memberlist's.
    """
    if k < 1:
        return min_s
    frac = math.log(n + 1.0) / math.log(k + 1.0)
    raw = max_s - frac * (max_s - min_s)
    return max(min_s, math.floor(1000.0 * raw) / 1000.0)


class SuspicionTimer:
    """One running suspicion: when it started and who confirmed it."""

    __slots__ = ("started_at", "k", "min_s", "max_s", "confirmers")

    def __init__(self, started_at: float, k: int, min_s: float, max_s: float, source: str):
        self.started_at = started_at
        self.k = k
        self.min_s = min_s
        self.max_s = max_s
        # The original suspector does not count as a confirmation.
        self.confirmers: set[str] = {source}

    @property
    def confirmations(self) -> int:
        """Independent confirmations beyond the first suspector."""
        return len(self.confirmers) - 1

    def confirm(self, source: str) -> bool:
        """Record a suspicion from `source`; True if it was new and counted."""
        if self.confirmations >= self.k or source in self.confirmers:
            return False
        self.confirmers.add(source)
        return True

    @property
    def deadline_at(self) -> float:
        """When the suspect is to be declared dead, unless it refutes."""
        timeout = suspicion_timeout_s(self.confirmations, self.k, self.min_s, self.max_s)
        return self.started_at + timeout
