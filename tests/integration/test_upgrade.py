"""Two adjacent releases in one cluster, and a rolling upgrade under load
(issue 43), with real agents on loopback, encrypted.

The old build is the previous release (RELEASES, built from git by
releases.py); the new build is this tree told by SHOAL_TEST_NEXT_RELEASE=1
to stand in for the next release (a higher version, one new message type).
When there is no previous release to build, this tree without the setting
stands in for it, and the run's summary says so.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from shoal.daemon.keys import generate_key
from tests.conftest import poll_until
from tests.integration import releases
from tests.integration.agents import AgentCluster, AgentProcess, Build, api_request
from tests.integration.rolling import (
    STEP_TIMEOUT_S,
    Application,
    Roll,
    Step,
    Writer,
    Writes,
    all_acknowledged_everywhere,
    assert_no_version_refusals,
    controller_agreed,
    drops_by_reason,
    everywhere,
    lift_feature_cap,
    lower_feature_level,
    new_messages_everywhere,
    supported_level,
)
from tests.integration.test_watch import RawWatch, kv_events

KEY = generate_key()
FLAGS = ["--encrypt", KEY, "--no-discovery"]
NEW = Build.next_release()


@pytest.fixture(scope="module")
def old() -> Build:
    return releases.previous_build()


def report(line: str) -> None:
    """A line for the run's summary (conftest.py) and for `-s`."""
    print(line)
    releases.NOTICES.append(line)


def event_handler(out: Path) -> list[str]:
    """Each agent's handler of the user event `upgrade` logs the id it ran for."""
    command = f'echo "$SHOAL_EVENT_ID" >> {out}/"$SHOAL_SELF_NAME.log"'
    return ["--event-handler", f"user:upgrade={command}"]


def handled(out: Path, agent: AgentProcess) -> list[str]:
    path = out / f"{agent.name}.log"
    return path.read_text().splitlines() if path.exists() else []


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


def print_roll(title: str, steps: list[Step], writes: Writes, found: dict[str, int]) -> None:
    took = sum(s.stop_s + s.back_s for s in steps)
    report(f"{title}: {len(steps)} restarts in {took:.1f} s")
    for s in steps:
        report(f"  {s.agent} -> {s.build}: stop {s.stop_s:.2f} s, back {s.back_s:.2f} s; "
               f"controller {s.controller}, epoch {s.epoch}; feature level {s.level} "
               f"(+{s.level_s:.2f} s); suspicions {s.suspected}")  # fmt: skip
    low, high = min(found.values(), default=0), max(found.values(), default=0)
    report(f"  writes: {len(writes.acked)} acknowledged, all found on every agent; "
           f"{len(writes.unknown)} unknown, {low}-{high} of them found per agent; "
           f"{writes.failed} failed (refused, or no connection)")  # fmt: skip


def test_a_rolling_upgrade_and_downgrade_under_load_loses_no_acknowledged_write(
    agents: AgentCluster, old: Build
) -> None:
    """Five old agents, encrypted, under a writer on every agent and an
    application holding a session, an ephemeral and a fenced key; each agent
    restarted on the new build in turn, the controller last, then back (the
    feature level capped first): after each step one controller, the epoch
    unchanged by a follower's restart and raised once by the controller's,
    nobody reported failed but agents restarted, no packet dropped nor peer
    refused for its version, the cluster's feature level the old release's
    until the last step, the application's keys on every agent; at the end
    every acknowledged write on every agent."""
    started = [agents.add(f"roll-{i}", extra=FLAGS, build=old) for i in range(5)]
    agents.wait_all_see([a.name for a in started], "alive", started, timeout_s=STEP_TIMEOUT_S)
    controller, epoch = controller_agreed(started)
    beside = next(a for a in started if a.name != controller)
    report(f"roll: 5 x {old.name}, encrypted; controller {controller}, epoch {epoch}; "
           f"the application beside {beside.name}")  # fmt: skip
    with Application(beside) as app:

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
            with Writer(started) as writer:
                steps = rolling.to(to, old_level, cap)
                writes = writer.stop()
            found = all_acknowledged_everywhere(started, writes)
            print_roll(title, steps, writes, found)
            assert writes.acked, "the writer got no write acknowledged"
            if to is NEW and steps[-1].level != old_level:
                took = new_messages_everywhere(started)
                shown = "(no such counter)" if took is None else f"yes (waited {took:.1f} s more)"
                report(f"  the new message type reached every agent: {shown}")
        lift_feature_cap(started, old_level)
        drops = rolling.drops + drops_by_reason(started)
        report(f"packets dropped over both rolls, by reason: {dict(drops) or 'none'}")

        _, epoch = controller_agreed(started)
        stale = api_request(beside, "PUT", f"/v1/kv/app/assignment?fence={epoch - 1}", b"late")
        assert stale[0] == 409, "a write under a deposed epoch is refused"
        assert app.losses == 2, "the session ended only when its own agent restarted"
