"""Agents that run the metadata log, for the tests of it on real agents
(test_meta*.py): started and waited on until a write through each commits,
reached by the client or by raw HTTP, and their controller killed (-9) and
restarted while clients run."""

from __future__ import annotations

import http.client
import subprocess
import sys
from collections.abc import Callable
from typing import Any

from shoal.client import Client
from tests.conftest import poll_until
from tests.integration.agents import AgentCluster, AgentProcess, api_request
from tests.integration.metaclients import http_exchange

META = ["--meta", "--no-discovery"]


def shoal_cli(*args: str, stdin: bytes = b"") -> subprocess.CompletedProcess[bytes]:
    """`shoal ARGS...` run as a user runs it: its exit status and output."""
    return subprocess.run([sys.executable, "-m", "shoal.daemon.cli", *args], input=stdin,
                          capture_output=True, timeout=60)  # fmt: skip


def client_of(agent: AgentProcess, timeout: float = 10.0) -> Client:
    return Client(f"{agent.ip}:7947", timeout=timeout)


def request(agent: AgentProcess, method: str, path: str, body: bytes | None = None,
            timeout_s: float = 6.0) -> tuple[int, Any]:  # fmt: skip
    """One raw call to `agent`'s API (metaclients' `Request`): OSError when
    no whole answer came."""
    conn = http.client.HTTPConnection(agent.ip, 7947, timeout=timeout_s)
    return http_exchange(conn, method, path, body)


def controller_name(agent: AgentProcess) -> str | None:
    """The controller `agent` names (None: none, or no answer)."""
    try:
        name: str | None = agent.api.get("/v1/controller")["controller"]
    except Exception:
        return None
    return name


def voter_roles(agent: AgentProcess) -> dict[str, str]:
    """Each member's `voter` field as `agent` shows it ({} while it does not answer)."""
    try:
        return {m["name"]: m.get("voter", "") for m in agent.api.get("/v1/members")["members"]}
    except Exception:
        return {}


def writable(agent: AgentProcess, key: str = "probe") -> bool:
    """A write through `agent` commits (the log leads: controller elected,
    feature level announced, the no-op committed); False while the agent
    does not answer."""
    try:
        status, _ = api_request(agent, "PUT", f"/v1/meta/{key}", b"x")
    except OSError:  # not listening yet
        return False
    return status == 200


def three(agents: AgentCluster, extra: list[str] | None = None) -> list[AgentProcess]:
    """Three agents of the metadata log that find each other by their
    addresses (no mDNS), each one writable."""
    started = list(agents.start(3, extra=META + (extra or [])))
    agents.wait_all_see([a.name for a in started], "alive", started)
    poll_until(lambda: all(writable(a) for a in started), 30, interval_s=0.2)
    return started


def meta_cluster(agents: AgentCluster, n: int = 3) -> list[AgentProcess]:
    """`n` agents that each join all the others (so any of them restarted
    finds the rest), writable through the last."""
    members = list(agents.start(n, extra=META))
    for m in members:
        m.join = [o.gossip for o in members if o is not m]
    agents.wait_all_see([a.name for a in members], "alive", members)
    poll_until(lambda: writable(members[-1], "ready"), 60, interval_s=0.2)
    return members


def crash_the_controller(members: list[AgentProcess], done: Callable[[], int], ops: int) -> None:
    """While clients run: once `done()` passes `ops` operations, kill -9 the
    controller, wait until a survivor names another, start it again, and
    wait for `ops` more operations."""
    poll_until(lambda: done() > ops, 60)
    name = controller_name(members[0])
    victim = next(a for a in members if a.name == name)
    victim.kill()
    survivors = [a for a in members if a is not victim]
    poll_until(lambda: controller_name(survivors[0]) not in (None, name), 30)
    victim.start()
    before = done()
    poll_until(lambda: done() > before + ops, 60)
