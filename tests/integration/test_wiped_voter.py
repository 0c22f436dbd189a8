"""A voter whose data directory was wiped, on real agents (issue 37): it
comes back under its name with a new node_id, never votes as its old self,
and the controller logs `voter-replaced`, removes the old identity and adds
the new one; `/v1/controller`, `/v1/members` and `shoal members --detailed`
show the ids and who votes."""

import json
import shutil

from tests.conftest import poll_until
from tests.integration.agents import shoal_cli
from tests.integration.test_meta import client_of, controller_name, three


def voter_ids(agent) -> dict[str, str]:
    try:
        info = agent.api.get("/v1/controller")
    except Exception:
        return {}
    return dict(zip(info["voters"], info["voter_ids"], strict=False))


def node_id(agent) -> str:
    return agent.api.get("/v1/self")["node_id"]


def test_a_wiped_voter_comes_back_as_a_new_voter_and_its_old_self_is_removed(agents):
    started = three(agents)
    ids = {a.name: node_id(a) for a in started}
    # At feature level 2 the controller fills in every voter's id.
    poll_until(lambda: voter_ids(started[0]) == ids, 30, interval_s=0.2)
    written = client_of(started[0]).meta.put("before", "wipe")
    ctl_name = controller_name(started[0])
    ctl = next(a for a in started if a.name == ctl_name)
    wiped = next(a for a in started if a.name != ctl_name)
    wiped.kill()  # a crash, not a leave: it stays a voter
    # The disk is replaced meanwhile. (Back at once, before the others
    # declare its old self failed, its new self would answer the probes
    # meant for the old one, and the membership view would keep the old
    # id: its Voter column would say `replaced` until then.)
    others = [a for a in started if a is not wiped]
    agents.wait_all_see([wiped.name], "dead", others, timeout_s=30)
    shutil.rmtree(wiped.data_dir)
    wiped.start()
    poll_until(lambda: "voter-replaced" in ctl.log(), 60, interval_s=0.2)
    line = next(json.loads(x) for x in ctl.log().splitlines() if "voter-replaced" in x)
    assert line["node"] == wiped.name and line["old_id"] == ids[wiped.name]
    assert line["reason"] == "came back with a new data directory"
    new_id = node_id(wiped)
    assert new_id != ids[wiped.name] and line["new_id"] == new_id
    # Removed under its old id, then added back under its new one.
    poll_until(lambda: voter_ids(ctl).get(wiped.name) == new_id, 60, interval_s=0.2)
    # Once the view holds its new row too (SWIM replaces the old one when
    # it is declared dead), every agent lists it as a voter.
    poll_until(lambda: all(a.members().get(wiped.name, {}).get("voter") == "voter"
                           for a in started), 30, interval_s=0.2)  # fmt: skip
    table = shoal_cli("members", "--detailed", "--api", f"{ctl.ip}:7947").stdout
    header, *rows = table.splitlines()
    assert "Voter" in header.split()
    assert all(row.split()[-1] == "voter" for row in rows), table  # no tags: Voter is last
    # It caught up from nothing: the entry written before the wipe is there.
    got = client_of(wiped).meta.get("before")
    assert got.value == b"wipe" and got.mod_revision == written.revision
