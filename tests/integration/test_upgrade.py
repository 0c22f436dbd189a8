"""Two adjacent releases in one cluster, and a rolling upgrade under load
(issue 43), with real agents on loopback, encrypted.

The old build is the previous release (RELEASES, built from git by
releases.py); the new build is this tree told by SHOAL_TEST_NEXT_RELEASE=1
to stand in for the next release (a higher version, one new message type).
When there is no previous release to build, this tree without the setting
stands in for it, and the run's summary says so.
"""

from __future__ import annotations

import http.client
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from shoal.client import Client
from shoal.daemon.keys import generate_key
from shoal.kernel.errors import ApiError
from shoal.storage.history import read_history
from tests.conftest import poll_until
from tests.integration import releases
from tests.integration.agents import AgentCluster, AgentProcess, Build, api_request, shoal_cli
from tests.integration.test_watch import RawWatch, kv_events

KEY = generate_key()
FLAGS = ["--encrypt", KEY, "--no-discovery"]
NEW = Build.next_release()
# How long each wait of a step may take: a restart is a graceful leave (at
# most leave_timeout_s, 5 s), a start, and a join that every member hears of.
STEP_TIMEOUT_S = 30.0


@pytest.fixture(scope="module")
def old() -> Build:
    return releases.previous_build()


def report(line: str) -> None:
    """A line for the run's summary (conftest.py) and for `-s`."""
    print(line)
    releases.NOTICES.append(line)


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


def event_handler(out: Path) -> list[str]:
    """Each agent's handler of the user event `upgrade` logs the id it ran for."""
    command = f'echo "$SHOAL_EVENT_ID" >> {out}/"$SHOAL_SELF_NAME.log"'
    return ["--event-handler", f"user:upgrade={command}"]


def handled(out: Path, agent: AgentProcess) -> list[str]:
    path = out / f"{agent.name}.log"
    return path.read_text().splitlines() if path.exists() else []


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


def test_the_releases_file_names_the_newest_release_that_is_not_this_commit() -> None:
    """RELEASES parses (comments, blank lines), the release before HEAD is the
    newest other line, and a malformed line is an error naming its number."""
    a, b, c = "a" * 40, "b" * 40, "c" * 40
    text = f"# header\n\nv0.1.0 {a}  # provisional\nv0.3.0 {c}\nv0.2.0 {b}\n"
    listed = releases.parse_releases(text)
    assert [r.name for r in listed] == ["v0.1.0", "v0.3.0", "v0.2.0"]
    assert releases.previous_release(listed, head=c).name == "v0.2.0"
    assert releases.previous_release(listed, head="d" * 40).name == "v0.3.0"
    assert releases.previous_release(listed[:1], head=a) is None
    twice = f"{text}v0.2.0 {a}"
    for bad in (f"0.1.0 {a}", f"v0.1 {a}", "v0.1.0 c1e93aa", f"v0.1.0 {a} extra", twice):
        with pytest.raises(ValueError, match="RELEASES line"):
            releases.parse_releases(bad)
    assert releases.parse_releases((releases.REPO / "RELEASES").read_text())


def test_five_agents_of_two_releases_agree_on_members_controller_keys_watches_and_events(
    agents: AgentCluster, tmp_path: Path, old: Build
) -> None:
    """Three old and two new agents, encrypted, in one cluster: all see all
    alive, one controller under one epoch, a key written on either release is
    read on the other, a watch on one release sees writes made on the other,
    and a user event fired on either reaches the handlers of all five."""
    out = tmp_path / "events"
    out.mkdir()
    builds = [old, NEW, old, NEW, old]
    started = [agents.add(f"mixed-{i}", extra=[*FLAGS, *event_handler(out)], build=b)
               for i, b in enumerate(builds)]  # fmt: skip
    names = [a.name for a in started]
    agents.wait_all_see(names, "alive", started, timeout_s=STEP_TIMEOUT_S)
    controller, epoch = controller_agreed(started)
    report(f"mixed: {old.name} x3 + {NEW.name} x2: controller {controller} "
           f"({builds[names.index(controller)].name}), epoch {epoch}")  # fmt: skip
    first_old, first_new = started[0], started[1]

    for writer, reader, value in ((first_old, first_new, "from-old"),
                                  (first_new, first_old, "from-new")):  # fmt: skip
        watch = RawWatch(reader, "topics=kv&prefix=mixed/")
        assert watch.next()["type"] == "hello"
        status, _ = api_request(writer, "PUT", f"/v1/kv/mixed/{value}", value.encode())
        assert status == 200
        (seen,) = kv_events(watch, 1)
        watch.close()
        assert (seen["key"], seen["type"], seen["value"]) == (f"mixed/{value}", "put", value)
        everywhere(started, f"mixed/{value}", value)

    sent = []
    for origin in (first_old, first_new):
        status, answer = api_request(origin, "POST", "/v1/event/upgrade", origin.name.encode())
        assert status == 200
        sent.append(answer["id"])
    for agent in started:
        poll_until(lambda a=agent: sorted(handled(out, a)) == sorted(sent), STEP_TIMEOUT_S)

    assert controller_agreed(started) == (controller, epoch)
    assert_no_version_refusals(started)
    detail = first_old.members().get(first_new.name, {})
    shown = {k: v for k, v in detail.items() if "version" in k or "range" in k}
    report(f"mixed: what an old agent shows of a new one's version: {shown or 'nothing'}")


# --- the rolling upgrade -------------------------------------------------------------


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
        self.stopped.set()
        self.join(10)
        assert self.error is None, f"the writer failed: {self.error!r}"
        return self.writes


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

        elected = {r["epoch"] for r in history_rows(agents, "controller-elected")}
        if agent.name == controller:
            assert new_controller != controller and new_epoch == epoch + 1, (epoch, new_epoch)
            assert elected - elected_before == {new_epoch}, "the epoch rose once"
        else:
            assert (new_controller, new_epoch) == (controller, epoch), "a follower's restart"
            assert elected == elected_before, "no election for a follower's restart"
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


def print_roll(title: str, steps: list[Step], writes: Writes, found: dict[str, int]) -> None:
    took = sum(s.stop_s + s.back_s for s in steps)
    report(f"{title}: {len(steps)} restarts in {took:.1f} s")
    for s in steps:
        report(f"  {s.agent} -> {s.build}: stop {s.stop_s:.2f} s, back {s.back_s:.2f} s; "
               f"controller {s.controller}, epoch {s.epoch}; feature level {s.level} "
               f"(+{s.level_s:.2f} s); "
               f"suspicions {s.suspected}")  # fmt: skip
    low, high = min(found.values(), default=0), max(found.values(), default=0)
    report(f"  writes: {len(writes.acked)} acknowledged, all found on every agent; "
           f"{len(writes.unknown)} unknown, {low}-{high} of them found per agent; "
           f"{writes.failed} failed (refused, or no connection)")  # fmt: skip


def test_a_rolling_upgrade_and_downgrade_under_load_loses_no_acknowledged_write(
    agents: AgentCluster, old: Build
) -> None:
    """Five old agents, encrypted, under a writer on every agent and an
    application holding a session, an ephemeral and a fenced key; each agent
    restarted on the new build in turn, the controller last, then back: after
    each step one controller, the epoch unchanged by a follower's restart and
    raised once by the controller's, nobody reported failed but agents
    restarted, no sealed packet dropped for its version, the application's
    keys on every agent; at the end every acknowledged write on every agent."""
    started = [agents.add(f"roll-{i}", extra=FLAGS, build=old) for i in range(5)]
    agents.wait_all_see([a.name for a in started], "alive", started, timeout_s=STEP_TIMEOUT_S)
    controller, epoch = controller_agreed(started)
    beside = next(a for a in started if a.name != controller)
    app = Application(beside)
    report(f"roll: 5 x {old.name}, encrypted; controller {controller}, epoch {epoch}; "
           f"the application beside {beside.name}")  # fmt: skip

    def app_keys_everywhere(_: AgentProcess) -> None:
        _, now_epoch = controller_agreed(started)
        app.write_fenced(now_epoch)
        everywhere(started, "app/session", app.value)
        everywhere(started, "app/ephemeral", app.value)
        everywhere(started, "app/assignment", f"epoch {now_epoch}")

    app_keys_everywhere(beside)
    old_level = supported_level(started[0])
    rolling = Roll(started, app, app_keys_everywhere)
    for title, to in (("upgrade", NEW), ("downgrade", old)):
        cap = None
        if to is old:
            cap = old_level
            lower_feature_level(started, old_level)
        writer = Writer(started)
        writer.start()
        steps = rolling.to(to, old_level, cap)
        writes = writer.stop()
        found = all_acknowledged_everywhere(started, writes)
        print_roll(title, steps, writes, found)
        assert writes.acked, "the writer got no write acknowledged"
        if to is NEW and steps[-1].level != old_level:
            took = new_messages_everywhere(started)
            shown = "(no such counter)" if took is None else f"{took:.1f} s after the last step"
            report(f"  the new message type reached every agent: {shown}")
    lift_feature_cap(started, old_level)
    drops = rolling.drops + drops_by_reason(started)
    report(f"packets dropped over both rolls, by reason: {dict(drops) or 'none'}")

    _, epoch = controller_agreed(started)
    stale = api_request(beside, "PUT", f"/v1/kv/app/assignment?fence={epoch - 1}", b"late")
    assert stale[0] == 409, "a write under a deposed epoch is refused"
    assert app.losses == 2, "the session ended only when its own agent restarted"
    app.close()
