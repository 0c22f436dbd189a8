"""An agent says which path its hot modules run: compiled (mypyc) or pure Python."""

from __future__ import annotations

from shoal import native
from tests.integration.agents import AgentCluster, api_request, shoal_cli


def test_the_agent_says_which_path_it_runs(agents: AgentCluster):
    """In its start log line, on `GET /` and in `shoal info`: the path this
    install runs (the agent is started from the same environment)."""
    (a,) = agents.start(1, extra=["--no-discovery"])
    agents.wait_all_see([a.name], "alive", [a])
    path = native.describe()
    status, root = api_request(a, "GET", "/")
    assert (status, root["hot_path"]) == (200, path)
    assert f"hot_path = {path}" in shoal_cli("info", "--api", f"{a.ip}:7947").stdout
    started = next(line for line in a.log().splitlines() if "agent started" in line)
    assert "hot_path" in started and path.split(" (")[0] in started
