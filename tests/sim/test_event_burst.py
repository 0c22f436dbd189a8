"""User events under 10 % loss with members restarting during the burst
(sim/userevents.py, issue 29; the real delivery ledger since issue 40):
every member runs every event's handlers to the end, once."""

import pytest

from shoal.sim.userevents import burst_run


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_every_member_gets_every_event_once_under_loss_and_restarts(seed):
    r = burst_run(seed, n=50, events=300)
    assert r.restarted >= 2
    assert r.ratio == 1.0 and r.duplicates == 0, r
    assert r.settled_s is not None and r.settled_s < 30, r


def test_members_restarting_at_new_addresses_still_get_every_event_once():
    """A member back at another address is found again, and its ledger holds."""
    r = burst_run(4, n=30, events=150, restart_fraction=0.1, new_address=True)
    assert r.restarted == 3
    assert r.ratio == 1.0 and r.duplicates == 0, r
    assert r.settled_s is not None and r.settled_s < 30, r


@pytest.mark.slow
@pytest.mark.parametrize("n", [100, 1000])
def test_the_issue_sizes_100_and_1000_members_1000_events(n):
    r = burst_run(1, n=n, events=1000, settle_s=300.0)
    print(r, r.ratio)
    assert r.ratio == 1.0 and r.duplicates == 0, r
