"""Client sessions and health checks on real agents (issue 30): what an
application and an operator see through the HTTP API."""

from __future__ import annotations

import http.client
import http.server
import json
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import poll_until
from tests.integration.agents import api_request

request = api_request


def visible(agent: Any, key: str) -> bool:
    return request(agent, "GET", f"/v1/kv/{key}")[0] == 200


def health_of(agent: Any, name: str) -> str | None:
    for m in request(agent, "GET", "/v1/members")[1]["members"]:
        if m["name"] == name:
            return m["health"]
    return None


def formed(agents, n: int, extra: list[str] | None = None) -> list[Any]:
    started = [agents.add(extra=extra) for _ in range(n)]
    agents.wait_all_see([a.name for a in started], "alive", started)
    return started


def test_a_sessions_keys_go_from_every_agent_when_its_keepalives_stop(agents):
    a, b, c = formed(agents, 3)
    status, session = request(a, "POST", "/v1/session", {"ttl_s": 2, "name": "broker-1"})
    assert status == 200 and session["ttl_s"] == 2
    sid = session["id"]
    status, body = request(a, "PUT", f"/v1/kv/brokers/1?session={sid}", b'{"port": 9092}')
    assert status == 200 and body["ephemeral"] is True
    for agent in (a, b, c):
        poll_until(lambda ag=agent: visible(ag, "brokers/1"), 10)
    renewed_until = time.monotonic() + 3
    while time.monotonic() < renewed_until:  # the application is alive: renewals keep it
        assert request(a, "PUT", f"/v1/session/{sid}/renew")[0] == 200
        assert visible(c, "brokers/1")
        time.sleep(0.5)  # the renewal cadence of a client, not a wait for a condition
    stopped = time.monotonic()
    for agent in (a, b, c):
        poll_until(lambda ag=agent: not visible(ag, "brokers/1"), 2 + 1)
    print(
        f"session keys gone from 3 agents {time.monotonic() - stopped:.2f} s after the "
        "last keepalive (ttl 2 s)"
    )
    status, body = request(a, "PUT", f"/v1/session/{sid}/renew")
    assert status == 404 and "open a new one" in body["error"]
    assert request(a, "GET", "/v1/sessions")[1]["sessions"] == []


def test_closing_a_session_deletes_its_keys_at_once_and_other_keys_stay(agents):
    a, b = formed(agents, 2)
    sid = request(a, "POST", "/v1/session", {"ttl_s": 60})[1]["id"]
    assert request(a, "PUT", f"/v1/kv/locks/x?session={sid}", b"a")[0] == 200
    assert request(a, "PUT", "/v1/kv/plain", b"stays")[0] == 200
    poll_until(lambda: visible(b, "locks/x") and visible(b, "plain"), 10)
    listed = request(a, "GET", f"/v1/session/{sid}")[1]
    assert listed["keys"] == ["locks/x"]
    assert request(a, "DELETE", f"/v1/session/{sid}")[0] == 200
    poll_until(lambda: not visible(b, "locks/x"), 2)
    assert visible(a, "plain") and visible(b, "plain")


def test_a_key_rewritten_outside_the_session_survives_its_end(agents):
    (a,) = formed(agents, 1)
    sid = request(a, "POST", "/v1/session", {"ttl_s": 60})[1]["id"]
    assert request(a, "PUT", f"/v1/kv/k?session={sid}", b"1")[0] == 200
    assert request(a, "PUT", "/v1/kv/k", b"2")[0] == 200  # a later write wins
    assert request(a, "DELETE", f"/v1/session/{sid}")[0] == 200
    assert request(a, "GET", "/v1/kv/k")[1]["value"] == "2"


def test_sessions_end_with_an_agent_restart(agents):
    (a,) = formed(agents, 1)
    sid = request(a, "POST", "/v1/session", {"ttl_s": 600})[1]["id"]
    assert request(a, "PUT", f"/v1/kv/reg?session={sid}", b"1")[0] == 200
    a.kill()
    a.start()
    poll_until(lambda: a.members().get(a.name) is not None, 20)
    assert request(a, "PUT", f"/v1/session/{sid}/renew")[0] == 404
    assert not visible(a, "reg")


@pytest.mark.parametrize("body,status,words", [
    ({"ttl_s": 0}, 400, "ttl_s must be"),
    ({"ttl_s": 100_000}, 400, "ttl_s must be"),
    ({"ttl_s": "ten"}, 400, "ttl_s must be a number"),
    ({"ttl_s": 5, "checks": ["nope"]}, 400, "no check 'nope'"),
    (["not", "an", "object"], 400, "body must be JSON"),
])  # fmt: skip
def test_bad_session_requests_are_4xx_with_a_json_error_and_open_nothing(agents, body, status,
                                                                        words):  # fmt: skip
    (a,) = formed(agents, 1)
    got, answer = request(a, "POST", "/v1/session", body)
    assert got == status and words in answer["error"]
    assert request(a, "GET", "/v1/sessions")[1]["sessions"] == []
    got, answer = request(a, "PUT", "/v1/kv/k?session=feedface", b"v")
    assert got == 404 and "no session" in answer["error"]
    assert request(a, "GET", "/v1/kv/k")[0] == 404


class _Service(http.server.BaseHTTPRequestHandler):
    healthy = True

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        self.send_response(200 if _Service.healthy else 500)
        self.end_headers()
        self.wfile.write(b"ok" if _Service.healthy else b"down")

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def service():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Service)
    _Service.healthy = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def write_config(path: Path, text: str) -> list[str]:
    path.write_text(text)
    return ["--config", str(path)]


def test_a_failing_http_check_turns_the_member_critical_on_every_agent(agents, service,
                                                                       tmp_path):  # fmt: skip
    port = service.server_address[1]
    extra = write_config(
        tmp_path / "checked.toml",
        f"""
[[checks]]
id = "web"
kind = "http"
target = "http://127.0.0.1:{port}/health"
interval_s = 1
timeout_s = 1
""",
    )
    checked = agents.add(name="checked", extra=extra)
    others = [agents.add() for _ in range(2)]
    everyone = [checked, *others]
    agents.wait_all_see([a.name for a in everyone], "alive", everyone)
    for agent in everyone:
        poll_until(lambda ag=agent: health_of(ag, "checked") == "passing", 15)
    assert request(checked, "GET", "/v1/checks")[1]["checks"][0]["status"] == "passing"
    watch = http.client.HTTPConnection(others[0].ip, 7947, timeout=15)
    watch.request("GET", "/v1/watch?topics=members")
    stream = watch.getresponse()
    stream.readline()  # hello
    _Service.healthy = False
    failed_at = time.monotonic()
    for agent in everyone:
        poll_until(lambda ag=agent: health_of(ag, "checked") == "critical", 1 + 1 + 5)
    print(
        f"critical on 3 agents {time.monotonic() - failed_at:.2f} s after the service "
        "started failing (interval 1 s)"
    )
    while True:
        event = json.loads(stream.readline())
        if event.get("type") == "member-health-changed":
            break
    watch.close()
    assert (event["name"], event["health"], event["previous"]) == ("checked", "critical",
                                                                    "passing")  # fmt: skip
    critical = request(others[1], "GET", "/v1/members?health=critical")[1]["members"]
    assert [m["name"] for m in critical] == ["checked"]
    assert request(others[1], "GET", "/v1/members?health=bogus")[0] == 400


def test_a_ttl_check_goes_critical_without_updates_and_ends_the_sessions_bound_to_it(
    agents, tmp_path
):
    extra = write_config(
        tmp_path / "ttl.toml",
        """
[[checks]]
id = "app"
kind = "ttl"
ttl_s = 2
""",
    )
    a = agents.add(name="ttl-agent", extra=extra)
    poll_until(lambda: a.members().get("ttl-agent") is not None, 20)
    status, body = request(a, "POST", "/v1/session", {"ttl_s": 60, "checks": ["app"]})
    assert status == 409 and "critical" in body["error"]  # a new check starts critical
    assert request(a, "PUT", "/v1/check/app/pass", b"serving")[1]["status"] == "passing"
    sid = request(a, "POST", "/v1/session", {"ttl_s": 60, "checks": ["app"]})[1]["id"]
    assert request(a, "PUT", f"/v1/kv/reg?session={sid}", b"1")[0] == 200
    assert health_of(a, "ttl-agent") == "passing"
    poll_until(lambda: health_of(a, "ttl-agent") == "critical", 2 + 2)
    poll_until(lambda: not visible(a, "reg"), 2)
    assert request(a, "PUT", f"/v1/session/{sid}/renew")[0] == 404
    assert request(a, "PUT", "/v1/check/nope/pass")[0] == 404
    assert request(a, "PUT", "/v1/check/app/maybe")[0] == 404


@pytest.mark.parametrize("text,words", [
    ('[[checks]]\nid = "x"\nkind = "ping"\ntarget = "a"\n', "kind must be one of"),
    ('[[checks]]\nid = "x"\nkind = "script"\ntarget = "true"\n', "script checks are off"),
    ('[[checks]]\nid = "x"\nkind = "tcp"\ntarget = "127.0.0.1:1"\ninterval_s = 0.5\n',
     "interval_s must be at least 1"),
    ('[[checks]]\nid = "x"\nkind = "http"\ntarget = "ftp://x"\n', "http:// or https://"),
])  # fmt: skip
def test_a_bad_check_in_the_config_is_one_line_and_exit_2(tmp_path, text, words):
    path = tmp_path / "bad.toml"
    path.write_text(text)
    out = subprocess.run([sys.executable, "-m", "shoal.daemon.cli", "agent", "--config",
                          str(path), "--data-dir", str(tmp_path / "d")], capture_output=True,
                         text=True, timeout=30)  # fmt: skip
    assert out.returncode == 2, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and words in lines[0], out.stderr


def test_with_healthy_only_a_controller_whose_application_fails_hands_over(agents, tmp_path):
    """`election.healthy_only = 1`: the controller's own TTL check going
    critical makes it step aside, and a healthy member is elected."""
    extra = write_config(
        tmp_path / "healthy.toml",
        """
[election]
healthy_only = 1
[[checks]]
id = "app"
kind = "ttl"
ttl_s = 3
""",
    )
    started = [agents.add(extra=[*extra, "--bootstrap-expect", "3"]) for _ in range(3)]

    def pass_all() -> None:
        for agent in started:
            request(agent, "PUT", "/v1/check/app/pass", b"ok")

    def controller() -> tuple[str, int] | None:
        answers = {(c["controller"], c["epoch"]) for c in
                   (request(a, "GET", "/v1/controller")[1] for a in started)}  # fmt: skip
        only = answers.pop() if len(answers) == 1 else None
        return only if only and only[0] else None

    def elected() -> bool:
        pass_all()  # the application of each member says it is well
        return controller() is not None

    poll_until(lambda: all(a.members().get(a.name) for a in started), 20)
    poll_until(elected, 30, interval_s=0.5)
    name, epoch = controller()  # type: ignore[misc]
    sick = next(a for a in started if a.name == name)
    healthy = [a for a in started if a is not sick]

    def handed_over() -> bool:
        for agent in healthy:
            request(agent, "PUT", "/v1/check/app/pass", b"ok")
        now = controller()
        return now is not None and now[0] != name and now[1] > epoch

    poll_until(handed_over, 3 + 10, interval_s=0.5)  # the TTL, then the hand-over
    assert health_of(healthy[0], name) == "critical"
