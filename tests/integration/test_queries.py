"""Queries on real agents (issue 29): the expected members are fixed when
the query is sent, it returns as soon as they all answered, and the result
says what each one did."""

from __future__ import annotations

import http.client
import json
import signal
import time
from typing import Any

import pytest

from tests.conftest import poll_until

ECHO = "query:whoami=echo -n $SHOAL_SELF_NAME:$(cat)"
BIG = "query:big=head -c 70000 /dev/zero"


def query(agent: Any, path: str, body: bytes = b"") -> tuple[int, Any]:
    conn = http.client.HTTPConnection(agent.ip, 7947, timeout=30)
    try:
        conn.request("POST", path, body=body)
        resp = conn.getresponse()
        return resp.status, json.loads(resp.read())
    finally:
        conn.close()


@pytest.fixture
def five(agents):
    started = [agents.add(extra=["--event-handler", ECHO, "--event-handler", BIG,
                                 "--tag", f"rack=r{i % 2}"]) for i in range(4)]  # fmt: skip
    started.append(agents.add(name="no-handler"))
    agents.wait_all_see([a.name for a in started], "alive", started)
    return started


def test_a_query_returns_as_soon_as_every_expected_member_answered(five):
    asked_at = time.monotonic()
    status, out = query(five[0], "/v1/query/whoami?timeout=10", b"ping")
    took = time.monotonic() - asked_at
    assert status == 200 and out["complete"] and out["expected"] == 5
    assert took < 2.0, took  # not the timeout: every member answered
    for agent in five[:4]:
        assert out["members"][agent.name] == {
            "status": "answered", "answer": f"{agent.name}:ping",
            "answer_base64": out["members"][agent.name]["answer_base64"]}  # fmt: skip
    assert out["members"]["no-handler"]["status"] == "no-handler"
    assert out["answered"] == 4
    print(f"query to 5 agents returned in {took * 1000:.0f} ms")


def test_filters_fix_the_expected_set(five):
    _, by_tag = query(five[1], "/v1/query/whoami?tag=rack=r1")
    assert set(by_tag["members"]) == {five[1].name, five[3].name}
    _, by_name = query(five[1], f"/v1/query/whoami?node=^{five[2].name}$")
    assert list(by_name["members"]) == [five[2].name]


def test_a_silent_member_is_named_and_the_query_ends_at_its_timeout(five):
    stopped = five[3]
    stopped.signal(signal.SIGSTOP)
    try:
        asked_at = time.monotonic()
        _, out = query(five[0], "/v1/query/whoami?timeout=2")
        took = time.monotonic() - asked_at
    finally:
        stopped.signal(signal.SIGCONT)
    assert not out["complete"] and 1.9 < took < 4, took
    assert out["members"][stopped.name]["status"] in ("silent", "failed")
    assert out["answered"] == 3


def test_an_answer_over_64_kib_is_a_clear_error(five):
    _, out = query(five[0], f"/v1/query/big?node=^{five[1].name}$")
    reply = out["members"][five[1].name]
    assert reply["status"] == "error" and "over the 65536-byte limit" in reply["error"]


@pytest.mark.parametrize("path,words", [
    ("/v1/query/whoami?node=(", "does not compile"),
    ("/v1/query/whoami?timeout=0", "timeout must be"),
    ("/v1/query/whoami?timeout=abc", "timeout must be"),
    ("/v1/query/two%20words", "query name"),
    ("/v1/query/whoami?tag=norack", "KEY=REGEX"),
])  # fmt: skip
def test_bad_queries_are_a_400_and_ask_nobody(agents, path, words):
    (a,) = agents.start(1)
    poll_until(lambda: a.members().get(a.name) is not None, 15)
    status, out = query(a, path)
    assert status == 400 and words in out["error"]
