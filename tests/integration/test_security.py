"""Encryption, key rotation and the API token, with real agents on loopback."""

from __future__ import annotations

import os
import socket
import stat
import time

from shoal.daemon.keys import generate_key
from shoal.daemon.network.wire import Wire
from shoal.kernel.errors import ApiError
from shoal.kernel.sealing import Keyring, parse_key
from shoal.membership.member import NodeIdentity
from shoal.membership.messages import Alive, Leave
from shoal.storage.history import read_history
from shoal.storage.messages import RecordPush
from shoal.storage.records import Record
from tests.conftest import poll_until
from tests.integration.agents import AgentCluster, AgentProcess, shoal_cli

KEY = generate_key()


def counters(agent: AgentProcess) -> dict[str, int]:
    try:
        return agent.api.get("/v1/self")["counters"]
    except ApiError:
        return {}


def history_events(agent: AgentProcess, kinds: set[str]) -> list[dict]:
    rows = read_history(agent.data_dir / "history")
    return [r for r in rows if r["event"] in kinds and r["node"] != r["observer"]]


def encrypted_cluster(agents: AgentCluster, n: int, key: str = KEY) -> list[AgentProcess]:
    members = list(agents.start(n, extra=["--encrypt", key, "--no-discovery"]))
    agents.wait_all_see([a.name for a in members], "alive", members)
    return members


def test_agents_without_the_key_cannot_join_be_listed_vote_or_write(agents):
    """Neither a keyless agent nor one with another key gets into the view, and
    forged plaintext or wrong-key packets change nothing on the members."""
    members = encrypted_cluster(agents, 3)
    seed = members[0]
    keyless = agents.add("keyless", join=[seed.gossip], extra=["--no-discovery"])
    wrong = agents.add("wrongkey", join=[seed.gossip],
                       extra=["--encrypt", generate_key(), "--no-discovery"])  # fmt: skip
    poll_until(lambda: counters(seed).get("dropped_plaintext", 0) > 0
               and counters(seed).get("dropped_auth", 0) > 0, 30)  # fmt: skip
    poll_until(lambda: "join failed" in keyless.log() and "join failed" in wrong.log(), 30)

    # What an attacker on the LAN without the key could forge: a member
    # announcement, a write, a controller vote request, a leave of a member.
    mallory = NodeIdentity("mallory", b"m" * 16, ("127.0.0.1", 9))
    forged = [Alive(1, mallory), RecordPush((Record(b"owned", b"yes", 1 << 40, b"m" * 16),)),
              Leave(99, members[1].name)]  # fmt: skip
    from shoal.election.messages import LeaseRequest

    forged_vote = LeaseRequest(1, 1 << 30, "mallory", None)
    other_ring = Keyring([parse_key(generate_key())], "shoal")
    other_key = Wire("shoal", node_id=bytes(16), run=1, keyring=other_ring)
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    for wire in (Wire("shoal", node_id=bytes(16), run=1, keyring=None), other_key):
        for msg in [*forged, forged_vote]:
            sock.sendto(wire.datagram([msg]), (seed.ip, 7946))
    sock.close()
    assert shoal_cli("kv", "put", "outsider", "1", "--api", f"{wrong.ip}:7947").returncode == 0
    poll_until(lambda: counters(seed).get("dropped_plaintext", 0) >= 4
               and counters(seed).get("dropped_auth", 0) >= 4, 10)  # fmt: skip

    for agent in members:
        assert set(agent.members()) == {m.name for m in members}
        assert agent.status_of(members[1].name) == "alive"
        for key in ("owned", "outsider"):
            assert shoal_cli("kv", "get", key, "--api", f"{agent.ip}:7947").returncode == 1
        voters = agent.api.get("/v1/controller").get("voters") or []
        assert not {"mallory", "keyless", "wrongkey"} & set(voters)
    assert set(keyless.members()) == {"keyless"} and set(wrong.members()) == {"wrongkey"}
    assert "if that cluster encrypts, this agent needs its key" in keyless.log()


def test_key_rotation_across_five_agents_marks_no_member_failed(agents):
    """install, use, remove through one agent: every step 5/5 acknowledged,
    nobody suspected, and a restarted agent comes back on the new key."""
    members = encrypted_cluster(agents, 5)
    new = generate_key()
    api = ["--api", f"{members[2].ip}:7947"]
    for step in (["install", new], ["use", new], ["remove", KEY]):
        done = shoal_cli("keys", *step, *api)
        assert done.returncode == 0, done.stdout + done.stderr
        assert "5/5 members acknowledged" in done.stdout
    listing = shoal_cli("keys", "list", *api)
    assert f"{new}  [5/5]" in listing.stdout and KEY not in listing.stdout
    for agent in members:
        ring = agent.data_dir / "keyring"
        assert stat.S_IMODE(ring.stat().st_mode) == 0o600
        assert new in ring.read_text() and KEY not in ring.read_text()
    refused = shoal_cli("keys", "remove", new, *api)
    assert refused.returncode == 1 and "primary" in refused.stderr
    for agent in members:
        assert history_events(agent, {"member-suspected", "member-failed"}) == []

    members[4].kill()
    members[4].extra = ["--no-discovery"]  # no key on the command line: the keyring file
    members[4].start()
    agents.wait_all_see([m.name for m in members], "alive", members, timeout_s=30)
    assert all(m.status_of(members[4].name) == "alive" for m in members)


def test_the_api_token_guards_changes_and_the_unix_socket_is_private(agents, tmp_path):
    """Without the token: reads work, writes get 401 with a JSON error; the
    CLI with --token-file works, over TCP and over the unix socket."""
    token = tmp_path / "token"
    token.write_text("a-long-enough-api-token-for-tests\n")
    os.chmod(token, 0o600)
    sock_path = tmp_path / "api.sock"
    agent = agents.add("guarded", join=[], extra=["--no-discovery", "--bootstrap-expect", "1",
                       "--api-token-file", str(token), "--api-socket", str(sock_path)])  # fmt: skip
    poll_until(lambda: agent.members() != {}, 20)
    api = ["--api", f"{agent.ip}:7947"]
    assert shoal_cli("members", *api).returncode == 0
    denied = shoal_cli("kv", "put", "k", "v", *api)
    assert denied.returncode == 1 and "needs the API token" in denied.stderr
    assert shoal_cli("keys", "list", *api).returncode == 1
    ok = shoal_cli("kv", "put", "k", "v", *api, "--token-file", str(token))
    assert ok.returncode == 0, ok.stderr
    assert stat.S_IMODE(sock_path.stat().st_mode) == 0o660
    via_socket = shoal_cli("kv", "get", "k", "--api", f"unix:{sock_path}")
    assert via_socket.returncode == 0 and via_socket.stdout.strip() == "v"
    assert shoal_cli("leave", "--api", f"unix:{sock_path}").returncode == 1
    raw = socket.create_connection((agent.ip, 7947))
    raw.sendall(b"POST /v1/leave HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n")
    deadline = time.monotonic() + 5
    answer = b""
    while b"}" not in answer and time.monotonic() < deadline:
        answer += raw.recv(4096)
    raw.close()
    assert answer.startswith(b"HTTP/1.1 401") and b'"error"' in answer
