"""Real agents write the membership history; `shoal history` reads it."""

from __future__ import annotations

import json
import signal
import urllib.request

from tests.conftest import poll_until
from tests.integration.agents import shoal_cli


def history(agent, *args: str) -> list[dict]:
    out = shoal_cli("history", "--data-dir", str(agent.data_dir), "--json", *args)
    assert out.returncode == 0, out.stderr
    return [json.loads(line) for line in out.stdout.splitlines()]


def test_a_crash_and_a_leave_are_in_every_survivors_history(agents):
    started = agents.start(4)
    names = [a.name for a in started]
    agents.wait_all_see(names, "alive", started)
    observer, victim, leaver = started[0], started[1], started[2]
    victim.kill()
    agents.wait_all_see([victim.name], "dead", [observer, started[3]], timeout_s=30)
    leaver.signal(signal.SIGTERM)
    assert leaver.wait_exit(15) == 0
    agents.wait_all_see([leaver.name], "left", [observer, started[3]], timeout_s=15)

    rows = poll_until(lambda: [r for r in history(observer)
                               if r["node"] == leaver.name and r["event"] == "member-left"] and
                      history(observer), 10)  # fmt: skip
    about_victim = [r["event"] for r in rows if r["node"] == victim.name]
    assert about_victim[0] == "member-joined" and "member-suspected" in about_victim
    assert about_victim[-1] == "member-failed"
    dead = [r for r in rows if r["node"] == victim.name and r["event"] == "member-failed"][0]
    assert dead["observer"] == observer.name and dead["source"] in names
    assert dead["incarnation"] >= 1 and dead["address"] == victim.gossip
    assert rows[0]["node"] == observer.name and rows[0]["event"] == "member-joined"  # its own start
    # The leaver stopped cleanly: its own log ends with its leave.
    own = history(leaver)
    assert own[-1]["event"] == "member-left" and own[-1]["node"] == leaver.name
    # Filters and the text form.
    assert {r["node"] for r in history(observer, "--node", victim.name)} == {victim.name}
    assert history(observer, "--since", "2099-01-01") == []
    text = shoal_cli("history", "--data-dir", str(observer.data_dir), "--node", victim.name)
    assert f"member-failed       {victim.name} (incarnation" in text.stdout
    with urllib.request.urlopen(f"http://{observer.ip}:7947/metrics", timeout=5) as r:
        metrics = r.read().decode()
    written = [line for line in metrics.splitlines()
               if line.startswith("shoal_history_events_written")]  # fmt: skip
    assert written and float(written[0].split()[-1]) >= len(rows)


def test_history_flags_are_checked(tmp_path):
    out = shoal_cli("history", "--data-dir", str(tmp_path), "--since", "yesterday-ish")
    assert out.returncode == 2 and out.stderr.count("\n") == 1 and "--since" in out.stderr
    out = shoal_cli("history", "--data-dir", str(tmp_path / "none"))
    assert out.returncode == 2 and "no history log" in out.stderr
