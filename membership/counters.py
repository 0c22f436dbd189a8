"""SwimCounters: what the membership core did and dropped (exported as metrics).

Every role of `SwimNode` bumps the one instance the façade owns; the names
are the metric names (prefixed `swim_` by the node), so they are part of the
operations surface and do not change lightly.
"""

from __future__ import annotations

from shoal.kernel.counters import Counters


class SwimCounters(Counters):
    """Counts of what the core did and dropped; exported as metrics."""

    probes_sent: int = 0
    probes_failed: int = 0
    indirect_probes_sent: int = 0
    acks_relayed: int = 0
    nacks_sent: int = 0
    suspicions_raised: int = 0
    refutations: int = 0
    deaths_declared: int = 0
    suspicions_held: int = 0  # verdicts held after a lost member was heard (claims.py)
    push_pulls_sent: int = 0
    stranger_syncs: int = 0  # of which: with a prober we did not know
    reconnect_pings: int = 0  # pings to members recently declared dead (reconnect.py)
    reconnects_answered: int = 0  # of which: answered
    unreachable_reports: int = 0  # ICMP port unreachable for our datagrams
    probes_refused: int = 0  # of which: for the target of our probe
    suspect_checks: int = 0  # probes of a member another suspects (probing.py)
    suspect_checks_failed: int = 0  # of which: unanswered, so we confirmed
    stream_failures: int = 0
    gossip_datagrams: int = 0
    ignored_stale: int = 0
    ignored_unknown: int = 0
    ignored_name_conflict: int = 0
    ignored_ghost: int = 0
    ignored_already: int = 0
    ignored_incompatible: int = 0  # claims about members we cannot talk with (versions)
    refused_push_pulls: int = 0  # whole exchanges refused: the sender's versions
    misdirected_pings: int = 0
    late_acks: int = 0
    corrections_sent: int = 0  # our newer Alive, to a sender of a stale Suspect/Dead
    coordinate_samples: int = 0  # direct round trips that updated our coordinate
    coordinates_rejected: int = 0  # a peer's, of another dimensionality
