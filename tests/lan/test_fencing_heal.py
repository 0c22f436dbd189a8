"""A deposed controller's late fenced write after a partition heals, with
real agents on a virtual LAN (issue 21; the simulator's version is
tests/sim/test_fencing.py).

Three hosts; the controller is cut off alone by nftables. The other two
elect a successor at a higher epoch, and a write of `assignment` under that
epoch is made there. Then the cut-off agent, which has heard of no
successor, accepts a write of `assignment` under its old epoch: later, so
with the higher HLC. After the heal every agent holds the successor's value.
"""

from __future__ import annotations

import http.client

import pytest

from tests.conftest import poll_until
from tests.lan.netlab import Host

pytestmark = [pytest.mark.root, pytest.mark.netns]


def controller_of(host: Host) -> dict | None:
    try:
        return host.api("/v1/controller")
    except (OSError, ValueError, http.client.HTTPException):
        return None


def value_of(host: Host, key: str) -> dict | None:
    try:
        return host.api(f"/v1/kv/{key}")
    except (OSError, ValueError, http.client.HTTPException):
        return None


def test_after_the_heal_the_successors_fenced_write_wins_over_the_deposed_ones_later_write(
    make_lan,
):
    lan = make_lan(3)
    hosts = lan.hosts
    for host in hosts:
        host.start_agent(extra=("--bootstrap-expect", "3"))
    names = {f"host-{h.index}" for h in hosts}
    poll_until(lambda: all(set(h.members()) == names and set(h.members().values()) == {"alive"}
                           for h in hosts), 60)  # fmt: skip

    def one_controller() -> dict | None:
        answers = [controller_of(h) for h in hosts]
        if all(a and a["controller"] for a in answers) and len(
                {(a["controller"], a["epoch"]) for a in answers}) == 1:  # fmt: skip
            return answers[0]
        return None

    poll_until(lambda: one_controller() is not None, 60)
    first = one_controller()
    assert first is not None
    old_epoch = first["epoch"]
    deposed = next(h for h in hosts if f"host-{h.index}" == first["controller"])
    others = [h for h in hosts if h is not deposed]
    lan.partition([deposed], others)

    def successor() -> dict | None:
        c = controller_of(others[0])
        return c if c and c["controller"] and c["epoch"] > old_epoch else None

    poll_until(lambda: successor() is not None, 30)
    new = successor()
    assert new is not None
    status, body = others[0].put(f"assignment?fence={new['epoch']}", "successor")
    assert status == 200, body
    status, body = deposed.put(f"assignment?fence={old_epoch}", "deposed")
    assert status == 200, body  # it has heard of no successor: it cannot refuse
    deposed_hlc = body["hlc"]
    lan.heal(hosts)
    for host in hosts:
        poll_until(lambda h=host: (value_of(h, "assignment") or {}).get("value") == "successor",
                   60)  # fmt: skip
    won = value_of(deposed, "assignment")
    assert won is not None and won["epoch"] == new["epoch"] and won["hlc"] < deposed_hlc
    status, body = deposed.put(f"assignment?fence={old_epoch}", "again")
    assert status == 409 and body["epoch"] == new["epoch"]  # it knows better now
