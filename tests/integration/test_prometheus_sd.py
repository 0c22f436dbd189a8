"""Prometheus finds and scrapes every agent through `GET /v1/sd/prometheus`:
a real Prometheus (Debian's package), started here on loopback, whose
configuration holds one `http_sd_configs` entry and no target list."""

import json
import socket
import subprocess
import urllib.parse
import urllib.request

import pytest

from tests.conftest import poll_until, require_program
from tests.integration.agents import api_request
from tests.integration.dnsagents import wait_formed

TOKEN = "sd-test-token-0123456789"


def start_agent(agents, name, token_file, tags=()):
    extra = ["--api-token-file", str(token_file), "--bootstrap-expect", "2", "--no-discovery"]
    return agents.add(name, extra=[*extra, *(f"--tag={t}" for t in tags)])


def sd_get(agent, token=None):
    req = urllib.request.Request(f"http://{agent.ip}:7947/v1/sd/prometheus")
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    with urllib.request.urlopen(req, timeout=5) as r:
        return r.status, r.headers["Content-Type"], json.loads(r.read())


@pytest.fixture
def token_file(tmp_path):
    path = tmp_path / "api-token"
    path.write_text(TOKEN + "\n")
    path.chmod(0o600)
    return path


def test_the_target_groups_carry_labels_and_need_the_token(agents, token_file):
    """One group per live member, its /metrics address, tags and controller as labels."""
    a = start_agent(agents, "sd-a", token_file, ["role=web", "rack.id=r1"])
    b = start_agent(agents, "sd-b", token_file)
    controller, _ = wait_formed([a, b])
    status, _ = api_request(a, "GET", "/v1/sd/prometheus")
    assert status == 401  # it lists every API address: the token is needed even on loopback
    status, kind, groups = sd_get(a, TOKEN)
    assert status == 200 and kind.startswith("application/json")
    by_node = {g["labels"]["__meta_shoal_node"]: g for g in groups}
    assert set(by_node) == {"sd-a", "sd-b"}
    assert by_node["sd-a"]["targets"] == [f"{a.ip}:7947"]
    labels = by_node["sd-a"]["labels"]
    assert labels["__meta_shoal_tag_role"] == "web" and labels["__meta_shoal_tag_rack_id"] == "r1"
    assert labels["__meta_shoal_cluster"] == "shoal" and labels["__meta_shoal_status"] == "alive"
    assert labels["__meta_shoal_health"] == "passing"
    assert labels["__meta_shoal_address"] == f"{a.ip}:7946"
    assert [n for n, g in by_node.items()
            if g["labels"]["__meta_shoal_controller"] == "true"] == [controller]  # fmt: skip


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Prometheus:
    """`prometheus` on 127.0.0.1 with one http_sd_configs entry."""

    def __init__(self, binary, root, seed, token_file):
        self.port = _free_port()
        config = root / "prometheus.yml"
        sd = {"url": f"http://{seed.ip}:7947/v1/sd/prometheus", "refresh_interval": "1s",
              "authorization": {"credentials_file": str(token_file)}}  # fmt: skip
        config.write_text(json.dumps({  # JSON is YAML
            "global": {"scrape_interval": "1s", "scrape_timeout": "1s"},
            "scrape_configs": [{"job_name": "shoal", "http_sd_configs": [sd],
                                "authorization": {"credentials_file": str(token_file)}}],
        }))  # fmt: skip
        self.log_path = root / "prometheus.log"
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                [binary, f"--config.file={config}", f"--storage.tsdb.path={root / 'tsdb'}",
                 f"--web.listen-address=127.0.0.1:{self.port}", "--log.level=warn"],
                stdout=log, stderr=log, stdin=subprocess.DEVNULL)  # fmt: skip

    def get(self, path, **params):
        url = f"http://127.0.0.1:{self.port}{path}?{urllib.parse.urlencode(params)}"
        try:
            with urllib.request.urlopen(url, timeout=5) as r:
                return json.loads(r.read())["data"]
        except OSError:
            return None

    def targets_up(self) -> dict[str, str]:
        """The active targets' instances, each with its health (up, down, unknown)."""
        data = self.get("/api/v1/targets", state="active")
        if data is None:
            return {}
        return {t["labels"]["instance"]: t["health"] for t in data["activeTargets"]}

    def alive_series(self) -> set[str]:
        """The instances a query of shoal_members{state="alive"} returns a series for."""
        data = self.get("/api/v1/query", query='shoal_members{state="alive"}')
        return set() if data is None else {r["metric"]["instance"] for r in data["result"]}

    def stop(self):
        self.proc.kill()
        self.proc.wait(10)


def test_a_real_prometheus_follows_the_membership(agents, token_file, tmp_path):
    """Up on every agent within its refresh; a joined agent is scraped with
    no config change; a killed one's target disappears."""
    binary = require_program("prometheus", "prometheus")
    a = start_agent(agents, "prom-a", token_file)
    b = start_agent(agents, "prom-b", token_file)
    wait_formed([a, b])
    prom = Prometheus(binary, tmp_path, a, token_file)
    try:
        two = {f"{x.ip}:7947" for x in (a, b)}
        poll_until(lambda: prom.targets_up() == dict.fromkeys(two, "up"), 30, interval_s=0.2)
        poll_until(lambda: prom.alive_series() == two, 15, interval_s=0.2)
        c = start_agent(agents, "prom-c", token_file)
        three = two | {f"{c.ip}:7947"}
        poll_until(lambda: prom.targets_up() == dict.fromkeys(three, "up"), 30, interval_s=0.2)
        poll_until(lambda: prom.alive_series() == three, 15, interval_s=0.2)
        b.kill()
        rest = three - {f"{b.ip}:7947"}
        poll_until(lambda: prom.targets_up() == dict.fromkeys(rest, "up"), 30, interval_s=0.2)
        poll_until(lambda: prom.alive_series() == rest, 15, interval_s=0.2)  # marked stale
        assert prom.proc.poll() is None
    except AssertionError:
        print(prom.log_path.read_text(errors="replace")[-3000:])
        raise
    finally:
        prom.stop()
