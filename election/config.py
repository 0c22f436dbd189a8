"""LeaseConfig: election timing (config file table `[election]`).

Every default carries its reason.
"""

from __future__ import annotations

import msgspec

# The tag a member sets to rank higher as a controller candidate ("10" beats
# the default "0"), and the tag that opts a member out ("false").
PRIORITY_TAG = "controller_priority"
ELIGIBLE_TAG = "controller_eligible"
# The member's health as its agent's checks say (daemon/health.py): with
# `healthy_only`, a member whose health is critical may not be controller.
HEALTH_TAG = "shoal:health"


class LeaseConfig(msgspec.Struct, frozen=True):
    """How long a lease lasts, how often it is renewed, how much clocks may drift."""

    # The lease: how long a controller may be silent before another can take
    # over. Failover after a crash takes about this long, so it is the knob
    # between speed and churn; 2 s matches a ZooKeeper session timeout of
    # 2 s and an etcd lease TTL of 2 s, the settings we compare against.
    lease_s: float = 2.0
    # Renew twice per lease. A renewal that misses its majority is tried
    # again at once, so with a 0.4 s request timeout a renewal and two
    # retries (each re-sent once to the voters that did not answer) fit in
    # a lease: the same three tries as renewing every 0.6 s (etcd's
    # keep-alive pace, lease / 3), with 40 % fewer datagrams in a healthy
    # cluster (renewals and grants were 0.67 of the 2.9 datagrams per agent
    # per second at N = 20). Renewing more often would not detect a crash
    # sooner: failover waits for the grants, which every renewal extends.
    renew_interval_s: float = 1.0
    # How much faster or slower than real time any clock may run: 2 %, or
    # 20,000 ppm. Quartz oscillators are specified to about 100 ppm and
    # NTP-disciplined clocks stay within 10 ppm, so this is a wide margin.
    # A controller's lease ends this fraction early on its own clock, a
    # voter's grant binds this fraction longer on the voter's clock.
    drift_ratio_max: float = 0.02
    # Candidates of rank k wait k times this before standing, so the best
    # candidate wins without a duel. Voters' grants run out at times up to
    # 2 * drift * lease apart (0.08 s at the defaults), so the step is larger.
    rank_backoff_s: float = 0.25
    # A campaign or renewal without a majority by then has failed.
    request_timeout_s: float = 0.4
    # A backstop: the controller tells every member who it is at least this
    # often. It tells them far more often anyway: at once when elected (and
    # twice more), then at each renewal that wins, because a member names a
    # controller only while a notice vouches for its lease (notices.py).
    notice_interval_s: float = 15.0
    # Voters in the configuration (Raft and ZooKeeper advise 3 or 5).
    max_voters: int = 5
    # A voter that left gracefully (SIGTERM, `shoal leave`) stays a voter
    # this long before the controller removes it, as a voter that crashed
    # does: a restart or an upgrade brings it back a voter at once, with its
    # log, where removing it at once left a restarted agent of three voters
    # out of every majority until it had caught up and been added back
    # (a controller lost meanwhile left the other voter alone, with no
    # majority). `shoal force-leave` removes a voter at once.
    left_voter_grace_s: float = 60.0
    # Hand the lease to a better-ranked candidate that joins (1) or keep a
    # healthy controller (0, the default: no needless changes).
    preempt: int = 0
    # Only members whose health checks are not critical may be controller
    # (1), and a controller whose own health turns critical hands over; or
    # health does not matter to the election (0, the default).
    healthy_only: int = 0
    # Seconds the view must be still before a bootstrap configuration is proposed.
    bootstrap_settle_s: float = 1.0

    def __post_init__(self) -> None:
        if not 0 < self.renew_interval_s < self.lease_s:
            raise ValueError("renew_interval_s must be above 0 and below lease_s")
        if not 0 <= self.drift_ratio_max < 0.5:
            raise ValueError("drift_ratio_max must be in [0, 0.5)")
        if self.request_timeout_s <= 0 or self.request_timeout_s >= self.lease_s:
            raise ValueError("request_timeout_s must be above 0 and below lease_s")
        if self.max_voters < 1 or self.rank_backoff_s < 0 or self.notice_interval_s <= 0:
            raise ValueError("max_voters >= 1, rank_backoff_s >= 0, notice_interval_s > 0")
        if self.preempt not in (0, 1) or self.bootstrap_settle_s < 0:
            raise ValueError("preempt must be 0 or 1, bootstrap_settle_s >= 0")
        if self.healthy_only not in (0, 1):
            raise ValueError("healthy_only must be 0 or 1")
        if self.left_voter_grace_s < 0:
            raise ValueError("left_voter_grace_s must be >= 0")

    @property
    def holder_lease_s(self) -> float:
        """How long a controller counts its lease, from when it *sent* the request."""
        return self.lease_s * (1 - self.drift_ratio_max)

    @property
    def voter_grant_s(self) -> float:
        """How long a voter holds a grant binding, from when it received the request."""
        return self.lease_s * (1 + self.drift_ratio_max)
