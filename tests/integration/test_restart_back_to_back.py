"""Two of three agents restarted back to back (SIGTERM, start again, then
the next): within a few seconds all three agree on one controller again and
every one of them votes. (Seen once: the voters shrank to the controller
alone and the others knew no controller for ~20 s.)"""

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


@pytest.mark.parametrize("which", ["followers", "controller-first"])
def test_two_of_three_restarted_back_to_back_agree_again_within_seconds(agents: AgentCluster,
                                                                         which: str):  # fmt: skip
    """Restart two agents one after the other, each as soon as the previous
    is up again: a few seconds after the second is back, all three name one
    controller and the voters are all three again."""
    members = agents.start(3, extra=["--no-discovery"])
    for m in members:  # as an operator would: every agent retries joining the others
        m.join = [o.gossip for o in members if o is not m]
    agents.wait_all_see([m.name for m in members], "alive", members)
    controller, _ = poll_until(lambda: settled(members), 60, interval_s=0.1)
    holder = next(m for m in members if m.name == controller)
    others = [m for m in members if m is not holder]
    order = others if which == "followers" else [holder, others[0]]
    for agent in order:
        assert agent.stop() == 0
        agent.start()
        poll_until(lambda agent=agent: controller_info(agent), 20, interval_s=0.05)
    back_at = time.monotonic()
    poll_until(lambda: settled(members), 8, interval_s=0.1)
    print(f"\n{which}: settled {time.monotonic() - back_at:.1f} s after the second restart")
