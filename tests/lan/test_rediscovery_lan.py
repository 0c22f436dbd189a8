"""After a long cut, agents that came up behind it are found by mDNS again:
an agent that saw a large share of its cluster fail at once announces
itself and asks for the others again (daemon/network/rediscovery.py)."""

import time

import pytest

from tests.conftest import poll_until
from tests.lan.test_discovery import wait_all_see

pytestmark = [pytest.mark.root, pytest.mark.netns]

# How long host-4 stays behind the cut after its discovery started: past its
# own first queries (at 0, 1, 5 and 14 s), after which zeroconf asks again
# only when a record it holds nears its end (an hour for the service's).
_BEHIND_CUT_S = 20.0


def test_an_agent_that_came_up_behind_a_long_cut_is_found_after_it_heals(make_lan):
    """host-1..3 form a cluster by discovery alone. host-1 is cut off; behind
    the cut host-2 and host-3 crash and host-4 starts, alone. Healed, host-1
    and host-4 find each other: host-1 saw both its peers fail at once, so it
    keeps announcing and asking, a round at most every 30 s."""
    lan = make_lan(4)
    h1, h2, h3, h4 = lan.hosts
    for host in (h1, h2, h3):
        host.start_agent()
    wait_all_see([h1, h2, h3], ["host-1", "host-2", "host-3"], 30)
    lan.partition([h1], [h2, h3, h4])
    wait_all_see([h1], ["host-2", "host-3"], 40, status="dead")
    h2.stop_agent()
    h3.stop_agent()
    h4.start_agent()
    poll_until(lambda: "discovery started" in h4.log(), 20)
    time.sleep(_BEHIND_CUT_S)  # the fault's duration, not a wait for a condition
    assert "host-1" not in h4.members()
    lan.heal(lan.hosts)
    wait_all_see([h1, h4], ["host-1", "host-4"], 45)
    assert "many members failed at once: announcing and asking again" in h1.log()
