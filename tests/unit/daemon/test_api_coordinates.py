"""GET /v1/coordinates and GET /v1/rtt, on a node that has probed another."""

import random
from types import SimpleNamespace

import pytest

from shoal.daemon.api.answers import HttpError, Request
from shoal.daemon.api.coordinates import coordinates_route, rtt_route
from shoal.membership.messages import Ack, Alive, Ping
from shoal.membership.swim import SwimNode
from shoal.membership.vivaldi import VivaldiConfig, origin
from tests.unit.membership.helpers import CONFIG, ident


class FakeAgent:
    """The two reads the routes make, from a real SwimNode."""

    def __init__(self, node: SwimNode) -> None:
        self.node = node

    def status(self):
        return SimpleNamespace(node=SimpleNamespace(members=tuple(self.node.members())))

    def coordinates(self):
        return self.node.coordinates_known()


@pytest.fixture
def agent() -> FakeAgent:
    """n1 knows n2 and n3 and has timed a probe of n2 (20 ms)."""
    node = SwimNode(ident(1), CONFIG, random.Random(1))
    node.start(0.0)
    for i in (2, 3):
        node.receive(Alive(1, ident(i)), ident(i).addr, 0.0)
    now = 0.0
    while True:
        pings = [m for s in node.drain().send for m in s.messages if isinstance(m, Ping)]
        if pings and pings[0].target == "n2":
            break
        now = node.next_deadline()
        node.tick(now)
    theirs = origin(VivaldiConfig())
    node.receive(Ack(pings[0].seq, 1, theirs), ident(2).addr, now + 0.020)
    return FakeAgent(node)


def get(path: str, **query: str) -> Request:
    return Request("GET", path, {k: [v] for k, v in query.items()}, b"")


def test_coordinates_lists_every_member_with_its_coordinate_or_null(agent):
    """Members this agent has not probed yet are listed, with null."""
    status, body = coordinates_route(agent, get("/v1/coordinates"))
    rows = {r["name"]: r for r in body["coordinates"]}
    assert status == 200 and body["node"] == "n1" and set(rows) == {"n1", "n2", "n3"}
    assert rows["n2"]["direct"] and rows["n2"]["coordinate"]["error"] == 1.5
    assert rows["n3"]["coordinate"] is None and not rows["n3"]["direct"]
    assert len(rows["n1"]["coordinate"]["vec"]) == 8


def test_rtt_gives_ms_with_an_error_term_and_whether_the_probe_was_direct(agent):
    """`b` defaults to this agent; error is the sum of both errors."""
    status, body = rtt_route(agent, get("/v1/rtt", a="n2"))
    me = agent.node.coordinate()
    assert status == 200 and body["b"] == "n1" and body["direct"] is True
    assert body["rtt_ms"] == pytest.approx(me.distance_to(origin(VivaldiConfig())) * 1000)
    assert body["error"] == pytest.approx(me.error + 1.5)
    assert body["error_ms"] == pytest.approx(body["rtt_ms"] * body["error"])


def test_rtt_without_a_or_for_a_member_without_coordinate_is_an_error(agent):
    """400 names the missing field; 404 names the member without a coordinate."""
    with pytest.raises(HttpError) as missing:
        rtt_route(agent, get("/v1/rtt"))
    assert missing.value.status == 400 and missing.value.fields == {"field": "a"}
    with pytest.raises(HttpError) as unknown:
        rtt_route(agent, get("/v1/rtt", a="n2", b="n3"))
    assert unknown.value.status == 404 and unknown.value.fields == {"field": "b"}


def test_near_sorts_by_estimated_round_trip_members_without_coordinates_last(agent):
    """`members --near n2`: n2 itself (0 ms), then n1, then n3 (no coordinate)."""
    status, body = coordinates_route(agent, get("/v1/coordinates", near="n2"))
    assert [r["name"] for r in body["coordinates"]] == ["n2", "n1", "n3"]
    assert body["coordinates"][2]["rtt_ms"] is None
    with pytest.raises(HttpError) as unknown:
        coordinates_route(agent, get("/v1/coordinates", near="n3"))
    assert unknown.value.status == 404
