"""Real agents, real UDP and TCP on loopback: what an operator sees."""

import json
import os
import signal
import socket
import subprocess
import sys
import urllib.error
import urllib.request

import pytest

from shoal.kernel import codec
from shoal.membership.messages import Ack
from tests.conftest import poll_until
from tests.integration.agents import next_ip, shoal_cli


def names(agents) -> list[str]:
    return [a.name for a in agents]


def test_ten_agents_joined_through_one_seed_all_list_ten_alive(agents):
    """`shoal members` on any agent lists all ten, alive."""
    started = agents.start(10)
    agents.wait_all_see(names(started), "alive", started, timeout_s=30)
    out = shoal_cli("members", "--api", f"{started[5].ip}:7947")
    assert out.returncode == 0
    rows = out.stdout.strip().splitlines()
    assert rows[0].split()[:3] == ["Name", "Address", "Status"]
    assert len(rows) == 11 and all(" alive " in r for r in rows[1:])


def test_kill_9_is_seen_as_dead_by_all_others(agents):
    """A crashed machine is reported failed by every survivor."""
    started = agents.start(5)
    agents.wait_all_see(names(started), "alive", started)
    victim = started[3]
    victim.kill()
    survivors = [a for a in started if a is not victim]
    agents.wait_all_see([victim.name], "dead", survivors, timeout_s=30)
    out = shoal_cli("members", "--json", "--status", "dead", "--api", f"{survivors[0].ip}:7947")
    dead = json.loads(out.stdout)
    assert [m["name"] for m in dead] == [victim.name]
    assert set(dead[0]) >= {"name", "address", "status", "incarnation", "tags"}
    # The victim's host (this one) answered with port unreachable, and the
    # survivors' probes used it (docs/architecture.md).
    refused = sum(a.metric("shoal_swim_probes_refused_total") for a in survivors)
    assert refused >= 1


def test_shoal_leave_shows_as_left_and_join_brings_it_back(agents):
    """`shoal leave` marks the node left everywhere; `shoal join` undoes it, same process."""
    started = agents.start(4)
    agents.wait_all_see(names(started), "alive", started)
    leaver = started[2]
    assert shoal_cli("leave", "--api", f"{leaver.ip}:7947").returncode == 0
    others = [a for a in started if a is not leaver]
    agents.wait_all_see([leaver.name], "left", others, timeout_s=10)
    out = shoal_cli("join", started[0].gossip, "--api", f"{leaver.ip}:7947")
    assert out.returncode == 0, out.stderr
    assert "Joined the cluster through 1 of 1 address(es)." in out.stdout
    agents.wait_all_see([leaver.name], "alive", others, timeout_s=10)
    assert leaver.running()


def test_sigterm_leaves_gracefully_and_exits_0(agents):
    """Stopping the service is a leave, never a failure, and exits promptly."""
    started = agents.start(4)
    agents.wait_all_see(names(started), "alive", started)
    stopping = started[1]
    stopping.signal(signal.SIGTERM)
    assert stopping.wait_exit(10) == 0
    others = [a for a in started if a is not stopping]
    agents.wait_all_see([stopping.name], "left", others, timeout_s=5)
    for agent in others:
        events = [json.loads(line) for line in agent.log().splitlines() if line.startswith("{")]
        failed = [e for e in events if e.get("event") == "member-failed"]
        assert not [e for e in failed if e.get("name") == stopping.name]


def test_an_agent_alone_stops_without_waiting_out_the_leave_timeout(agents):
    """With no member to tell, `systemctl stop` does not hang for the 5 s
    leave timeout waiting for gossip that has nowhere to go."""
    (alone,) = agents.start(1)
    poll_until(lambda: shoal_cli("members", "--api", f"{alone.ip}:7947").returncode == 0, 15)
    alone.signal(signal.SIGTERM)
    assert alone.wait_exit(3) == 0  # under leave_timeout_s (5 s)


def test_a_restarted_agent_comes_back_alive_with_a_higher_incarnation(agents):
    """Restarting (even at a new address) is recognised as the same node."""
    started = agents.start(4)
    agents.wait_all_see(names(started), "alive", started)
    node = started[3]
    before = started[0].members()[node.name]["incarnation"]
    node.kill()
    node.start(new_address=True)
    others = started[:3]

    def back() -> bool:
        views = [a.members().get(node.name, {}) for a in others]
        return all(v.get("status") == "alive" and v.get("incarnation", 0) > before
                   and v.get("address") == node.gossip for v in views)  # fmt: skip

    poll_until(back, 10.0, interval_s=0.1)


def test_garbage_datagrams_change_nothing(agents):
    """Random bytes, other clusters' packets and truncated ones are counted and dropped."""
    started = agents.start(3)
    agents.wait_all_see(names(started), "alive", started)
    target = started[0]
    before = target.members()
    valid = codec.encode_datagram([Ack(1, 0)], codec.cluster_tag("shoal"))
    payloads = [os.urandom(n % 1400 + 1) for n in range(1500)]
    payloads += [bytes([1, 0]) + codec.cluster_tag("another") + b"\x80"] * 100
    payloads += [valid[:k] for k in range(len(valid))] * 20

    def dropped() -> int:
        counters = target.api.get("/v1/self")["counters"]
        return sum(v for k, v in counters.items() if k.startswith("dropped_"))

    # Sent in batches that the socket buffer holds, so every one is judged
    # by the agent rather than dropped by the kernel.
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sent = 0
    for start in range(0, len(payloads), 200):
        for data in payloads[start : start + 200]:
            sock.sendto(data, (target.ip, 7946))
        sent += len(payloads[start : start + 200])
        poll_until(lambda: dropped() >= sent - 5, 10)
    sock.close()
    counters = target.api.get("/v1/self")["counters"]
    assert counters.get("dropped_cluster", 0) >= 100
    after = target.members()
    assert {k: v["status"] for k, v in after.items()} == {k: v["status"] for k, v in before.items()}
    for agent in started[1:]:
        assert agent.status_of(target.name) == "alive"


def test_the_api_answers_bad_requests_with_json_errors(agents):
    """Bad API calls get a 4xx and a JSON body saying what is wrong."""
    (agent,) = agents.start(1)
    poll_until(agent.members, 10)
    base = f"http://{agent.ip}:7947"

    def call(method: str, path: str, body: bytes | None = None) -> tuple[int, dict]:
        req = urllib.request.Request(base + path, data=body, method=method)
        try:
            with urllib.request.urlopen(req, timeout=5) as resp:
                return resp.status, json.loads(resp.read())
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read())

    assert call("GET", "/v1/nope")[0] == 404
    status, body = call("POST", "/v1/join", b"{not json")
    assert status == 400 and "JSON" in body["error"]
    status, body = call("POST", "/v1/join", b'{"addrs": ["999.1.1.1:7946"]}')
    assert status == 400 and "addrs" in body["error"]
    status, body = call("GET", "/v1/members?status=zombie")
    assert status == 400 and "status" in body["error"]
    status, body = call("POST", "/v1/join", b"x" * 200_000)
    assert status == 413 and "error" in body
    assert call("GET", "/v1/self")[1]["name"] == agent.name


def test_event_stream_reports_joins_with_who_and_when(agents):
    """`shoal monitor` shows members joining as newline-delimited JSON."""
    (seed,) = agents.start(1)
    poll_until(seed.members, 10)
    monitor = subprocess.Popen(
        [sys.executable, "-m", "shoal.daemon.cli", "monitor", "--api", f"{seed.ip}:7947"],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        poll_until(lambda: len(seed.api.get("/v1/self")) and _watchers_ready(seed), 10)
        newcomer = agents.add("late-joiner")
        line = json.loads(monitor.stdout.readline())
        assert line["type"] == "member-joined" and line["name"] == newcomer.name
        assert line["observer"] == seed.name and line["at_ms"] > 0
    finally:
        monitor.kill()
        monitor.wait()
        assert monitor.stdout is not None
        monitor.stdout.close()


def _watchers_ready(agent) -> bool:
    # The monitor has connected once the agent counts an open events stream;
    # a join before that would be missed by the test, not by the monitor.
    return agent.api.get("/v1/self").get("watchers", 0) >= 1


def test_a_second_agent_with_a_taken_name_is_refused(agents):
    """Two machines configured with one name never merge; the log says why."""
    started = agents.start(2)
    agents.wait_all_see(names(started), "alive", started)
    original = started[1]
    impostor = agents.add(original.name)
    poll_until(lambda: "name-conflict" in started[0].log(), 10)
    conflict = next(json.loads(line) for line in started[0].log().splitlines()
                    if '"name-conflict"' in line)  # fmt: skip
    assert conflict["address"] == impostor.gossip
    member = started[0].members()[original.name]
    assert member["address"] == original.gossip and member["status"] == "alive"
    assert impostor.running()


def test_client_commands_fail_cleanly_without_an_agent():
    """`shoal members` with no agent running says so in one line, exit 1."""
    out = shoal_cli("members", "--api", "127.0.0.1:1")
    assert out.returncode == 1
    assert out.stderr.startswith("shoal: cannot reach the agent") and out.stderr.count("\n") == 1


@pytest.mark.parametrize("setting", ["bind", "api"])
def test_a_taken_port_is_a_one_line_error_naming_the_setting(setting, tmp_path):
    """Another program on the gossip or API port: the agent says which
    setting to change, in one line, and exits 2, before it joins."""
    ip = next_ip()
    port = 7946 if setting == "bind" else 7947
    holder = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        holder.bind((ip, port))
        holder.listen()
        out = shoal_cli(
            "agent",
            "--node-name",
            "taken",
            "--bind",
            f"{ip}:7946",
            "--api",
            f"{ip}:7947",
            "--data-dir",
            str(tmp_path),
            "--no-discovery",
        )
    finally:
        holder.close()
    assert out.returncode == 2
    error = f"shoal: {setting}: cannot listen on {ip}:{port}: Address already in use"
    assert out.stderr.splitlines()[-1] == error
    assert "agent started" not in out.stderr  # it failed before joining anybody


@pytest.mark.parametrize("bad", ["--status=zombie"])
def test_members_rejects_an_unknown_status(bad):
    """A typo in --status is a usage error (exit 2), not an empty list."""
    assert shoal_cli("members", bad, "--api", "127.0.0.1:1").returncode == 2


def test_fault_injection_drops_and_delays_yet_the_cluster_forms(agents, tmp_path):
    """The transport's own fault layer (no netem here) loses packets; SWIM copes."""
    config = tmp_path / "faults.toml"
    config.write_text("[faults]\ndrop = 0.2\nduplicate = 0.05\ndelay_s = 0.005\nseed = 3\n")
    started = agents.start(4, extra=["--config", str(config)])
    agents.wait_all_see(names(started), "alive", started, timeout_s=30)
    assert '"fault injection is on"' in started[0].log()
    poll_until(lambda: sum(a.api.get("/v1/self")["counters"]["fault_injected_drops"]
                           for a in started) > 0, 10)  # fmt: skip
