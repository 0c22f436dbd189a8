"""One agent's wall clock wrong, or running at the wrong rate (libfaketime
preloaded into that agent alone), among real agents on loopback (issue 28)."""

from __future__ import annotations

import glob
import os
import time

import pytest

from tests.conftest import poll_until
from tests.integration.agents import AgentCluster, AgentProcess, shoal_cli

# libfaketime preloaded into the agent itself (not the `faketime` wrapper,
# which forks: killing it would leave the agent running).
LIBFAKETIME = next(iter(glob.glob("/usr/lib/*/faketime/libfaketime.so.1")), None)
pytestmark = pytest.mark.skipif(
    LIBFAKETIME is None and os.environ.get("CI") != "true",
    reason="needs libfaketime (apt-get install faketime; `make sysdeps` does it)",
)


def faked(spec: str, monotonic: bool) -> dict[str, str]:
    """The environment that gives one agent the clock `spec` (libfaketime's
    syntax); with `monotonic` False its monotonic clock stays true."""
    assert LIBFAKETIME is not None, "libfaketime is not installed (make sysdeps)"
    env = {"LD_PRELOAD": LIBFAKETIME, "FAKETIME": spec}
    if not monotonic:
        env["FAKETIME_DONT_FAKE_MONOTONIC"] = "1"
    return env


def offset_of(agent: AgentProcess) -> int | None:
    try:
        return agent.api.get("/v1/self")["clock_offset_ms"]
    except Exception:  # noqa: BLE001 (not up yet)
        return None


def kv(agent: AgentProcess, *args: str):
    return shoal_cli("kv", *args, "--api", f"{agent.ip}:7947")


@pytest.mark.parametrize("skew", ["+70s", "-70s"])
def test_an_agent_with_a_wrong_clock_names_it_refuses_writes_and_loses_none(agents: AgentCluster,
                                                                            skew: str):  # fmt: skip
    """The skewed agent measures its offset, warns once naming itself and the
    offset, and answers writes with 503 and the reason; a write through a
    right agent is acknowledged and reaches every agent, the skewed one too."""
    a = agents.add(extra=["--no-discovery"])
    b = agents.add(extra=["--no-discovery"])
    started = time.monotonic()
    skewed = agents.add(env=faked(skew, monotonic=False), extra=["--no-discovery"])
    members = [a, b, skewed]
    agents.wait_all_see([m.name for m in members], "alive", members)
    expected_ms = int(skew[:-1]) * 1000
    poll_until(lambda: (o := offset_of(skewed)) is not None and abs(o - expected_ms) < 500, 20)
    poll_until(lambda: "clock is off from its peers" in skewed.log(), 10)
    print(f"\n{skew}: warning {time.monotonic() - started:.1f} s after the skewed agent's launch")
    for right in (a, b):  # the right clocks see about no offset (the median over two peers)
        poll_until(lambda right=right: (o := offset_of(right)) is not None and abs(o) < 500, 10)
    assert skewed.name in next(ln for ln in skewed.log().splitlines() if "clock is off" in ln)
    refused = kv(skewed, "put", "k", "from-skewed")
    assert refused.returncode == 1 and "from its peers'" in refused.stderr
    done = kv(a, "put", "k", "W2")
    assert done.returncode == 0, done.stderr
    for agent in members:
        poll_until(lambda agent=agent: "W2" in kv(agent, "get", "k").stdout, 15)


def controllers(members: list[AgentProcess]) -> list[tuple[str, int]]:
    """(name, epoch) of every agent that says it is controller, right now."""
    out = []
    for agent in members:
        try:
            info = agent.api.get("/v1/controller")
        except Exception:  # noqa: BLE001 (a slow agent may time out)
            continue
        if info.get("is_self"):
            out.append((agent.name, info["epoch"]))
    return out


def test_a_controller_whose_clock_runs_slow_never_shares_an_epoch(agents: AgentCluster):
    """The controller's clock runs at 0.4x real time: it renews every 2.5 s
    while grants last 2 s. Others take over at higher epochs; at no moment
    do two agents claim the lease under one epoch, and the slow one steps
    down when it hears of its successor."""
    slow = agents.add(env=faked("+0 x0.4", monotonic=True),
                      extra=["--no-discovery", "--tag", "controller_priority=10"])  # fmt: skip
    others = [agents.add(extra=["--no-discovery"]) for _ in range(2)]
    members = [slow, *others]
    agents.wait_all_see([m.name for m in members], "alive", members, timeout_s=60)
    poll_until(lambda: (slow.name, 1) in controllers(members) or None, 60)
    claims: list[list[tuple[str, int]]] = []
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        claims.append(controllers(members))
    epochs = [e for sample in claims for _, e in sample]
    for sample in claims:
        assert len({e for _, e in sample}) == len(sample), f"two claimants share an epoch: {sample}"
    assert max(epochs) > 1  # the slow lease was lost to a successor
    assert '"superseded"' in slow.log() or "superseded" in slow.log()
