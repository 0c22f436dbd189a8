"""Two of three agents restarted back to back (SIGTERM, start again, then
the next): within a few seconds all three agree on one controller again and
every one of them votes.

Seen before: the voters shrank to the controller alone and the two others
knew no controller. The first agent joins no one (the others join it), so
restarted it knew no one; the one left holds both restarted as left, and
nobody contacts a member that left: they stayed apart, and the controller
removed both from the voters. Now an election message from a member not
held live starts a sync with it (node/composition.py, `_heeding_strangers`),
and the restarted agents hear from the controller when it asks the voters
to remove them."""

from __future__ import annotations

import time
from typing import Any

import pytest

from tests.conftest import poll_until
from tests.integration.agents import AgentCluster, AgentProcess


def controller_info(agent: AgentProcess) -> dict[str, Any] | None:
    try:
        info: dict[str, Any] = agent.api.get("/v1/controller")
    except Exception:  # noqa: BLE001 (restarting, or not up yet)
        return None
    return info


def settled(members: list[AgentProcess]) -> tuple[str, tuple[str, ...]] | None:
    """(controller, voters) when every agent names the same controller and
    the same voters, and the voters are all of them; else None."""
    seen = set()
    for agent in members:
        info = controller_info(agent)
        if info is None or info["controller"] is None:
            return None
        seen.add((info["controller"], tuple(sorted(info["voters"]))))
    if len(seen) != 1:
        return None
    (only,) = seen
    return only if set(only[1]) == {m.name for m in members} else None


@pytest.mark.parametrize("which", ["the first, then the controller", "the two others"])
def test_two_of_three_restarted_back_to_back_agree_again_within_seconds(agents: AgentCluster,
                                                                         which: str):  # fmt: skip
    """Restart two agents one after the other, each as soon as the previous
    answers again: the first agent (which joins no one) and the controller
    (or, when the first is the controller, the next one), or the two that
    joined the first. A few seconds after the second is back, all three
    name one controller and the voters are all three again."""
    members = agents.start(3, extra=["--no-discovery"])  # the first joins none, the others it
    agents.wait_all_see([m.name for m in members], "alive", members)
    controller, _ = poll_until(lambda: settled(members), 60, interval_s=0.1)
    holder = next(m for m in members if m.name == controller)
    if which == "the two others":
        order = members[1:]
    else:
        order = [members[0], holder if holder is not members[0] else members[1]]
    for agent in order:
        assert agent.stop() == 0
        agent.start()
        poll_until(lambda agent=agent: controller_info(agent), 20, interval_s=0.05)
    back_at = time.monotonic()
    poll_until(lambda: settled(members), 8, interval_s=0.1)
    print(f"\n{which}: settled {time.monotonic() - back_at:.1f} s after the second restart")
