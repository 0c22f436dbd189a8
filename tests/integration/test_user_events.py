"""User events on real agents (issue 29): every member runs its handler
once per event, including a member that was down when it was sent."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.conftest import poll_until
from tests.integration.agents import api_request

request = api_request


def handler(out: Path) -> list[str]:
    """A handler that keeps each payload and logs each run, per agent."""
    command = (
        f'cat > {out}/"$SHOAL_SELF_NAME.$SHOAL_EVENT_ID"; '
        f'echo "$SHOAL_EVENT_ID $SERF_EVENT $SERF_USER_EVENT" '
        f'>> {out}/"$SHOAL_SELF_NAME.log"'
    )
    return ["--event-handler", f"user:deploy={command}"]


def runs(out: Path, name: str) -> list[str]:
    path = out / f"{name}.log"
    return path.read_text().splitlines() if path.exists() else []


def test_a_64_kib_event_runs_every_handler_once_and_a_member_down_gets_it_on_return(
    agents, tmp_path
):
    out = tmp_path / "runs"
    out.mkdir()
    started = [agents.add(extra=handler(out)) for _ in range(3)]
    agents.wait_all_see([a.name for a in started], "alive", started)
    payload = os.urandom(64 * 1024)
    status, sent = request(started[0], "POST", "/v1/event/deploy", payload)
    assert status == 200 and sent["payload_bytes"] == len(payload)
    ident = sent["id"]
    for agent in started:
        # The handler writes the payload, then its log line: wait for both.
        poll_until(lambda a=agent: (out / f"{a.name}.{ident}").exists()
                   and (out / f"{a.name}.{ident}").read_bytes() == payload
                   and runs(out, a.name), 10)  # fmt: skip
        assert runs(out, agent.name) == [f"{ident} user deploy"]
    away = started[2]
    away.kill()
    agents.wait_all_see([away.name], "dead", started[:2], timeout_s=30)
    status, second = request(started[1], "POST", "/v1/event/deploy", b"v2")
    assert status == 200
    away.start()  # its data directory kept what it delivered: the first event is not rerun
    late = out / f"{away.name}.{second['id']}"
    poll_until(lambda: late.exists() and late.read_bytes() == b"v2", 30)
    for agent in started:
        lines = poll_until(lambda a=agent: len(runs(out, a.name)) >= 2 and runs(out, a.name), 10)
        assert sorted(lines) == sorted([f"{ident} user deploy", f"{second['id']} user deploy"])


@pytest.mark.parametrize("path,body,status,words", [
    ("/v1/event/", b"", 400, "event name"),
    ("/v1/event/two%20words", b"", 400, "event name"),
    ("/v1/event/" + "x" * 129, b"", 400, "event name"),
    ("/v1/event/big", b"x" * (64 * 1024 + 1), 413, ""),
])  # fmt: skip
def test_a_bad_event_is_a_4xx_and_sends_nothing(agents, path, body, status, words):
    (a,) = agents.start(1)
    poll_until(lambda: a.members().get(a.name) is not None, 15)
    got, answer = request(a, "POST", path, body)
    assert got == status and words in answer["error"]
    assert a.metric("shoal_store_local_writes_total") == 0


def test_event_records_stay_out_of_the_key_value_api(agents):
    (a,) = agents.start(1)
    poll_until(lambda: a.members().get(a.name) is not None, 15)
    assert request(a, "POST", "/v1/event/deploy", b"x")[0] == 200
    assert request(a, "GET", "/v1/kv/?prefix=")[1]["items"] == []
    status, answer = request(a, "PUT", "/v1/kv/%00e/forged", b"x")
    assert status == 400 and "reserved" in answer["error"]
