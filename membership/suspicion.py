"""Lifeguard's dynamic suspicion timeout (Lifeguard §IV-B, memberlist suspicion.go).

Theory of operation. A suspicion starts with a long timeout, `max_s`, and
shrinks towards `min_s` as independent members confirm it. With `k` expected
confirmations the timeout after `n` of them is

    max_s - log(n + 1) / log(k + 1) * (max_s - min_s),   never below min_s,

so a suspicion that nobody else shares takes long to become a death (a false
positive needs time to be refuted), and one the whole cluster shares
completes in `min_s`.

This module owns every number of that rule, as memberlist's state.go and
suspicion.go compute them when a suspicion starts:

- `min_s` grows with the log of the cluster size (SWIM §4.2's "O(log N)
  protocol periods", memberlist `suspicionTimeout`);
- `max_s` is `min_s` times `suspicion_max_timeout_mult`;
- `k` is `suspicion_mult - 2`, or 0 in a cluster too small to confirm.

Ours: confirmations beyond k keep counting, up to `cap` = k +
`suspicion_fast_confirmations` (never more than the N - 2 members who could
confirm), and each one moves the timeout from `min_s` down in equal steps
to `floor_s` (`suspicion_floor_mult` probe intervals) at `cap`. memberlist
stops counting at k, so a suspicion the whole cluster shares still runs
`min_s` (5.2 s at 20 members on the LAN profile), the larger part of its
detection time. A confirmation is an independent failed probe: every
member that hears of a suspicion checks the suspect at once (probing.py),
so a live suspect answers the checks (and learns it is suspected, from the
check itself) instead of collecting confirmations. Datagram loss makes a
check fail rarely (10 % loss: about 1 in 130, direct and three relays), and
`cap` - k more such failures about one live member at once do not happen;
a member that cannot answer anybody for about a second is what the floor
declares dead in about two (the suspicion, its checks, the floor).

The timer is a stored start and a computed deadline; the core's deadline
heap decides when to look at it again (STYLE.md §1, timers are deadlines).
"""

from __future__ import annotations

import math

from shoal.membership.profiles import SwimConfig


def remaining_suspicion_s(n: int, k: int, elapsed_s: float, min_s: float, max_s: float) -> float:
    """What is left of a suspicion after `n` of `k` expected confirmations.

    A pure port of memberlist's remainingSuspicionTime: the timeout is
    floored to whole milliseconds, never below `min_s`, minus `elapsed_s`.

    Args:
        n: independent confirmations so far.
        k: confirmations expected (0: the minimum applies at once).
        elapsed_s: time since the suspicion started.
        min_s: the shortest total timeout.
        max_s: the total timeout with no confirmation.

    Returns:
        Seconds until the suspect is to be declared dead (may be negative).
    """
    if k < 1:
        return min_s - elapsed_s
    frac = math.log(n + 1.0) / math.log(k + 1.0)
    raw = max_s - frac * (max_s - min_s)
    return max(min_s, math.floor(1000.0 * raw) / 1000.0) - elapsed_s


def suspicion_timeout_s(n: int, k: int, min_s: float, max_s: float) -> float:
    """The total suspicion timeout after `n` of `k` expected confirmations."""
    return remaining_suspicion_s(n, k, 0.0, min_s, max_s)


def fast_timeout_s(n: int, k: int, cap: int, min_s: float, floor_s: float) -> float:
    """The total timeout after `n` confirmations, `k` < n <= `cap` (ours):
    from `min_s` at k down to `floor_s` at `cap`, in equal steps."""
    if floor_s >= min_s:
        return min_s
    return min_s - (min(n, cap) - k) / (cap - k) * (min_s - floor_s)


def confirmation_cap(config: SwimConfig, k: int, cluster_size: int) -> int:
    """How many confirmations count: k plus the fast ones, at most the
    N - 2 members other than the suspect and the first suspector."""
    return max(k, min(k + config.suspicion_fast_confirmations, cluster_size - 2))


def suspicion_min_s(config: SwimConfig, cluster_size: int) -> float:
    """The shortest suspicion timeout (memberlist suspicionTimeout).

    Args:
        config: supplies `suspicion_mult` and `probe_interval_s`.
        cluster_size: live members, this node included.
    """
    node_scale = max(1.0, math.log10(max(1.0, float(cluster_size))))
    return config.suspicion_mult * node_scale * config.probe_interval_s


def expected_confirmations(config: SwimConfig, cluster_size: int) -> int:
    """Lifeguard's k: `suspicion_mult - 2`, or 0 when fewer members than
    that could confirm (memberlist state.go suspectNode)."""
    k = config.suspicion_mult - 2
    return 0 if cluster_size - 2 < k else k


class SuspicionTimer:
    """One running suspicion: when it started and who confirmed it."""

    __slots__ = ("started_at", "k", "min_s", "max_s", "confirmers", "cap", "floor_s", "held_until")

    def __init__(
        self,
        started_at: float,
        k: int,
        min_s: float,
        max_s: float,
        source: str,
        cap: int | None = None,
        floor_s: float | None = None,
    ) -> None:
        """A suspicion with explicit bounds (see `begin` for the usual way).

        Args:
            started_at: when it started, on the monotonic timeline.
            k: confirmations expected.
            min_s: the total timeout after k confirmations.
            max_s: the total timeout with no confirmation.
            source: the member that raised it (not a confirmation).
            cap: confirmations counted (default k: memberlist's rule).
            floor_s: the total timeout after `cap` confirmations.
        """
        self.started_at = started_at
        self.k = k
        self.min_s = min_s
        self.max_s = max_s
        self.cap = k if cap is None else max(k, cap)
        self.floor_s = min_s if floor_s is None else floor_s
        # The original suspector does not count as a confirmation.
        self.confirmers: set[str] = {source}
        # Held at a heal (`hold`): no verdict before this.
        self.held_until = 0.0

    @classmethod
    def begin(
        cls, now: float, source: str, config: SwimConfig, cluster_size: int
    ) -> SuspicionTimer:
        """A suspicion raised by `source` at `now`, with k, min and max
        computed for a cluster of `cluster_size` live members."""
        k = expected_confirmations(config, cluster_size)
        min_s = suspicion_min_s(config, cluster_size)
        max_s = min_s * config.suspicion_max_timeout_mult
        cap = confirmation_cap(config, k, cluster_size)
        floor_s = min(min_s, config.suspicion_floor_mult * config.probe_interval_s)
        return cls(now, k, min_s, max_s, source, cap, floor_s)

    @property
    def confirmations(self) -> int:
        """Independent confirmations beyond the first suspector."""
        return len(self.confirmers) - 1

    def confirm(self, source: str) -> bool:
        """Record a suspicion from `source`; True if it was new and counted."""
        if self.confirmations >= self.cap or source in self.confirmers:
            return False
        self.confirmers.add(source)
        return True

    def hold(self, heard_at: float, now: float, window_s: float, hold_s: float) -> bool:
        """Hold the verdict, due `now`, for `hold_s`, if a lost member was
        heard from (`heard_at`: a refutation, a dead member back, any
        datagram from one: `SwimNode.heard_from`) after this
        suspicion started and within `window_s` before now, and it was not
        held before. Whether it is held (ours).

        After a heal, the suspicions raised during the cut keep running,
        and their confirmations, held back by the cut, arrive all at once
        with the first gossip across it: at 60 agents, nearly every death
        declared after a heal came within 50 ms of it, of a member that had
        refuted already or was about to (1,711 over 270 cuts). Claims holds
        such a verdict for a probe timeout (a round trip at the 99th
        percentile) and pings the suspect with its suspicion (Lifeguard's
        buddy system): a live suspect refutes to us directly. Once only, so
        a verdict comes at most `hold_s` late, and only for a suspicion
        that ends just after a member lost for two probe intervals or more
        came back (reconnect.py: a false suspicion from loss, refuted
        sooner, is no sign).
        """
        if self.held_until or heard_at < self.started_at or now - heard_at > window_s:
            return False
        self.held_until = now + hold_s
        return True

    @property
    def deadline_at(self) -> float:
        """When the suspect is to be declared dead, unless it refutes (and
        never before a hold ends)."""
        n = self.confirmations
        if n > self.k:
            timeout = fast_timeout_s(n, self.k, self.cap, self.min_s, self.floor_s)
        else:
            timeout = suspicion_timeout_s(n, self.k, self.min_s, self.max_s)
        return max(self.started_at + timeout, self.held_until)
