"""What an operator reaches for first (issue 23): the version, a health
check for probes, and an answer at the API's root. Real `shoal` commands
against real agents on loopback."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request
from pathlib import Path

from shoal import __version__
from shoal.daemon.keys import generate_key
from tests.conftest import poll_until
from tests.integration.agents import AgentCluster, AgentProcess, shoal_cli
from tests.integration.unprivileged import NOBODY, python_for_nobody


def get(agent: AgentProcess, path: str) -> tuple[int, dict]:
    try:
        with urllib.request.urlopen(f"http://{agent.ip}:7947{path}", timeout=5) as r:
            return r.status, json.load(r)
    except urllib.error.HTTPError as exc:
        return exc.code, json.load(exc)


def test_shoal_version_prints_the_version_and_exits_0():
    done = shoal_cli("--version")
    assert (done.returncode, done.stdout.strip()) == (0, f"shoal {__version__}")


def test_health_is_200_in_the_cluster_and_503_with_the_reason_after_a_leave(agents: AgentCluster):
    """A load balancer or systemd probe reads one status code; the body says why."""
    a, b = agents.start(2, extra=["--no-discovery"])
    agents.wait_all_see([a.name, b.name], "alive", [a, b])
    status, body = get(b, "/v1/health")
    assert status == 200 and body["status"] == "ok" and body["peers"] == 1
    assert shoal_cli("leave", "--api", f"{b.ip}:7947").returncode == 0
    status, body = get(b, "/v1/health")
    assert status == 503 and body["status"] == "unhealthy"
    assert "left the cluster" in body["reasons"][0]


def test_the_api_root_says_what_answers_there(agents: AgentCluster):
    (a,) = agents.start(1, extra=["--no-discovery"])
    agents.wait_all_see([a.name], "alive", [a])  # up
    status, body = get(a, "/")
    assert status == 200 and body["name"] == "shoal" and body["version"] == __version__
    assert "GET /v1/health" in body["endpoints"] and body["node"] == a.name


def test_members_with_no_match_says_so_instead_of_a_bare_header(agents: AgentCluster):
    (a,) = agents.start(1, extra=["--no-discovery"])
    agents.wait_all_see([a.name], "alive", [a])
    done = shoal_cli("members", "--status", "dead", "--api", f"{a.ip}:7947")
    assert (done.returncode, done.stdout.strip()) == (0, "no member is dead")


def test_keys_list_marks_the_primary_and_use_reads_right(agents: AgentCluster):
    key = generate_key()
    members = agents.start(2, extra=["--encrypt", key, "--no-discovery"])
    agents.wait_all_see([m.name for m in members], "alive", members)
    api = ["--api", f"{members[0].ip}:7947"]
    new = generate_key()
    assert shoal_cli("keys", "install", new, *api).returncode == 0
    listing = shoal_cli("keys", "list", *api).stdout
    assert f"{key}  [2/2]  primary on 2" in listing and f"{new}  [2/2]\n" in listing
    used = shoal_cli("keys", "use", new, *api)
    assert used.stdout.strip() == "Changing the primary key: 2/2 members acknowledged"
    assert f"{new}  [2/2]  primary on 2" in shoal_cli("keys", "list", *api).stdout


def test_monitor_says_it_started_and_exits_1_saying_why_when_the_agent_goes(agents: AgentCluster):
    """Serf's `monitor` does the same; before, shoal's printed nothing and
    exited 0 in silence when the agent stopped."""
    (a,) = agents.start(1, extra=["--no-discovery"])
    agents.wait_all_see([a.name], "alive", [a])
    monitor = subprocess.Popen(
        [sys.executable, "-m", "shoal.daemon.cli", "monitor", "--text", "--api", f"{a.ip}:7947"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert monitor.stderr is not None
        assert monitor.stderr.readline().startswith("Monitoring the agent at http://")
        poll_until(lambda: a.api.get("/v1/self").get("watchers", 0) >= 1, 10)
        a.signal(signal.SIGTERM)
        assert monitor.wait(20) == 1
        assert "ended the stream" in monitor.stderr.read()
    finally:
        if monitor.poll() is None:
            monitor.kill()
        monitor.wait()
        for pipe in (monitor.stdout, monitor.stderr):
            assert pipe is not None
            pipe.close()


def test_members_filter_by_tag_and_name_like_serf(agents: AgentCluster):
    a = agents.add(extra=["--no-discovery", "--tag", "role=web"])
    b = agents.add(extra=["--no-discovery", "--tag", "role=db"])
    agents.wait_all_see([a.name, b.name], "alive", [a, b])
    api = ["--api", f"{a.ip}:7947"]
    web = shoal_cli("members", "--tag", "role=w.b", *api).stdout
    assert a.name in web and b.name not in web
    both = shoal_cli("members", "--tag", "role=web|db", "--name", "agent-.*", *api).stdout
    assert a.name in both and b.name in both
    none = shoal_cli("members", "--tag", "rack=.*", *api)
    assert (none.returncode, none.stdout.strip()) == (0, "no members")
    bad = shoal_cli("members", "--name", "(", *api)
    assert bad.returncode == 2 and bad.stderr.startswith("shoal: --name:")


def test_info_shows_the_agent_its_controller_and_counters(agents: AgentCluster):
    (a,) = agents.start(1, extra=["--no-discovery"])
    agents.wait_all_see([a.name], "alive", [a])
    out = shoal_cli("info", "--api", f"{a.ip}:7947")
    assert out.returncode == 0, out.stderr
    assert f"name = {a.name}" in out.stdout and f"version = {__version__}" in out.stdout
    assert "controller:" in out.stdout and "counters:" in out.stdout


def test_join_that_reaches_no_one_says_so_and_exits_1(agents: AgentCluster):
    (a,) = agents.start(1, extra=["--no-discovery"])
    agents.wait_all_see([a.name], "alive", [a])
    done = shoal_cli("join", "127.0.0.99", "--api", f"{a.ip}:7947")
    assert done.returncode == 1
    assert "127.0.0.99:7946: no answer" in done.stdout
    assert "joined no one" in done.stderr and "Successfully" not in done.stdout


def test_simulate_shows_progress_on_stderr_and_keeps_stdout_the_report():
    done = subprocess.run(
        [sys.executable, "-m", "shoal.daemon.cli", "simulate", "--nodes", "200", "--duration",
         "40", "--seed", "1"],
        capture_output=True, text=True, timeout=120,
        env={**os.environ, "SHOAL_PROGRESS_EVERY_S": "0.2"},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "of 40 s simulated" in done.stderr
    assert done.stdout.startswith("simulated 200 nodes") and "simulate:" not in done.stdout


def test_tags_change_at_run_time_reach_the_others_and_survive_a_restart(agents: AgentCluster):
    a = agents.add(extra=["--no-discovery", "--tag", "role=web"])
    b = agents.add(extra=["--no-discovery"])
    agents.wait_all_see([a.name, b.name], "alive", [a, b])
    api = ["--api", f"{a.ip}:7947"]
    done = shoal_cli("tags", "--set", "rack=r7", "--delete", "role", *api)
    assert done.returncode == 0 and done.stdout.strip() == "Tags now: rack=r7", done.stderr
    poll_until(lambda: b.members()[a.name]["tags"] == {"rack": "r7"}, 10)
    before = b.members()[a.name]["incarnation"]
    a.kill()
    a.start()  # its command line still says --tag role=web: the set tags win
    poll_until(lambda: b.members().get(a.name, {}).get("incarnation", 0) > before
               and b.status_of(a.name) == "alive", 30)  # fmt: skip
    assert b.members()[a.name]["tags"] == {"rack": "r7"}
    assert a.api.get("/v1/self")["tags"] == {"rack": "r7"}
    bad = shoal_cli("tags", *api)
    assert bad.returncode == 2 and "--set" in bad.stderr


def _free_ports(count: int) -> list[int]:
    """Ports on 127.0.0.1 that nothing holds now, for UDP and TCP alike (a
    fixed port in the ephemeral range may be some client socket's of the
    moment: the agent would exit at once)."""
    ports: list[int] = []
    while len(ports) < count:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as tcp:
            tcp.bind(("127.0.0.1", 0))
            port = tcp.getsockname()[1]
            try:
                with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:
                    udp.bind(("127.0.0.1", port))
            except OSError:
                continue
        ports.append(port)
    return ports


def test_a_dev_agent_runs_as_a_non_root_user_and_leaves_nothing_behind():
    """`shoal agent --dev`: loopback, a fresh data directory it removes at
    exit, controller of its one-node cluster; as an unprivileged user."""
    gossip, api_port = _free_ports(2)
    api = f"127.0.0.1:{api_port}"
    python, env = [sys.executable], {}
    if os.geteuid() == 0:
        setpriv = shutil.which("setpriv")
        assert setpriv, "setpriv is missing: make test installs util-linux"
        python, env = python_for_nobody()  # wherever the checkout lies
        python = [setpriv, *NOBODY, *python]
    command = [*python, "-m", "shoal.daemon.cli", "agent", "--dev", "--node-name", "dev",
               "--bind", f"127.0.0.1:{gossip}", "--api", api]  # fmt: skip
    base = Path(tempfile.mkdtemp(prefix="shoal-devtest-"))  # a TMPDIR anyone may use
    os.chmod(base, 0o1777)
    log = base.parent / f"{base.name}.log"  # outside the directory it must leave empty
    with log.open("wb") as sink:
        environ = {**os.environ, **env, "TMPDIR": str(base)}
        proc = subprocess.Popen(command, stdout=sink, stderr=sink, env=environ, cwd="/")

    def controls() -> bool:
        assert proc.poll() is None, f"the agent exited: {log.read_text(errors='replace')}"
        return '"is_self": true' in shoal_cli("controller", "--json", "--api", api).stdout

    try:
        # 120 s: as `nobody` it may run from a copy without bytecode, which it
        # compiles at start, while the simulator's and Spark's tests run beside
        # (tests/split.py); it takes 2-3 s alone.
        try:
            poll_until(controls, 120)
        except AssertionError as e:
            said = log.read_text(errors="replace")
            raise AssertionError(f"{e}; the agent said: {said}") from None
        assert [p.name[:10] for p in base.iterdir()] == ["shoal-dev-"]
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
        out = log.read_text(errors="replace")
        log.unlink()
        leftovers = list(base.iterdir())
        shutil.rmtree(base, ignore_errors=True)
    assert proc.returncode == 0, out
    assert leftovers == [], leftovers
