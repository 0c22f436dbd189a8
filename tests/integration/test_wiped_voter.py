"""A voter whose data directory was wiped, on real agents (issues 37, 39): it
comes back under its name with a new node_id, never votes as its old self,
and the controller replaces it: the old identity is removed and the new one
added. The operator sees it everywhere: the controller logs `voter-replaced`
at warning (old and new id, what happens), on `/v1/events` and in its
history log; every agent's `/v1/members` carries the old id
(`former_node_id`) and `shoal members --detailed` notes it in the Voter
column; the status page shows it in the members table and the feed."""

from __future__ import annotations

import http.client
import json
import shutil
import threading
from typing import Any

from tests.conftest import poll_until
from tests.integration.agents import AgentCluster, AgentProcess, shoal_cli
from tests.integration.test_meta import client_of, controller_name, three
from tests.integration.test_ui import browser, console_errors, js, page, text  # noqa: F401

NOTE = "new data directory"


def voter_ids(agent: AgentProcess) -> dict[str, str]:
    try:
        info = agent.api.get("/v1/controller")
    except Exception:
        return {}
    return dict(zip(info["voters"], info["voter_ids"], strict=False))


def node_id(agent: AgentProcess) -> str:
    return str(agent.api.get("/v1/self")["node_id"])


def follow_events(agent: AgentProcess) -> list[dict[str, Any]]:
    """`/v1/events` of `agent`, read into a list by a thread of its own
    (until the agent ends the stream); returns once the stream is open."""
    got: list[dict[str, Any]] = []

    def read() -> None:
        conn = http.client.HTTPConnection(agent.ip, 7947, timeout=None)
        try:
            conn.request("GET", "/v1/events")
            with conn.getresponse() as resp:
                for line in resp:
                    if line.strip():
                        got.append(json.loads(line))
        except (OSError, http.client.HTTPException):
            pass  # the agent stopped
        finally:
            conn.close()

    watching = agent.api.get("/v1/self")["watchers"]
    threading.Thread(target=read, daemon=True).start()
    poll_until(lambda: agent.api.get("/v1/self")["watchers"] > watching, 10, interval_s=0.1)
    return got


def wipe_a_voter(agents: AgentCluster, before=None):
    """Three agents; kill -9 one that is not the controller, delete its data
    directory, start it again (`before(ctl)` runs just before the kill).
    Returns (agents, controller, wiped, node ids before)."""
    started = three(agents)
    ids = {a.name: node_id(a) for a in started}
    # At feature level 2 the controller fills in every voter's id.
    poll_until(lambda: voter_ids(started[0]) == ids, 30, interval_s=0.2)
    ctl_name = controller_name(started[0])
    ctl = next(a for a in started if a.name == ctl_name)
    wiped = next(a for a in started if a.name != ctl_name)
    if before is not None:
        before(ctl)
    wiped.kill()  # a crash, not a leave: it stays a voter
    # The disk is replaced meanwhile. (Back at once, before the others
    # declare its old self failed, its new self would answer the probes
    # meant for the old one, and the membership view would keep the old
    # id: its Voter column would say `replaced` until then.)
    others = [a for a in started if a is not wiped]
    agents.wait_all_see([wiped.name], "dead", others, timeout_s=30)
    shutil.rmtree(wiped.data_dir)
    wiped.start()
    return started, ctl, wiped, ids


def replaced_line(ctl: AgentProcess) -> dict[str, Any]:
    return next(json.loads(x) for x in ctl.log().splitlines() if "voter-replaced" in x)


def test_a_wiped_voter_comes_back_as_a_new_voter_and_every_agent_says_so(agents):
    streams: dict[str, list[dict[str, Any]]] = {}
    written = []

    def before(ctl: AgentProcess) -> None:
        streams["ctl"] = follow_events(ctl)
        written.append(client_of(ctl).meta.put("before", "wipe"))

    started, ctl, wiped, ids = wipe_a_voter(agents, before)
    poll_until(lambda: "voter-replaced" in ctl.log(), 60, interval_s=0.2)
    # The log: at warning, both ids, why, and what happens next.
    line = replaced_line(ctl)
    assert line["level"] == "warning", line
    assert line["node"] == wiped.name and line["old_id"] == ids[wiped.name]
    assert line["reason"] == "came back with a new data directory"
    assert line["action"].startswith("its old id leaves the voter set; it rejoins as a non-voter")
    new_id = node_id(wiped)
    assert new_id != ids[wiped.name] and line["new_id"] == new_id
    # /v1/events, as `shoal monitor` shows it.
    poll_until(lambda: any(e.get("type") == "voter-replaced" for e in streams["ctl"]), 10)
    event = next(e for e in streams["ctl"] if e.get("type") == "voter-replaced")
    assert (event["node"], event["old_id"], event["new_id"]) == (wiped.name, ids[wiped.name],
                                                                   new_id)  # fmt: skip
    # The controller's history log (`shoal history`).
    history = shoal_cli("history", "--data-dir", str(ctl.data_dir)).stdout
    assert f"voter-replaced      {wiped.name} came back with a new data directory {new_id} " \
        f"(was {ids[wiped.name]})" in history, history  # fmt: skip
    # Removed under its old id, then added back under its new one.
    poll_until(lambda: voter_ids(ctl).get(wiped.name) == new_id, 60, interval_s=0.2)
    # Once the view holds its new row too (SWIM replaces the old one when
    # it is declared dead), every agent lists it as a voter, with its old id.
    poll_until(lambda: all(a.members().get(wiped.name, {}).get("voter") == "voter"
                           for a in started), 30, interval_s=0.2)  # fmt: skip
    for agent in started:
        listed = agent.members()
        assert listed[wiped.name]["former_node_id"] == ids[wiped.name], agent.name
        assert all(m["former_node_id"] is None for n, m in listed.items() if n != wiped.name)
        table = shoal_cli("members", "--detailed", "--api", f"{agent.ip}:7947").stdout
        header, *rows = table.splitlines()
        voter_at = header.index("Voter")
        column = {row.split()[0]: row[voter_at:].strip() for row in rows}  # no tags: Voter is last
        assert column == {a.name: "voter" for a in started} | {
            wiped.name: f"voter (new data directory, was {ids[wiped.name][:8]})"
        }, table
    # It caught up from nothing: the entry written before the wipe is there.
    got = client_of(wiped).meta.get("before")
    assert got.value == b"wipe" and got.mod_revision == written[0].revision


def test_the_status_page_shows_the_member_back_with_a_new_data_directory(agents, page):  # noqa: F811
    opened: dict[str, bool] = {}

    def open_on(ctl: AgentProcess) -> None:
        page.get(f"http://{ctl.ip}:7947/ui/")
        poll_until(lambda: js(page, "return document.querySelectorAll("
                              "'#member-rows tr').length;") == 3, 15)  # fmt: skip
        js(page, "window.loadedOnce = 'yes';")
        opened["page"] = True

    started, ctl, wiped, ids = wipe_a_voter(agents, open_on)
    assert opened

    def voter_cell() -> str:
        return str(js(page, "const r = document.querySelector(`tr[data-name='${arguments[0]}'] "
                            "td.voter`); return r ? r.textContent : '';", wiped.name))  # fmt: skip

    # The members table, without a reload: the note with the old id.
    poll_until(lambda: NOTE in voter_cell() and ids[wiped.name][:8] in voter_cell(), 60)
    # The feed: the controller's event, with what happens.
    poll_until(lambda: "came back with a new data directory" in text(page, "feed-list"), 10)
    assert "its old id leaves the voter set; it rejoins as a non-voter" in text(page, "feed-list")
    # A voter again under its new id: the row says so, the note stays.
    new_id = node_id(wiped)
    poll_until(lambda: voter_ids(ctl).get(wiped.name) == new_id, 60, interval_s=0.2)
    poll_until(lambda: voter_cell().startswith("voter · new data directory"), 30)
    others = [a.name for a in started if a is not wiped]
    for name in others:
        cell = js(page, "return document.querySelector(`tr[data-name='${arguments[0]}'] "
                        "td.voter`).textContent;", name)  # fmt: skip
        assert cell == "voter", (name, cell)
    assert js(page, "return window.loadedOnce;") == "yes"
    assert console_errors(page) == []
