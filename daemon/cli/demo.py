"""`shoal demo`: a small cluster of real agents on loopback, telling a story.

It starts N agents on 127.0.0.11, .12, ... (loopback only, safe anywhere)
with no join address, shows the cluster forming by multicast discovery and
electing a controller, writes a key on one agent and reads it on another,
kills the controller with SIGKILL and shows the survivors declaring it
failed and electing a successor with a higher epoch, restarts it and shows
it rejoin with a higher incarnation, and finally stops everyone with SIGTERM
(a graceful leave). Each step prints how long it took.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec

from shoal.client import Client
from shoal.client import ShoalError as ClientError
from shoal.daemon.cli.format import format_members
from shoal.kernel.errors import ConfigError, ShoalError

FIRST_HOST = 11


class DemoAgent:
    """One agent of the demo."""

    def __init__(self, index: int, root: Path, cluster_size: int = 3, key: str = "") -> None:
        self.name = f"demo-{index}"
        self.key = key
        self.ip = f"127.0.0.{FIRST_HOST + index}"
        self.root = root
        self.cluster_size = cluster_size
        self.proc: subprocess.Popen[bytes] | None = None
        self.api = Client(f"{self.ip}:7947", token="", timeout=3.0)

    def start(self) -> None:
        # No --join: the agents find each other by multicast DNS-SD, on
        # their own loopback address only (nothing leaves the machine).
        log = open(self.root / f"{self.name}.log", "ab")
        args = [sys.executable, "-m", "shoal.daemon.cli", "agent", "--node-name", self.name,
                "--bind", f"{self.ip}:7946", "--api", f"{self.ip}:7947",
                "--cluster", "demo", "--data-dir", str(self.root / self.name),
                "--log-format", "json", "--bootstrap-expect", str(self.cluster_size)]  # fmt: skip
        if self.key:
            args += ["--encrypt", self.key]
        self.proc = subprocess.Popen(args, stdout=log, stderr=log, stdin=subprocess.DEVNULL)
        log.close()

    def members(self) -> list[dict[str, Any]]:
        try:
            members: list[dict[str, Any]] = msgspec.to_builtins(self.api.members())
            return members
        except ClientError:
            return []

    def check_running(self) -> None:
        if self.proc is not None and self.proc.poll() is not None:
            tail = (self.root / f"{self.name}.log").read_text(errors="replace").splitlines()[-1:]
            raise ShoalError(f"demo: agent {self.name} exited: {' '.join(tail)}")


def _wait(what: Callable[[], bool], agents: list[DemoAgent], timeout_s: float) -> float:
    started = time.monotonic()
    while not what():
        for agent in agents:
            agent.check_running()
        if time.monotonic() - started > timeout_s:
            raise ShoalError("demo: the cluster did not get there in time; logs are kept")
        time.sleep(0.05)  # demo pacing, not a test
    return time.monotonic() - started


def _all_see(agents: list[DemoAgent], name: str, statuses: set[str]) -> bool:
    for agent in agents:
        states = {m["name"]: m["status"] for m in agent.members()}
        if states.get(name) not in statuses:
            return False
    return True


def _one_controller(agents: list[DemoAgent]) -> tuple[str, int] | None:
    """The controller and epoch if every agent reports the same one."""
    seen = set()
    for agent in agents:
        try:
            info = agent.api.controller()
        except ClientError:
            return None
        seen.add((info.controller, info.epoch))
    if len(seen) == 1:
        ((name, epoch),) = seen
        if name is not None:
            return name, epoch or 0
    return None


def _new_controller(agents: list[DemoAgent], old_epoch: int) -> bool:
    found = _one_controller(agents)
    return found is not None and found[1] > old_epoch


def _read(agent: DemoAgent, key: str) -> bytes | None:
    try:
        return agent.api.kv.get(key).value
    except ClientError:
        return None


def _follow(agent: DemoAgent, t0: float, stop: threading.Event) -> None:
    """Print the first agent's view of events as they happen."""
    try:
        for event in agent.api.events():
            if stop.is_set():
                return
            if event["type"] in ("member-suspected", "member-failed", "member-joined",
                                 "member-left", "member-refuted"):  # fmt: skip
                verb = "declared" if event["type"] == "member-failed" else "raised"
                who = f" ({verb} by {event['source']})" if event.get("source") else ""
                print(f"  [{time.monotonic() - t0:6.2f} s] {agent.name} sees {event['name']}: "
                      f"{event['type'].removeprefix('member-')}{who}", flush=True)  # fmt: skip
    except ClientError:
        return


def run_demo(nodes: int, keep: bool = False) -> int:
    """Run the demo story; return the exit code."""
    if not 2 <= nodes <= 100:
        raise ConfigError("--nodes: expected 2 to 100")
    root = Path(tempfile.mkdtemp(prefix="shoal-demo-"))
    from shoal.daemon.keys import generate_key

    key = generate_key()  # a fresh cluster key: the demo's gossip is encrypted
    agents = [DemoAgent(i, root, nodes, key) for i in range(nodes)]
    names = [a.name for a in agents]
    stop = threading.Event()
    print(f"Starting {nodes} shoal agents on loopback {agents[0].ip}..{agents[-1].ip} "
          f"(UDP/TCP 7946, API 7947), gossip encrypted with a key made for this run "
          f"(AES-256-GCM); logs in {root} (removed when the demo ends, kept if a step "
          "fails)")  # fmt: skip
    try:
        t0 = time.monotonic()
        for agent in agents:
            agent.start()
        took = _wait(lambda: all(_all_see(agents, n, {"alive"}) for n in names), agents, 30)
        print(f"\n1. The cluster formed with no address configured (multicast DNS-SD): "
              f"every agent lists all {nodes} alive, {took:.2f} s after launch.\n")  # fmt: skip
        print(format_members(agents[0].members()))
        took = _wait(lambda: _one_controller(agents) is not None, agents, 30)
        controller, epoch = _one_controller(agents) or ("", 0)
        print(f"\n   Controller: {controller} (epoch {epoch}), agreed by all {nodes} agents.")
        agents[0].api.kv.put("demo/greeting", b"hello from demo-0")
        took = _wait(lambda: _read(agents[-1], "demo/greeting") is not None, agents, 15)
        print(f"   `shoal kv put demo/greeting` on {agents[0].name}: readable on "
              f"{agents[-1].name} {took * 1000:.0f} ms later.")  # fmt: skip
        watcher = threading.Thread(target=_follow, args=(agents[0], t0, stop), daemon=True)
        watcher.start()
        victim = next(a for a in agents if a.name == controller)
        survivors = [a for a in agents if a is not victim]
        print(f"\n2. Killing the controller {victim.name} with SIGKILL (no goodbye) ...")
        assert victim.proc is not None
        victim.proc.send_signal(signal.SIGKILL)
        victim.proc.wait()
        took = _wait(lambda: _new_controller(survivors, epoch), survivors, 30)
        new, new_epoch = _one_controller(survivors) or ("", 0)
        print(f"   {new} is controller with epoch {new_epoch}, {took:.2f} s after the kill.")
        took = _wait(lambda: _all_see(survivors, victim.name, {"dead"}), survivors, 60)
        print(f"   All {len(survivors)} survivors mark {victim.name} failed, "
              f"{took:.2f} s after the kill.\n")  # fmt: skip
        print(
            f"3. Restarting {victim.name}: same data directory, so same node id; "
            "it finds the others by itself ..."
        )
        victim.start()
        took = _wait(lambda: _all_see(agents, victim.name, {"alive"}), agents, 30)
        inc = next(m["incarnation"] for m in agents[0].members() if m["name"] == victim.name)
        print(f"   {victim.name} is alive again everywhere after {took:.2f} s, "
              f"at incarnation {inc}.\n")  # fmt: skip
        print(format_members(agents[0].members()))
        if keep:
            print(f"\nThe cluster keeps running; try: shoal members --api {agents[0].ip}:7947")
            print("Press Ctrl-C to stop it.")
            signal.sigwait({signal.SIGINT, signal.SIGTERM})
        stop.set()
        print("\n4. Stopping every agent with SIGTERM: each leaves gracefully ...")
        for agent in agents:
            if agent.proc is not None:
                agent.proc.send_signal(signal.SIGTERM)
        codes = [a.proc.wait(15) for a in agents if a.proc is not None]
        print(f"   All {len(codes)} agents exited with code {max(codes)}.")
        shutil.rmtree(root, ignore_errors=True)
        print(f"   Their logs in {root} are removed.")
        return 0
    finally:
        stop.set()
        for agent in agents:
            if agent.proc is not None and agent.proc.poll() is None:
                agent.proc.kill()
                agent.proc.wait()
