"""A voter restarted under systemd (SIGTERM, then started again) keeps its
vote (docs/election.md, "A restart keeps its vote"): the configuration
does not change, and the controller killed the moment the restarted agent
answers again is replaced by the two agents left. Removed at once on its
leave, as before, the restarted agent was a non-voter until it had caught
up and been added back, and the two agents left then held no majority
(tests/sim/test_left_voter.py has the same in the simulator)."""

import time

from tests.conftest import poll_until
from tests.integration.metaagents import controller_name, meta_cluster, voter_roles, writable


def test_a_restarted_voter_keeps_its_vote_and_helps_elect_at_once(agents, figure):
    members = meta_cluster(agents, 3)
    controller = controller_name(members[0])
    home = next(a for a in members if a.name != controller)
    voters = sorted(n for n, v in voter_roles(members[0]).items() if v == "voter")
    assert home.name in voters and len(voters) == 3
    victim = next(a for a in members if a.name == controller)
    home.stop()  # SIGTERM: it leaves, and exits
    assert voter_roles(victim).get(home.name) == "voter"
    home.start()
    poll_until(lambda: writable(home), 30, interval_s=0.1)
    victim.kill()  # the controller, the moment the restarted agent serves
    killed = time.monotonic()
    survivors = [a for a in members if a is not victim]
    poll_until(lambda: controller_name(survivors[0]) not in (None, victim.name), 15)
    figure(f"restart keeps its vote: a controller killed as the restarted voter serves "
           f"is replaced in {time.monotonic() - killed:.2f} s")  # fmt: skip
    poll_until(lambda: writable(home), 15, interval_s=0.1)
    roles = voter_roles(home)
    assert sorted(n for n, v in roles.items() if v == "voter") == voters  # no change made
