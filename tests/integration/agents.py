"""Real agent processes on loopback addresses, for integration tests."""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import sys
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from shoal.daemon.api.client import ApiClient
from shoal.kernel.errors import ApiError
from tests.conftest import poll_until

# Each agent gets its own 127.88.x.y address, so the same ports work for all
# and tests never collide with a demo on 127.0.0.x.
_ADDRESSES = itertools.count(os.getpid() % 200 * 250)


_SERIALS = itertools.count()


def shoal_cli(*args: str) -> subprocess.CompletedProcess[str]:
    """Run the `shoal` command line as a user would, text in and out."""
    return subprocess.run([sys.executable, "-m", "shoal.daemon.cli", *args], capture_output=True,
                          text=True, timeout=60)  # fmt: skip


def next_ip() -> str:
    n = next(_ADDRESSES)
    return f"127.88.{(n // 250) % 250}.{n % 250 + 1}"


# The test-only setting that makes this tree stand in for the next release
# (issue 43): it announces a higher version and one new message type.
NEXT_RELEASE_ENV = "SHOAL_TEST_NEXT_RELEASE"


@dataclass(frozen=True)
class Build:
    """What an agent runs: an interpreter whose venv holds one shoal, the
    directory it starts in, and the environment it adds or removes.

    `fallback` says why a stand-in runs where a real release was wanted
    (tests/integration/releases.py).
    """

    name: str = "working tree"
    python: str = sys.executable
    cwd: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    unset: tuple[str, ...] = ()
    fallback: str | None = None

    @classmethod
    def current(cls, name: str = "working tree", fallback: str | None = None) -> Build:
        """This tree, as the tests run it."""
        return cls(name=name, fallback=fallback, unset=(NEXT_RELEASE_ENV,))

    @classmethod
    def next_release(cls) -> Build:
        """This tree told to stand in for the next release."""
        return cls(name=f"working tree + {NEXT_RELEASE_ENV}=1", env={NEXT_RELEASE_ENV: "1"})

    def environ(self, extra: dict[str, str]) -> dict[str, str] | None:
        """The environment of an agent of this build (None: this process's)."""
        if not (self.env or self.unset or extra):
            return None
        kept = {k: v for k, v in os.environ.items() if k not in self.unset}
        return {**kept, **self.env, **extra}


class AgentProcess:
    """One `shoal agent` in its own process."""

    def __init__(self, name: str, root: Path, join: list[str], extra: list[str],
                 build: Build | None = None) -> None:  # fmt: skip
        self.name = name
        self.ip = next_ip()
        serial = next(_SERIALS)
        self.data_dir = root / f"{name}-{serial}"
        self.log_path = root / f"{name}-{serial}.log"
        self.join = join
        self.extra = extra
        self.prefix: list[str] = []  # e.g. faketime's, before the interpreter
        self.env: dict[str, str] = {}
        self.build = build or Build()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def gossip(self) -> str:
        return f"{self.ip}:7946"

    @property
    def api(self) -> ApiClient:
        return ApiClient((self.ip, 7947), timeout_s=5.0)

    def start(self, new_address: bool = False) -> AgentProcess:
        if new_address:
            self.ip = next_ip()
        args = [*self.prefix, self.build.python, "-m", "shoal.daemon.cli", "agent",
                "--node-name", self.name,
                "--bind", self.gossip, "--api", f"{self.ip}:7947",
                "--data-dir", str(self.data_dir), "--log-format", "json", *self.extra]  # fmt: skip
        for j in self.join:
            args += ["--join", j]
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(args, stdout=log, stderr=log, stdin=subprocess.DEVNULL,
                                     env=self.build.environ(self.env),
                                     cwd=self.build.cwd)  # fmt: skip
        log.close()
        return self

    def stop(self, timeout_s: float = 20.0) -> int:
        """SIGTERM (the graceful leave), then its exit status."""
        self.signal(signal.SIGTERM)
        return self.wait_exit(timeout_s)

    def restart_on(self, build: Build, timeout_s: float = 20.0) -> int:
        """Stop gracefully and start again on `build`, with the same data
        directory, address and flags (an upgrade or a downgrade in place);
        the exit status of the stop."""
        code = self.stop(timeout_s)
        self.build = build
        self.start()
        return code

    def members(self) -> dict[str, dict[str, Any]]:
        try:
            return {m["name"]: m for m in self.api.get("/v1/members")["members"]}
        except ApiError:
            return {}

    def status_of(self, name: str) -> str | None:
        m = self.members().get(name)
        return None if m is None else m["status"]

    def signal(self, sig: int) -> None:
        assert self.proc is not None
        self.proc.send_signal(sig)

    def kill(self) -> None:
        self.signal(signal.SIGKILL)
        assert self.proc is not None
        self.proc.wait(10)

    def wait_exit(self, timeout_s: float) -> int:
        assert self.proc is not None
        return self.proc.wait(timeout_s)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def metric(self, name: str) -> float:
        """One sample of `GET /metrics`, by its full name."""
        with urllib.request.urlopen(f"http://{self.ip}:7947/metrics", timeout=5) as r:
            for line in r.read().decode().splitlines():
                if line.startswith(name + " "):
                    return float(line.split()[-1])
        raise AssertionError(f"{name} missing from {self.name}'s /metrics")

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


class AgentCluster:
    """A set of agents; the first is the seed the others join."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.agents: list[AgentProcess] = []

    def add(self, name: str | None = None, join: list[str] | None = None,
            extra: list[str] | None = None, prefix: list[str] | None = None,
            env: dict[str, str] | None = None,
            build: Build | None = None) -> AgentProcess:  # fmt: skip
        name = name or f"agent-{len(self.agents)}"
        if join is None:
            join = [self.agents[0].gossip] if self.agents else []
        agent = AgentProcess(name, self.root, join, extra or [], build)
        agent.prefix = prefix or []
        agent.env = env or {}
        self.agents.append(agent)
        return agent.start()

    def start(self, n: int, extra: list[str] | None = None) -> list[AgentProcess]:
        for _ in range(n):
            self.add(extra=extra)
        return self.agents

    def wait_all_see(self, names: list[str], status: str, among: list[AgentProcess],
                     timeout_s: float = 30.0) -> None:  # fmt: skip
        def done() -> bool:
            for agent in among:
                seen = agent.members()
                if any(seen.get(n, {}).get("status") != status for n in names):
                    return False
            return True

        poll_until(done, timeout_s, interval_s=0.1)

    def stop(self) -> None:
        for agent in self.agents:
            if agent.running():
                agent.signal(signal.SIGKILL)
                assert agent.proc is not None
                agent.proc.wait(10)


def api_request(agent: AgentProcess, method: str, path: str,
                body: bytes | dict[str, Any] | list[Any] | None = None,
                timeout_s: float = 10.0) -> tuple[int, Any]:  # fmt: skip
    """One raw HTTP call to `agent`'s API: (status, JSON answer). A dict or
    list body is sent as JSON, bytes as they are."""
    import http.client
    import json

    conn = http.client.HTTPConnection(agent.ip, 7947, timeout=timeout_s)
    data = body if isinstance(body, bytes) or body is None else json.dumps(body).encode()
    try:
        conn.request(method, path, body=data)
        resp = conn.getresponse()
        return resp.status, json.loads(resp.read())
    finally:
        conn.close()
