"""Versions on the wire with real agents on loopback (docs/operations.md,
"An upgrade"): an agent two releases ahead is refused, encrypted or not; the
next release joins; `shoal members --detailed`, `shoal info` and `shoal
features` show who understands what."""

from __future__ import annotations

import json

import pytest

from shoal.kernel.versions import NEXT_RELEASE_STANDIN, THIS_BUILD
from tests.conftest import poll_until
from tests.integration.agents import AgentCluster, shoal_cli
from tests.integration.test_security import KEY, counters


@pytest.mark.parametrize("encrypted", [False, True], ids=["plaintext", "encrypted"])
def test_an_agent_two_releases_ahead_is_refused_and_both_sides_say_why(
        agents: AgentCluster, encrypted: bool) -> None:  # fmt: skip
    """It is never listed, by the seed or by gossip; the members log one
    `member-refused` line naming it and both ranges, and count it."""
    extra = ["--no-discovery", *(["--encrypt", KEY] if encrypted else [])]
    members = list(agents.start(2, extra=extra))
    agents.wait_all_see([a.name for a in members], "alive", members)
    far = agents.add("far", join=[members[0].gossip], extra=extra,
                     env={"SHOAL_TEST_NEXT_RELEASE": "2"})  # fmt: skip
    poll_until(lambda: "member-refused" in members[0].log() and "member-refused" in far.log(), 30)
    refused = next(json.loads(line) for line in members[0].log().splitlines()
                   if "member-refused" in line)  # fmt: skip
    assert "membership 2-3" in refused["theirs"] and "membership 1-1" in refused["mine"]
    assert refused["protocols"] == ["membership"]
    seen = counters(members[0])
    refusals = (seen.get("contact_refused_version", 0) + seen.get("swim_refused_push_pulls", 0)
                + seen.get("swim_ignored_incompatible", 0))  # fmt: skip
    assert refusals >= 1
    for agent in members:
        assert "far" not in agent.members()
    assert set(far.members()) == {"far"}  # it half-joined no one


def test_the_next_release_joins_and_members_detailed_shows_each_ones_versions(agents):
    """Adjacent releases form one cluster; the table shows each member's
    ranges, `shoal info` what the cluster speaks and who holds the level back."""
    members = list(agents.start(2, extra=["--no-discovery"]))
    nxt = agents.add("next", join=[members[0].gossip], extra=["--no-discovery"],
                     env={"SHOAL_TEST_NEXT_RELEASE": "1"})  # fmt: skip
    everyone = [*members, nxt]
    agents.wait_all_see([a.name for a in everyone], "alive", everyone)
    api = f"{members[0].ip}:7947"
    table = shoal_cli("members", "--detailed", "--api", api).stdout
    rows = {line.split()[0]: line for line in table.splitlines()[1:]}
    mine, theirs = THIS_BUILD.features, NEXT_RELEASE_STANDIN.features
    assert "mem 1-2" in rows["next"] and f"feat {theirs}" in rows["next"]
    assert "mem 1-1" in rows[members[1].name] and f"feat {mine}" in rows[members[1].name]
    poll_until(lambda: members[0].api.get("/v1/self")["feature_level"] == mine, 30)
    info = shoal_cli("info", "--api", api).stdout
    assert f"feature_level = {mine}" in info
    assert f"held_back_by = {', '.join(sorted(a.name for a in members))}" in info
    assert "cluster_speaks = {'envelope': 1, 'membership': 1" in info
    poll_until(lambda: nxt.api.get("/v1/self")["feature_level"] == mine, 30)
    features = shoal_cli("features", "--api", f"{nxt.ip}:7947")
    assert features.returncode == 0, features.stderr
    assert f"feature level: {mine} (this agent supports up to {theirs})" in features.stdout
