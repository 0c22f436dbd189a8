"""Sessions, checks, user events and queries in the client: the calls as data,
the keepalive schedule told the time, and both sessions against a scripted
server that stops knowing the session."""

from __future__ import annotations

import asyncio
import json
import re

import pytest

from shoal.client import AsyncClient, Client, NotFound, QueryResult, calls
from shoal.client.session import Keepalive
from shoal.client.types import SessionInfo, UserEvent
from shoal.client.watch import WatchCursor
from tests.unit.client.test_client_transport import ScriptedServer, json_reply


def test_a_session_is_opened_with_its_ttl_name_and_checks():
    call = calls.session_open(5, "broker-1", ["app"])
    assert (call.method, call.path) == ("POST", "/v1/session")
    assert json.loads(call.body) == {"ttl_s": 5, "name": "broker-1", "checks": ["app"]}
    assert calls.session_renew("ab/c").path == "/v1/session/ab%2Fc/renew"
    assert calls.session_close("ab").method == "DELETE"


@pytest.mark.parametrize("ttl", [0, -1, True, "10"])
def test_a_ttl_that_is_not_seconds_is_refused_before_sending(ttl):
    with pytest.raises(ValueError, match="ttl"):
        calls.session_open(ttl)


def test_a_check_takes_pass_warn_fail_or_the_health_words_and_sends_the_note():
    assert calls.check_update("app", "pass", "serving").path == "/v1/check/app/pass"
    assert calls.check_update("app", "critical").path == "/v1/check/app/fail"
    assert calls.check_update("app", "warn", "slow").body == b"slow"
    with pytest.raises(ValueError, match="pass, warn or fail"):
        calls.check_update("app", "ok")


def test_an_event_name_is_quoted_whole_and_text_payloads_go_as_utf8():
    call = calls.user_event("de/ploy", "é")
    assert (call.path, call.body) == ("/v1/event/de%2Fploy", "é".encode())
    with pytest.raises(ValueError):
        calls.user_event("")


def test_a_query_carries_its_filters_and_timeout_and_waits_as_long():
    call = calls.query("load", b"p", node="^web-", tags={"rack": re.compile("r1|r2")},
                       timeout_s=2.5)  # fmt: skip
    assert call.path == "/v1/query/load?node=%5Eweb-&tag=rack%3Dr1%7Cr2&timeout=2.5"
    assert (call.body, call.wait_s) == (b"p", 2.5)


@pytest.mark.parametrize("kwargs,error", [
    ({"node": "("}, re.error), ({"tags": {"k": "[a"}}, re.error),
    ({"timeout_s": 0}, ValueError), ({"timeout_s": 301}, ValueError),
    ({"tags": {"": "x"}}, ValueError),
])  # fmt: skip
def test_a_bad_query_is_refused_before_anything_is_sent(kwargs, error):
    with pytest.raises(error):
        calls.query("load", **kwargs)


def test_a_query_result_names_each_member_with_its_answer_as_bytes():
    body = json.dumps({"id": "1f", "name": "load", "expected": 3, "answered": 1,
                       "duration_s": 0.03, "complete": False, "members": {
                           "a": {"status": "answered", "answer": None, "answer_base64": "AP8="},
                           "b": {"status": "error", "error": "exit 1: boom"},
                           "c": {"status": "silent"}}}).encode()  # fmt: skip
    result = calls.answer(calls.query("load"), 200, "OK", body)
    assert isinstance(result, QueryResult)
    assert result.answers == {"a": b"\x00\xff"}
    assert (result.members["b"].error, result.members["c"].status) == ("exit 1: boom", "silent")


def test_user_events_are_a_topic_a_watch_asks_for_and_decode_their_payload():
    cursor = WatchCursor(("events",))
    assert cursor.path() == "/v1/watch?topics=events"
    cursor.opened(b'{"type": "hello", "run": "r", "index": 4}')
    line = json.dumps({"index": 5, "topic": "events", "type": "user", "name": "deploy",
                       "id": "ab:1", "origin": "n1", "payload_bytes": 2,
                       "payload_base64": "aGk="}).encode()  # fmt: skip
    event = cursor.event(line)
    assert isinstance(event, UserEvent) and (event.name, event.payload) == ("deploy", b"hi")


def test_a_resync_of_events_alone_only_moves_the_position():
    """User events cannot be listed: the watch goes on from the agent's index."""
    cursor = WatchCursor(("events",), index=9, run="old")
    steps = cursor.resync()
    call = next(steps)
    assert call.path == "/v1/controller"
    with pytest.raises(StopIteration) as done:
        steps.send(calls.typed(calls.Controller)(b'{"controller": null, "epoch": null, '
                                                 b'"index": 3, "run": "new"}'))  # fmt: skip
    assert done.value.value == [] and (cursor.index, cursor.run) == (3, "new")


def test_renewals_come_every_third_of_the_ttl_and_retries_fit_before_it_runs_out():
    keepalive = Keepalive(9.0, now=100.0)
    assert keepalive.interval_s == 3.0 and keepalive.expires_at == 109.0
    assert keepalive.retry_delay(now=103.0) == 1.0  # 6 s left: at most 1 s
    assert keepalive.retry_delay(now=108.8) == 0.1  # almost gone: at least 0.1 s
    assert not keepalive.expired(108.9) and keepalive.expired(109.0)
    keepalive.renewed(now=104.0)
    assert keepalive.expires_at == 113.0


def session_script() -> list[bytes]:
    """Open (TTL 0.3 s), one renewal, then the agent no longer knows it."""
    return [
        json_reply(200, {"id": "s1", "ttl_s": 0.3, "expires_in_s": 0.3}),
        json_reply(200, {"id": "s1", "ttl_s": 0.3, "expires_in_s": 0.3}),
        json_reply(404, {"error": "no session 's1' on this agent: open a new one"}),
    ]


def test_a_session_whose_renewal_gets_404_is_lost_and_says_so():
    server = ScriptedServer(session_script())
    seen: list[str] = []
    try:
        session = Client(server.addr, token="").session(ttl=1, on_lost=lambda s: seen.append(s.id))
        assert session.id == "s1" and not session.lost
        assert session.wait_lost(10)
        assert seen == ["s1"] and "open a new one" in session.reason
        session.close()  # lost: nothing more is sent
        assert server.requests == ["POST /v1/session HTTP/1.1", "PUT /v1/session/s1/renew HTTP/1.1",
                                   "PUT /v1/session/s1/renew HTTP/1.1"]  # fmt: skip
    finally:
        server.close()


def test_an_async_session_is_lost_the_same_way():
    server = ScriptedServer(session_script())

    async def main() -> str:
        async with AsyncClient(server.addr, token="").session(ttl=1) as session:
            async with asyncio.timeout(10):
                await session.wait_lost()
            return session.reason

    try:
        assert "open a new one" in asyncio.run(main())
    finally:
        server.close()


def test_a_put_under_a_session_the_agent_ended_marks_it_lost():
    server = ScriptedServer([json_reply(200, {"id": "s1", "ttl_s": 60}),
                             json_reply(404, {"error": "no session 's1'"})])  # fmt: skip
    try:
        session = Client(server.addr, token="").session(ttl=60)
        with pytest.raises(NotFound):
            session.put("k", "v")
        assert session.lost and server.requests[1] == "PUT /v1/kv/k?session=s1 HTTP/1.1"
        session.close()
    finally:
        server.close()


def test_session_info_decodes_a_renewals_brief_answer():
    info = calls.answer(calls.session_renew("s1"), 200, "OK",
                        b'{"id": "s1", "ttl_s": 5, "expires_in_s": 4.9}')  # fmt: skip
    assert info == SessionInfo(id="s1", ttl_s=5, expires_in_s=4.9)
