"""`shoal history collect --out DIR` copies every live member's history log
through the agents' API, one folder per node, and a second run fetches only
what is new (docs/churn.md)."""

from __future__ import annotations

import json

from tests.conftest import poll_until
from tests.integration.agents import shoal_cli


def _start(agents, n):
    for _ in range(n):
        agents.add()
    names = [a.name for a in agents.agents]
    agents.wait_all_see(names, "alive", agents.agents)
    return names


def _rows(folder):
    text = (folder / "history.jsonl").read_text() if (folder / "history.jsonl").exists() else ""
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def test_collect_copies_every_members_log_and_resumes(agents, tmp_path):
    names = _start(agents, 3)
    out = tmp_path / "logs"
    api = f"{agents.agents[0].ip}:7947"
    # Each agent logs its peers' joins: wait until every log has them all.
    poll_until(
        lambda: all(
            len({r["node"] for r in _rows(a.data_dir / "history") if r["event"] == "member-joined"})
            == 3
            for a in agents.agents
        ),
        20,
    )
    first = shoal_cli("history", "collect", "--out", str(out), "--api", api)
    assert first.returncode == 0, first.stderr
    assert f"history of 3 of 3 members in {out}" in first.stdout
    for agent in agents.agents:
        mine = (agent.data_dir / "history" / "history.jsonl").read_bytes()
        copy = (out / agent.name / "history.jsonl").read_bytes()
        assert mine.startswith(copy) and len(copy) > 0
        assert {r["observer"] for r in _rows(out / agent.name)} == {agent.name}
    # A leave is news in every survivor's log; the next run fetches only it.
    held = {n: (out / n / "history.jsonl").stat().st_size for n in names}
    leaver = agents.agents[2]
    assert shoal_cli("leave", "--api", f"{leaver.ip}:7947").returncode == 0
    poll_until(lambda: any(r["event"] == "member-left" for r in
                           _rows(agents.agents[0].data_dir / "history")), 20)  # fmt: skip
    again = shoal_cli("history", "collect", "--out", str(out), "--api", api)
    assert again.returncode == 0, again.stderr
    survivor = agents.agents[0]
    grown = (out / survivor.name / "history.jsonl").read_bytes()
    assert len(grown) > held[survivor.name]
    assert grown == (survivor.data_dir / "history" / "history.jsonl").read_bytes()[: len(grown)]
    assert len(_rows(out / survivor.name)) == len(
        {json.dumps(r) for r in _rows(out / survivor.name)}
    )  # no repeats


def test_collect_says_which_agent_it_could_not_reach(tmp_path):
    done = shoal_cli("history", "collect", "--out", str(tmp_path / "logs"),
                     "--api", "127.0.0.1:1")  # fmt: skip
    assert done.returncode == 1
    assert done.stderr.count("\n") == 1 and "127.0.0.1:1" in done.stderr
    assert not (tmp_path / "logs").exists()
