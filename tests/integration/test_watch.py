"""Issue 21 on real agents, through the raw HTTP API: numbered watch streams
that resume, fenced writes, ephemeral keys.

The client library (tests/integration/test_client.py) is tested on top of
these; here the agent's own contract is checked with nothing in between.
"""

from __future__ import annotations

import http.client
import json
import time
from typing import Any

import pytest

from tests.conftest import poll_until
from tests.integration.agents import api_request


class RawWatch:
    """One `/v1/watch` stream read line by line over http.client."""

    def __init__(self, agent: Any, query: str) -> None:
        self.conn = http.client.HTTPConnection(agent.ip, 7947, timeout=15)
        self.conn.request("GET", f"/v1/watch?{query}")
        self.resp = self.conn.getresponse()
        self.status = self.resp.status

    def next(self) -> dict[str, Any]:
        """The next line that is not a ping."""
        while True:
            line = self.resp.readline()
            assert line, "the stream ended"
            obj = json.loads(line)
            if obj.get("type") != "ping":
                return obj

    def error(self) -> dict[str, Any]:
        """The JSON error body of a refused watch (and close it)."""
        try:
            return json.loads(self.resp.read())
        finally:
            self.close()

    def close(self) -> None:
        self.conn.close()


request = api_request


def kv_events(watch: RawWatch, n: int) -> list[dict[str, Any]]:
    out = []
    while len(out) < n:
        event = watch.next()
        if event.get("topic") == "kv":
            out.append(event)
    return out


def controller_known(agents: list[Any]) -> tuple[str, int]:
    """Wait until every agent names the same controller; (name, epoch)."""
    seen: dict[str, Any] = {}

    def agreed() -> bool:
        answers = {(c["controller"], c["epoch"]) for c in
                   (request(a, "GET", "/v1/controller")[1] for a in agents)}  # fmt: skip
        if len(answers) == 1 and None not in next(iter(answers)):
            seen["it"] = next(iter(answers))
            return True
        return False

    poll_until(agreed, 30, interval_s=0.2)
    return seen["it"]


def test_a_watch_resumes_from_its_last_index_with_nothing_lost_or_repeated(agents):
    """Drop the connection, write on another agent meanwhile, resume."""
    a, b, _ = agents.start(3)
    agents.wait_all_see([x.name for x in agents.agents], "alive", agents.agents)
    watch = RawWatch(a, "topics=kv&prefix=app/")
    hello = watch.next()
    assert hello["type"] == "hello" and hello["run"]
    assert request(a, "PUT", "/v1/kv/app/one", b"1")[0] == 200
    assert request(a, "PUT", "/v1/kv/other/x", b"x")[0] == 200  # outside the prefix
    (first,) = kv_events(watch, 1)
    assert (first["key"], first["type"], first["value"]) == ("app/one", "put", "1")
    watch.close()
    for i in range(2, 5):  # written on b: they reach a by push or anti-entropy
        assert request(b, "PUT", f"/v1/kv/app/k{i}", str(i).encode())[0] == 200
    assert request(b, "DELETE", "/v1/kv/app/one")[0] == 200
    poll_until(lambda: request(a, "GET", "/v1/kv/app/k4")[0] == 200, 15)
    poll_until(lambda: request(a, "GET", "/v1/kv/app/one")[0] == 404, 15)
    resumed = RawWatch(a, f"topics=kv&prefix=app/&index={first['index']}&run={hello['run']}")
    assert resumed.next()["type"] == "hello"
    events = kv_events(resumed, 4)
    resumed.close()
    assert sorted((e["key"], e["type"]) for e in events) == [
        ("app/k2", "put"),
        ("app/k3", "put"),
        ("app/k4", "put"),
        ("app/one", "delete"),
    ]
    assert all(e["reason"] == "sync" for e in events)  # they came from b
    indexes = [e["index"] for e in events]
    assert indexes == sorted(indexes) and indexes[0] > first["index"]


def test_a_watch_on_a_restarted_agent_is_told_gone_and_the_listing_says_where_to_go_on(agents):
    a, b = agents.start(2)
    agents.wait_all_see([a.name, b.name], "alive", [a, b])
    status, listing = request(a, "GET", "/v1/kv/?prefix=")
    assert status == 200 and listing["index"] >= 1
    old_run = listing["run"]
    a.kill()
    a.start()
    poll_until(lambda: a.members().get(b.name, {}).get("status") == "alive", 30)
    gone = RawWatch(a, f"index={listing['index']}&run={old_run}")
    assert gone.status == 410
    body = gone.error()
    assert "restarted" in body["error"] and body["run"] != old_run
    ahead = RawWatch(a, f"index={body['index'] + 1000}")
    assert ahead.status == 400 and "ahead" in ahead.error()["error"]
    for query in ("index=abc", "topics=kv,bogus", "index=-1"):
        bad = RawWatch(a, query)
        assert bad.status == 400 and "error" in bad.error(), query


def test_members_and_controller_changes_come_numbered_on_one_stream(agents):
    a, b, c = agents.start(3)
    agents.wait_all_see([x.name for x in (a, b, c)], "alive", [a, b, c])
    controller_known([a, b, c])
    watch = RawWatch(a, "topics=members,controller")
    watch.next()
    c.kill()
    seen = []
    while not any(e.get("type") == "member-failed" and e.get("name") == c.name for e in seen):
        seen.append(watch.next())
    watch.close()
    assert all(e["topic"] in ("members", "controller") for e in seen)
    assert [e["index"] for e in seen] == sorted(e["index"] for e in seen)


def test_fenced_writes_refuse_a_deposed_epoch_naming_both(agents):
    started = agents.start(3)
    agents.wait_all_see([x.name for x in started], "alive", started)
    _, epoch = controller_known(started)
    a = started[1]
    status, body = request(a, "PUT", f"/v1/kv/assignment?fence={epoch}", b"new")
    assert status == 200 and body["epoch"] == epoch
    status, body = request(a, "PUT", f"/v1/kv/assignment?fence={epoch - 1}", b"late")
    assert status == 409 and (body["fence"], body["epoch"]) == (epoch - 1, epoch)
    assert str(epoch) in body["error"] and "deposed" in body["error"]
    status, body = request(a, "PUT", "/v1/kv/assignment", b"unfenced")
    assert status == 409 and body["epoch"] == epoch
    status, body = request(a, "PUT", f"/v1/kv/assignment?fence={epoch + 5}", b"future")
    assert status == 409 and "above" in body["error"]
    for bad in ("x", "-1", "1.5"):
        status, body = request(a, "PUT", f"/v1/kv/assignment?fence={bad}", b"v")
        assert status == 400 and "fence" in body["error"]
    for agent in started:  # what was accepted is what everyone reads
        poll_until(lambda ag=agent: request(ag, "GET", "/v1/kv/assignment")[1].get("value")
                   == "new", 15)  # fmt: skip


def test_an_ephemeral_key_disappears_when_its_member_fails_and_stays_gone(agents):
    started = agents.start(3)
    a, b, owner = started
    agents.wait_all_see([x.name for x in started], "alive", started)
    status, body = request(owner, "PUT", "/v1/kv/brokers/3?ephemeral=1", b'{"port": 9093}')
    assert status == 200 and body["ephemeral"] is True
    for agent in (a, b):
        poll_until(lambda ag=agent: request(ag, "GET", "/v1/kv/brokers/3")[0] == 200, 15)
    _, record = request(a, "GET", "/v1/kv/brokers/3")
    assert record["ephemeral"] is True and record["owner"] == owner.name
    watch = RawWatch(a, "topics=kv&prefix=brokers/")
    watch.next()
    killed_at = time.monotonic()
    owner.kill()
    (gone,) = kv_events(watch, 1)
    watch.close()
    assert (gone["key"], gone["type"], gone["reason"]) == ("brokers/3", "delete", "owner-failed")
    print(f"ephemeral key gone from a watch {time.monotonic() - killed_at:.2f} s after kill -9")
    for agent in (a, b):
        assert request(agent, "GET", "/v1/kv/brokers/3")[0] == 404
        assert request(agent, "GET", "/v1/kv/?prefix=brokers/")[1]["items"] == []
    owner.start()
    agents.wait_all_see([x.name for x in started], "alive", started)
    status, body = request(owner, "GET", "/v1/kv/brokers/3")
    assert status == 404  # its restart ended it; nobody wrote it again
    for agent in (a, b):
        assert request(agent, "GET", "/v1/kv/brokers/3")[0] == 404
    assert request(owner, "PUT", "/v1/kv/brokers/3?ephemeral=1", b"again")[0] == 200
    for agent in (a, b):
        poll_until(lambda ag=agent: request(ag, "GET", "/v1/kv/brokers/3")[0] == 200, 15)


@pytest.mark.parametrize("query", ["ephemeral=maybe"])
def test_a_bad_write_query_is_a_400_and_writes_nothing(agents, query):
    (a,) = agents.start(1)
    poll_until(lambda: a.members().get(a.name) is not None, 15)
    status, body = request(a, "PUT", f"/v1/kv/k?{query}", b"v")
    assert status == 400 and "error" in body
    assert request(a, "GET", "/v1/kv/k")[0] == 404
