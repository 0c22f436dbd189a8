"""A rolling restart of real agents under load, checked step by step (issue
43): a writer on every agent, an application with a session, an ephemeral
and a fenced key, and the checks an operator's runbook promises after each
restart (one controller, the epoch, nobody reported failed, no version
refusals, the cluster's feature level). test_upgrade.py rolls a cluster from
one build to another and back with it.
"""

from __future__ import annotations

import http.client
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from shoal.client import Client, ShoalError
from shoal.kernel.errors import ApiError
from shoal.storage.history import read_history
from tests.conftest import poll_until
from tests.integration.agents import AgentProcess, Build, api_request, shoal_cli

# How long each wait of a step may take: a restart is a graceful leave (at
# most leave_timeout_s, 5 s), a start, and a join that every member hears of.
STEP_TIMEOUT_S = 30.0


def counters(agent: AgentProcess) -> dict[str, int]:
    try:
        return dict(agent.api.get("/v1/self")["counters"])
    except ApiError:
        return {}


# What an agent counts when it drops a sealed packet for its version, or
# refuses a peer for its versions (first contact, gossip, push-pull); an agent
# without one of these counters (an older build) has counted nothing there.
VERSION_REFUSALS = ("dropped_version", "contact_refused_version", "swim_ignored_incompatible",
                    "swim_refused_push_pulls")  # fmt: skip


def assert_no_version_refusals(agents: Iterable[AgentProcess]) -> None:
    """No agent dropped a packet or refused a peer for its version."""
    counted = {a.name: {k: v for k, v in counters(a).items() if k in VERSION_REFUSALS and v}
               for a in agents}  # fmt: skip
    assert not any(counted.values()), f"dropped or refused for versions: {counted}"


def controller_agreed(agents: list[AgentProcess]) -> tuple[str, int]:
    """Wait until every agent names one controller with one epoch, and that
    controller alone says it is controller; (name, epoch)."""
    seen: dict[str, tuple[str, int]] = {}

    def agreed() -> bool:
        answers = []
        for agent in agents:
            status, body = api_request(agent, "GET", "/v1/controller")
            if status != 200:
                return False
            answers.append(body)
        named = {(c["controller"], c["epoch"]) for c in answers}
        selves = [a.name for a, c in zip(agents, answers) if c["is_self"]]
        if len(named) != 1 or None in next(iter(named)) or selves != [next(iter(named))[0]]:
            return False
        seen["it"] = next(iter(named))
        return True

    poll_until(agreed, STEP_TIMEOUT_S, interval_s=0.1)
    return seen["it"]


def kv_value(agent: AgentProcess, key: str) -> str | None:
    try:
        status, body = api_request(agent, "GET", f"/v1/kv/{key}", timeout_s=5)
    except OSError:
        return None
    return body.get("value") if status == 200 else None


def everywhere(agents: list[AgentProcess], key: str, value: str) -> None:
    """Wait until every agent reads `value` under `key`."""
    for agent in agents:
        poll_until(lambda a=agent: kv_value(a, key) == value, STEP_TIMEOUT_S)


@dataclass
class Writes:
    """What a writer was told: a write is acknowledged (200), failed (the
    agent refused, or no connection was made: nothing was written), or
    unknown (sent, then no answer: it may or may not have been written)."""

    acked: dict[str, str] = field(default_factory=dict)
    unknown: dict[str, str] = field(default_factory=dict)
    failed: int = 0


class Writer(threading.Thread):
    """Writes keys round-robin through every agent's API until stopped."""

    def __init__(self, agents: list[AgentProcess], pace_s: float = 0.02) -> None:
        super().__init__(name="kv-writer", daemon=True)
        self.agents = agents
        self.pace_s = pace_s
        self.writes = Writes()
        self.stopped = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        n = 0
        try:
            while not self.stopped.is_set():
                agent = self.agents[n % len(self.agents)]
                key, value = f"load/{n:07d}", f"{n}@{agent.name}"
                outcome = self._put(agent, key, value)
                if outcome == "acked":
                    self.writes.acked[key] = value
                elif outcome == "unknown":
                    self.writes.unknown[key] = value
                else:
                    self.writes.failed += 1
                n += 1
                self.stopped.wait(self.pace_s)  # the load's pace, not a wait for a condition
        except BaseException as exc:  # noqa: BLE001 - reported by the test, not lost in a thread
            self.error = exc

    @staticmethod
    def _put(agent: AgentProcess, key: str, value: str) -> str:
        conn = http.client.HTTPConnection(agent.ip, 7947, timeout=3)
        try:
            conn.connect()
        except OSError:
            conn.close()
            return "failed"  # never reached the agent
        try:
            conn.request("PUT", f"/v1/kv/{key}", body=value.encode())
            status = conn.getresponse().status
        except (OSError, http.client.HTTPException):
            return "unknown"
        finally:
            conn.close()
        return "acked" if status == 200 else "failed"

    def stop(self) -> Writes:
        """Stop writing; what it was told."""
        self.stopped.set()
        self.join(10)
        assert self.error is None, f"the writer failed: {self.error!r}"
        return self.writes

    def __enter__(self) -> Writer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopped.set()  # also when the test failed: no writer outlives it
        self.join(10)


class Application:
    """A program beside one agent: it holds a session with a key under it,
    registers an ephemeral key, and writes for the controller under its epoch
    (docs/client.md). When its agent restarts, the session ends: it opens a
    new one and writes its keys again, as a real program must."""

    def __init__(self, agent: AgentProcess) -> None:
        self.agent = agent
        self.client = Client(f"{agent.ip}:7947", timeout=5)
        self.generation = 0
        self.losses = 0
        self.register()

    def register(self) -> None:
        self.generation += 1
        self.session = self.client.session(ttl=4, name="app")
        self.session.put("app/session", self.value)
        self.client.kv.put("app/ephemeral", self.value, ephemeral=True)

    @property
    def value(self) -> str:
        return f"generation {self.generation}"

    def after_step(self, restarted: AgentProcess) -> None:
        """Register again if the restart was of this program's agent (its
        session must then be lost); otherwise the session must hold."""
        if restarted is self.agent:
            assert self.session.wait_lost(timeout=STEP_TIMEOUT_S), "its agent restarted"
            self.losses += 1
            self.register()
        assert not self.session.lost, f"session lost: {self.session.reason}"

    def write_fenced(self, epoch: int) -> None:
        self.client.kv.put("app/assignment", f"epoch {epoch}", fence=epoch)

    def close(self) -> None:
        self.session.close()

    def __enter__(self) -> Application:
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self.close()
        except ShoalError:  # its agent is down (a failed test): the session ends by TTL
            pass


def history_rows(agents: list[AgentProcess], event: str) -> list[dict[str, Any]]:
    rows = []
    for agent in agents:
        rows += [r for r in read_history(agent.data_dir / "history") if r["event"] == event]
    return rows


@dataclass
class Step:
    """One restart of a roll, as the figures show it."""

    agent: str
    build: str
    stop_s: float  # SIGTERM to exit: the graceful leave
    back_s: float  # start to alive at its new incarnation on every agent
    controller: str
    epoch: int
    suspected: int  # member-suspected rows in all histories so far
    level: int | None  # the cluster's feature level every agent runs at after it
    level_s: float  # from back to that level on every agent


def seen_by_all(agents: list[AgentProcess], restarted: AgentProcess) -> bool:
    """Every agent lists every agent alive, and the restarted one at the
    incarnation it has now (not its previous run's)."""
    try:
        incarnation = restarted.api.get("/v1/self")["incarnation"]
    except (ApiError, KeyError):
        return False
    for agent in agents:
        seen = agent.members()
        if any(seen.get(a.name, {}).get("status") != "alive" for a in agents):
            return False
        if seen[restarted.name].get("incarnation") != incarnation:
            return False
    return True


def drops_by_reason(agents: Iterable[AgentProcess]) -> Counter[str]:
    """Every `dropped_*` counter, summed over `agents`."""
    total: Counter[str] = Counter()
    for agent in agents:
        total.update({k: v for k, v in counters(agent).items() if k.startswith("dropped_")})
    return total


@dataclass
class Roll:
    """Restarts agents one at a time and checks each step (the test's
    docstring); what it saw stays for the figures."""

    agents: list[AgentProcess]
    app: Application
    on_step: Callable[[AgentProcess], None]
    restarted: set[str] = field(default_factory=set)  # by any roll so far
    drops: Counter[str] = field(default_factory=Counter)  # of processes that ended

    def to(self, build: Build, level: int | None, cap: int | None = None) -> list[Step]:
        """Restart every agent on `build`, the controller last. The cluster's
        feature level must stay `level` while the roll goes on, and be what
        `build` supports (at most `cap`) after its last step; None: a build
        from before feature levels, nothing to check."""
        steps: list[Step] = []
        left = list(self.agents)
        while left:
            controller, _ = controller_agreed(self.agents)
            agent = next((a for a in left if a.name != controller), left[0])
            left.remove(agent)
            steps.append(self.restart(agent, build, level if left else cap, last=not left))
        return steps

    def restart(self, agent: AgentProcess, build: Build, level: int | None,
                last: bool = False) -> Step:  # fmt: skip
        agents = self.agents
        controller, epoch = controller_agreed(agents)
        elected_before = {r["epoch"] for r in history_rows(agents, "controller-elected")}
        assert_no_version_refusals(agents)
        self.drops += drops_by_reason([agent])  # its counters end with its process
        self.restarted.add(agent.name)
        # It joins the others when it comes back (the first agent joined none).
        agent.join = [a.gossip for a in agents if a is not agent]
        started = time.monotonic()
        assert agent.stop() == 0, "a graceful stop exits 0"
        stopped = time.monotonic()
        agent.build = build
        agent.start()
        poll_until(lambda: seen_by_all(agents, agent), STEP_TIMEOUT_S, interval_s=0.1)
        back = time.monotonic()
        new_controller, new_epoch = controller_agreed(agents)
        if last:  # every agent runs `build` now: the level it supports, at most a cap
            supported = supported_level(agent)
            level = supported if level is None or supported is None else min(level, supported)
        if level is not None and None not in feature_levels(agents):
            poll_until(lambda: feature_levels(agents) == {level}, STEP_TIMEOUT_S, 0.1)
        level_s = time.monotonic() - back
        self.app.after_step(agent)
        self.on_step(agent)

        def elected() -> set[int]:
            return {r["epoch"] for r in history_rows(agents, "controller-elected")}

        if agent.name == controller:
            assert new_controller != controller and new_epoch == epoch + 1, (epoch, new_epoch)
            poll_until(lambda: new_epoch in elected(), STEP_TIMEOUT_S)  # the log's writer thread
            assert elected() - elected_before == {new_epoch}, "the epoch rose once"
        else:
            assert (new_controller, new_epoch) == (controller, epoch), "a follower's restart"
            assert elected() == elected_before, "no election for a follower's restart"
        failed = {r["node"] for r in history_rows(agents, "member-failed")}
        assert failed <= self.restarted, f"reported failed: {failed - self.restarted}"
        assert_no_version_refusals(agents)
        suspected = len(history_rows(agents, "member-suspected"))
        return Step(agent.name, build.name, stopped - started, back - stopped, new_controller,
                    new_epoch, suspected, level, level_s)  # fmt: skip


def supported_level(agent: AgentProcess) -> int | None:
    """The highest feature level `agent`'s build supports (None: a build
    from before feature levels)."""
    versions = agent.api.get("/v1/self").get("versions") or {}
    level = versions.get("features")
    return level if isinstance(level, int) else None


def feature_levels(agents: list[AgentProcess]) -> set[int | None]:
    return {a.api.get("/v1/self").get("feature_level") for a in agents}


def new_messages_everywhere(agents: list[AgentProcess]) -> float | None:
    """Wait until every agent has received the stand-in's new message type
    (`node_level_probes_received`), sent once the cluster's level allows it;
    how long that took (None: builds without the stand-in)."""
    if not all("node_level_probes_received" in counters(a) for a in agents):
        return None
    started = time.monotonic()
    poll_until(lambda: all(counters(a)["node_level_probes_received"] > 0 for a in agents),
               STEP_TIMEOUT_S, interval_s=0.2)  # fmt: skip
    return time.monotonic() - started


def lower_feature_level(agents: list[AgentProcess], level: int | None) -> None:
    """The runbook's step before a downgrade (docs/operations.md, "Rolling
    back"): `shoal features --cap LEVEL` on one agent, then wait until every
    agent runs at that level. A release from before feature levels (None)
    has nothing to lower."""
    if level is None:
        return
    done = shoal_cli("features", "--cap", str(level), "--api", f"{agents[0].ip}:7947")
    assert done.returncode == 0, done.stdout + done.stderr
    poll_until(lambda: feature_levels(agents) == {level}, STEP_TIMEOUT_S, interval_s=0.1)


def lift_feature_cap(agents: list[AgentProcess], level: int | None) -> None:
    """After the rollback: `shoal features --uncap`; the level stays the old
    release's, the highest every member supports."""
    if level is None:
        return
    done = shoal_cli("features", "--uncap", "--api", f"{agents[0].ip}:7947")
    assert done.returncode == 0, done.stdout + done.stderr
    assert feature_levels(agents) == {level}


def all_acknowledged_everywhere(agents: list[AgentProcess], writes: Writes) -> dict[str, int]:
    """Wait until every agent holds every acknowledged write; how many of the
    unknown writes each agent holds."""
    found: dict[str, int] = {}
    for agent in agents:

        def holds(a: AgentProcess = agent) -> bool:
            items = {kv.key: kv.text for kv in Client(f"{a.ip}:7947", timeout=10).kv.list("load/")}
            missing = [k for k, v in writes.acked.items() if items.get(k) != v]
            found[a.name] = sum(items.get(k) == v for k, v in writes.unknown.items())
            return not missing

        poll_until(holds, STEP_TIMEOUT_S, interval_s=0.5)
    return found
