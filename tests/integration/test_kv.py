"""The replicated key-value store on real agents: what a user of `shoal kv` sees."""

import json
import subprocess
import sys
import urllib.error
import urllib.request

import pytest

from shoal.daemon.api.client import NotFoundError
from shoal.kernel.errors import ApiError
from tests.conftest import poll_until


def shoal_cli(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "shoal.daemon.cli", *args], capture_output=True,
                          input=stdin, timeout=60)  # fmt: skip


def value_on(agent, key: str) -> bytes | None:
    try:
        record = agent.api.get(f"/v1/kv/{key}")
    except NotFoundError:
        return None
    except ApiError:
        return None
    return record["value"].encode()


def names(agents) -> list[str]:
    return [a.name for a in agents]


def test_a_key_put_on_one_agent_is_readable_on_all_five(agents):
    """`shoal kv put` on one machine, `shoal kv get` on every other."""
    started = agents.start(5)
    agents.wait_all_see(names(started), "alive", started)
    out = shoal_cli("kv", "put", "--api", f"{started[2].ip}:7947", "brokers/controller", "n2")
    assert out.returncode == 0, out.stderr
    for agent in started:
        poll_until(lambda a=agent: value_on(a, "brokers/controller") == b"n2", 10)
    got = shoal_cli("kv", "get", "--json", "--api", f"{started[4].ip}:7947", "brokers/controller")
    record = json.loads(got.stdout)
    assert record["value"] == "n2" and record["writer"] == started[2].name
    assert shoal_cli("kv", "delete", "--api", f"{started[0].ip}:7947",
                     "brokers/controller").returncode == 0  # fmt: skip
    for agent in started:
        poll_until(lambda a=agent: value_on(a, "brokers/controller") is None, 10)
    missing = shoal_cli("kv", "get", "--api", f"{started[3].ip}:7947", "brokers/controller")
    assert missing.returncode == 1 and b"no key" in missing.stderr


def test_an_agent_that_was_down_during_writes_catches_up(agents):
    """Anti-entropy repairs what the pushes could not deliver."""
    started = agents.start(3, extra=["--no-discovery"])
    agents.wait_all_see(names(started), "alive", started)
    sleeper = started[2]
    sleeper.kill()
    for i in range(40):
        started[i % 2].api.request("PUT", f"/v1/kv/batch/{i:03d}", b"v%d" % i)
    sleeper.start()
    poll_until(lambda: value_on(sleeper, "batch/039") == b"v39", 30)
    listed = sleeper.api.get("/v1/kv/?prefix=batch/&limit=100")["items"]
    assert [item["key"] for item in listed] == [f"batch/{i:03d}" for i in range(40)]
    out = shoal_cli("kv", "list", "--api", f"{sleeper.ip}:7947", "batch/")
    assert out.stdout.decode().split() == [f"batch/{i:03d}" for i in range(40)]


def test_binary_values_and_stdin_round_trip(agents):
    (agent,) = agents.start(1)
    poll_until(lambda: agent.members(), 10)
    blob = bytes(range(256)) * 4
    put = shoal_cli("kv", "put", "--api", f"{agent.ip}:7947", "bin", "-", stdin=blob)
    assert put.returncode == 0, put.stderr
    got = shoal_cli("kv", "get", "--api", f"{agent.ip}:7947", "bin")
    assert got.stdout == blob  # piped: the bytes, no newline added (issue 23)


def _http(agent, method: str, path: str, body: bytes | None = None) -> tuple[int, dict]:
    req = urllib.request.Request(f"http://{agent.ip}:7947{path}", data=body, method=method)
    try:
        with urllib.request.urlopen(req, timeout=5) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


@pytest.mark.parametrize("method,path,body,status", [
    ("PUT", "/v1/kv/" + "k" * 1025, b"v", 400),
    ("PUT", "/v1/kv/big", b"x" * (512 * 1024 + 1), 413),
    ("GET", "/v1/kv/never-written", None, 404),
    ("POST", "/v1/kv/x", b"v", 405),
    ("PUT", "/v1/kv/", b"v", 405),
    ("GET", "/v1/kv/?limit=0", None, 400),
])  # fmt: skip
def test_bad_kv_requests_get_a_4xx_with_a_json_error(agents, method, path, body, status):
    (agent,) = agents.start(1)
    poll_until(lambda: agent.members(), 10)
    code, answer = _http(agent, method, path, body)
    assert code == status and answer["error"]
    assert _http(agent, "GET", "/v1/self")[0] == 200  # still serving
