"""The broker example (examples/broker) on real agents: three agents, three
broker processes, coordinated only through shoal.client. Each broker
registers through a session bound to a TTL check of its agent (issue 30);
the topics and the partition assignment live in the metadata log (issue 37;
a partition of the network: tests/lan/test_broker_meta.py)."""

from __future__ import annotations

import asyncio
import json
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from shoal.client import Client, Conflict, ShoalError
from shoal.daemon.api.client import NotFoundError
from shoal.examples.broker import BrokerClient, assign
from shoal.examples.broker.client import call
from shoal.kernel.errors import ApiError
from tests.conftest import poll_until

TOPIC = "events"
PARTITIONS = 8
BROKER_PORT = 9092
SESSION_TTL_S = 3  # each broker's session, and its agent's TTL check


class BrokerProcess:
    """`python -m shoal.examples.broker serve` beside one agent, on its address."""

    def __init__(self, broker_id: str, agent, root: Path) -> None:
        self.id = broker_id
        self.agent = agent
        self.log_path = root / f"broker-{broker_id}.log"
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "shoal.examples.broker", "serve", "--agent",
             f"{agent.ip}:7947", "--id", broker_id, "--host", agent.ip,
             "--port", str(BROKER_PORT), "--session-ttl", str(SESSION_TTL_S)],
            stdout=log, stderr=log, stdin=subprocess.DEVNULL)  # fmt: skip
        log.close()

    @property
    def address(self) -> str:
        return f"{self.agent.ip}:{BROKER_PORT}"

    def status(self) -> dict[str, Any] | None:
        """What the broker believes now (None if it does not answer)."""
        try:
            with socket.create_connection((self.agent.ip, BROKER_PORT), timeout=2) as sock:
                sock.sendall(b'{"op": "status"}\n')
                return json.loads(sock.makefile().readline())
        except (OSError, ValueError):
            return None

    def signal(self, sig: int) -> None:
        self.proc.send_signal(sig)

    def terminate(self) -> int:
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(10)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)


@pytest.fixture
def cluster(agents, tmp_path):
    """Three agents with one broker each; returns (agents, brokers) once
    every broker serves an assignment that covers every partition of the
    topic `events`, created through a broker. Agent i declares the TTL
    check `broker-b<i>` its broker keeps passing."""
    started = []
    for i in range(3):
        config = tmp_path / f"agent-{i}.toml"
        # healthy_only: the controller follows the brokers' health (docs/election.md).
        config.write_text(f'[election]\nhealthy_only = 1\n[[checks]]\nid = "broker-b{i}"\n'
                          f'kind = "ttl"\nttl_s = {SESSION_TTL_S}\n')  # fmt: skip
        # No multicast discovery: another test run's agents on this host must not join.
        started.append(agents.add(extra=["--bootstrap-expect", "3", "--no-discovery", "--meta",
                                         "--config", str(config)]))  # fmt: skip
    brokers = [BrokerProcess(f"b{i}", a, tmp_path) for i, a in enumerate(started)]
    try:
        # Not applied (and retried by the broker) until the log has a controller.
        poll_until(lambda: (create(brokers[0], TOPIC, PARTITIONS, 20, "fixture") or {}).get("ok"),
                   60)  # fmt: skip
        poll_until(lambda: in_force(brokers, {"b0", "b1", "b2"}), 30, interval_s=0.1)
        yield started, brokers
    finally:
        for b in brokers:
            b.stop()
        for b in brokers:  # shown by pytest for a failed test only
            print(f"---- log of broker {b.id}\n{b.log_path.read_text(errors='replace')}")


def in_force(brokers: list[BrokerProcess], live: set[str]) -> int | None:
    """The epoch of the assignment every broker in `brokers` serves, if they
    all serve the same one, it covers every partition (of `events`, and of
    any other topic) with a broker of `live`, and each partition's leader
    says it leads it."""
    seen = [b.status() for b in brokers]
    if any(s is None or not s["connected"] or s["epoch"] is None for s in seen):
        return None
    if len({(s["epoch"], json.dumps(s["leaders"], sort_keys=True)) for s in seen}) != 1:
        return None
    leaders = seen[0]["leaders"]
    if not {f"{TOPIC}/{p}" for p in range(PARTITIONS)} <= set(leaders):
        return None
    if set(leaders.values()) - live:
        return None
    for s in seen:
        if s["leading"] != sorted(p for p, b in leaders.items() if b == s["id"]):
            return None
    return seen[0]["epoch"]


def create(broker: BrokerProcess, topic: str, partitions: int, timeout_s: float = 5.0,
           token: str | None = None) -> dict[str, Any] | None:  # fmt: skip
    """A broker's answer to `create_topic` (None when it did not answer)."""
    request = {"op": "create_topic", "topic": topic, "partitions": partitions,
               "timeout": timeout_s, **({"token": token} if token else {})}  # fmt: skip
    try:
        return run(call(broker.address, request, timeout_s + 5))
    except OSError:
        return None


def numbers(leading: list[str]) -> list[int]:
    """The partition numbers of `events/<n>` names."""
    return [int(name.rpartition("/")[2]) for name in leading]


def controller_of(agent) -> tuple[str | None, int, bool]:
    try:
        info = agent.api.get("/v1/controller")
    except ApiError:
        return (None, 0, False)
    return (info["controller"], info["epoch"] or 0, info["is_self"])  # epoch None: no election yet


def stored_assignment(agent) -> dict[str, Any] | None:
    """The key `assignment` in the metadata log, read through one agent
    (linearizably): its value, with its `mod_revision`."""
    try:
        with Client(addr=f"{agent.ip}:7947") as shoal:
            held = shoal.meta.get("assignment")
    except ShoalError:
        return None
    return {**json.loads(held.value), "mod_revision": held.mod_revision}


def run(coro):
    return asyncio.run(coro)


def report(figure, text: str) -> None:
    figure(f"[broker timing] {text}")


def test_assignment_is_sticky_and_balanced():
    """A broker that leaves moves only its own partitions; one that comes back takes a share."""
    parts = [("t", p) for p in range(8)]
    first = assign(parts, ["b0", "b1", "b2"], {})
    assert sorted(list(first.values()).count(b) for b in ("b0", "b1", "b2")) == [2, 3, 3]
    without_b1 = assign(parts, ["b0", "b2"], first)
    assert all(without_b1[p] == b for p, b in first.items() if b != "b1")
    assert sorted(list(without_b1.values()).count(b) for b in ("b0", "b2")) == [4, 4]
    back = assign(parts, ["b0", "b1", "b2"], without_b1)
    assert sorted(list(back.values()).count(b) for b in ("b0", "b1", "b2")) == [2, 3, 3]
    assert assign(parts, [], first) == {}
    more = assign([*parts, ("u", 0), ("u", 1)], ["b0", "b1", "b2"], back)  # a new topic
    assert all(more[p] == b for p, b in back.items())
    assert sorted(list(more.values()).count(b) for b in ("b0", "b1", "b2")) == [3, 3, 4]


def test_every_partition_has_a_leader_and_produce_fetch_follow_redirects(cluster):
    """(a) Every partition is served by exactly one broker; the CLI produces
    through any broker (or from the agent's broker list) and fetches it back;
    a broker that stops cleanly hands its partitions over at once."""
    agents, brokers = cluster
    epoch = in_force(brokers, {"b0", "b1", "b2"})
    assert epoch == controller_of(agents[0])[1]
    record = poll_until(lambda: stored_assignment(agents[1]), 10)
    assert record["epoch"] == epoch and record["mod_revision"] == brokers[2].status()["revision"]
    for i, a in enumerate(agents):  # each registration is a key of the broker's session
        key = a.api.get(f"/v1/kv/brokers/b{i}")
        assert key["ephemeral"] is True and key["owner"] == a.name
        (session,) = a.api.get("/v1/sessions")["sessions"]
        assert session["name"] == f"broker-b{i}" and session["checks"] == [f"broker-b{i}"]
        assert f"brokers/b{i}" in session["keys"]
        assert json.loads(key["value"])["session"] == session["id"]
        assert brokers[i].status()["session"] == session["id"]
    poll_until(lambda: {m["health"] for m in agents[0].members().values()} == {"passing"}, 10)
    client = BrokerClient([brokers[0].address])
    for p in range(PARTITIONS):
        assert run(client.produce(TOPIC, p, f"m{p}-0")) == 0
        assert run(client.produce(TOPIC, p, {"n": 1})) == 1
    for p in range(PARTITIONS):
        assert run(client.fetch(TOPIC, p)) == [(0, f"m{p}-0"), (1, {"n": 1})]
    cli = [sys.executable, "-m", "shoal.examples.broker"]
    out = subprocess.run([*cli, "produce", "--agent", f"{agents[2].ip}:7947", "--topic", TOPIC,
                          "--partition", "5", "hello"], capture_output=True, text=True,
                         timeout=30)  # fmt: skip
    assert out.returncode == 0 and out.stdout.strip() == "2", out.stderr
    out = subprocess.run([*cli, "fetch", "--broker", brokers[1].address, "--topic", TOPIC,
                          "--partition", "5", "--offset", "2"], capture_output=True, text=True,
                         timeout=30)  # fmt: skip
    assert out.stdout.splitlines() == ['2 "hello"'], out.stderr
    wrong = subprocess.run([*cli, "produce", "--broker", brokers[0].address, "--topic", TOPIC,
                            "--partition", "99", "x"], capture_output=True, text=True,
                           timeout=30)  # fmt: skip
    assert wrong.returncode == 1 and "partition must be" in wrong.stderr

    # A topic created through one broker (the CLI) is served by all; a
    # second creation of the same name is refused.
    out = subprocess.run(
        [*cli, "create-topic", "--broker", brokers[2].address, "orders", "--partitions", "3"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert out.returncode == 0 and out.stdout.startswith("created orders (3 partitions)"), out
    again = create(brokers[1], "orders", 5)
    assert again == {"error": "exists", "topic": "orders", "partitions": 3,
                     "token": again["token"]}  # fmt: skip
    bad = create(brokers[1], "no/slash", 1)
    assert bad is not None and bad["error"] == "bad_request"
    orders = {f"orders/{p}" for p in range(3)}
    poll_until(lambda: all(orders <= set((b.status() or {}).get("leaders", {})) for b in brokers),
               10)  # fmt: skip
    assert run(client.produce("orders", 2, "first")) == 0
    assert run(client.fetch("orders", 2)) == [(0, "first")]
    with Client(addr=f"{agents[0].ip}:7947") as shoal:  # the log holds both topics
        held = json.loads(shoal.meta.get("topics").value)
    assert {n: t["partitions"] for n, t in held.items()} == {TOPIC: PARTITIONS, "orders": 3}

    # A broker stopped with SIGTERM withdraws its key: its partitions move
    # without waiting for anything to fail.
    leaving = next(b for b in brokers if b.agent.name != controller_of(agents[0])[0])
    assert leaving.terminate() == 0
    rest = [b for b in brokers if b is not leaving]
    poll_until(lambda: in_force(rest, {b.id for b in rest}), 10, interval_s=0.05)
    assert not_found(leaving.agent, f"brokers/{leaving.id}")


def test_kill_9_of_a_brokers_agent_moves_its_partitions_to_the_live_brokers(cluster, figure):
    """(b) The broker beside a crashed agent stops serving, its key vanishes
    with the agent, and the controller gives its partitions to the others."""
    agents, brokers = cluster
    controller = controller_of(agents[0])[0]
    victim = next(b for b in brokers if b.agent.name != controller)
    survivors = [b for b in brokers if b is not victim]
    moving = numbers(victim.status()["leading"])
    assert moving
    seer = next(b.agent for b in brokers if b.agent.name == controller)
    victim.agent.kill()
    t0 = time.monotonic()
    marks: dict[str, float] = {}

    def moved() -> int | None:
        if "suspected" not in marks and seer.status_of(victim.agent.name) != "alive":
            marks["suspected"] = time.monotonic() - t0
        return in_force(survivors, {b.id for b in survivors})

    poll_until(moved, 30, interval_s=0.02)
    took = time.monotonic() - t0
    report(figure, f"broker-agent kill -9 -> its {len(moving)} partitions served elsewhere: "
                   f"{took:.2f} s (the controller's agent no longer saw it alive at "
                   f"{marks.get('suspected', took):.2f} s)")  # fmt: skip
    assert not victim.status()["connected"]  # it answers `unavailable` to everything
    for a in (b.agent for b in survivors):
        poll_until(lambda: not_found(a, f"brokers/{victim.id}"), 10)
    client = BrokerClient([victim.address, survivors[0].address])
    for p in moving:
        assert run(client.produce(TOPIC, p, "after")) == 0  # a moved partition starts over
        assert client.leaders[TOPIC, p] != victim.address
        assert run(client.fetch(TOPIC, p)) == [(0, "after")]


def test_kill_9_of_the_controllers_agent_gives_a_new_epoch_and_refuses_the_old(cluster, figure):
    """(c) A new controller writes a new assignment under its epoch; (d) a
    write of the assignment decided on what the deposed controller read (a
    cas on the revision it read) is refused and never seen anywhere."""
    agents, brokers = cluster
    name, old_epoch, _ = controller_of(agents[0])
    old = next(b for b in brokers if b.agent.name == name)
    old_revision = stored_assignment(agents[0])["mod_revision"]
    survivors = [b for b in brokers if b is not old]
    live = {b.id for b in survivors}
    old.agent.kill()
    t0 = time.monotonic()
    marks: dict[str, float] = {}

    def reassigned() -> int | None:
        if "elected" not in marks and controller_of(survivors[0].agent)[1] > old_epoch:
            marks["elected"] = time.monotonic() - t0
        epoch = in_force(survivors, live)
        return epoch if epoch is not None and epoch > old_epoch else None

    new_epoch = poll_until(reassigned, 30, interval_s=0.02)
    took = time.monotonic() - t0
    report(figure, f"controller-agent kill -9 -> new assignment (epoch {old_epoch} -> "
                   f"{new_epoch}) in force: {took:.2f} s (new epoch seen at "
                   f"{marks.get('elected', took):.2f} s)")  # fmt: skip
    for a in (b.agent for b in survivors):
        assert controller_of(a)[1] == new_epoch
        record = poll_until(lambda: stored_assignment(a), 10)
        assert record["epoch"] == new_epoch and record["mod_revision"] > old_revision
    new_revision = record["mod_revision"]

    everything_to_old = {f"{TOPIC}/{p}": old.id for p in range(PARTITIONS)}
    forged = json.dumps({"epoch": old_epoch, "leaders": everything_to_old})
    for a in (b.agent for b in survivors):
        with Client(addr=f"{a.ip}:7947") as shoal, pytest.raises(Conflict) as refused:
            shoal.meta.put("assignment", forged, cas=old_revision)
        assert refused.value.current == new_revision
    for a in (b.agent for b in survivors):  # linearizable reads: nothing to wait for
        record = stored_assignment(a)
        assert record["epoch"] == new_epoch and record["mod_revision"] == new_revision
    assert in_force(survivors, live) == new_epoch
    client = BrokerClient([b.address for b in brokers])
    assert all(run(client.produce(TOPIC, p, "x")) >= 0 for p in range(PARTITIONS))


def not_found(agent, key: str) -> bool:
    try:
        agent.api.get(f"/v1/kv/{key}")
    except NotFoundError:
        return True
    return False


def health_of(agent, name: str) -> str | None:
    return agent.members().get(name, {}).get("health")


def registered_session(agent, broker_id: str) -> str | None:
    """The session `brokers/<id>` was written under, as one agent reads it."""
    try:
        return json.loads(agent.api.get(f"/v1/kv/brokers/{broker_id}")["value"])["session"]
    except (NotFoundError, ApiError):
        return None


def timeline(conditions: dict[str, Any], timeout_s: float) -> dict[str, float]:
    """Poll every condition until all have held once; the seconds at which
    each first held (one clock, time.monotonic, from this call)."""
    t0 = time.monotonic()
    marks: dict[str, float] = {}

    def all_held() -> bool:
        for name, holds in conditions.items():
            if name not in marks and holds():
                marks[name] = time.monotonic() - t0
        return len(marks) == len(conditions)

    poll_until(all_held, timeout_s, interval_s=0.02)
    return marks


def non_controller_broker(agents, brokers) -> BrokerProcess:
    """A broker whose agent is not the shoal controller (the broker beside
    the controller is the one that writes assignments: README.md)."""
    controller = controller_of(agents[0])[0]
    return next(b for b in brokers if b.agent.name != controller)


def test_kill_9_of_a_broker_process_unregisters_it_within_its_ttl_and_moves_its_partitions(
    cluster, figure
):
    """(e) A broker process killed beside a healthy agent: its session's key
    leaves every agent within TTL + 1 s, its member's health turns critical
    (its TTL check), and its partitions go to the live brokers."""
    agents, brokers = cluster
    victim = non_controller_broker(agents, brokers)
    survivors = [b for b in brokers if b is not victim]
    moving = numbers(victim.status()["leading"])
    assert moving
    victim.signal(signal.SIGKILL)
    conditions: dict[str, Any] = {
        f"key gone on {a.name}": lambda a=a: not_found(a, f"brokers/{victim.id}") for a in agents
    }
    conditions["served elsewhere"] = lambda: in_force(survivors, {b.id for b in survivors})
    conditions["critical"] = lambda: health_of(survivors[0].agent, victim.agent.name) == "critical"
    marks = timeline(conditions, 30)
    gone = max(t for name, t in marks.items() if name.startswith("key gone"))
    report(figure, f"broker kill -9 (TTL {SESSION_TTL_S} s) -> its {len(moving)} partitions "
                   f"served elsewhere: {marks['served elsewhere']:.2f} s (key gone from every "
                   f"agent at {gone:.2f} s, member critical on the controller's side at "
                   f"{marks['critical']:.2f} s)")  # fmt: skip
    assert gone <= SESSION_TTL_S + 1
    assert victim.agent.running() and health_of(agents[0], victim.agent.name) == "critical"
    assert all(a.status_of(victim.agent.name) == "alive" for a in agents)  # only the app died
    assert victim.agent.api.get("/v1/sessions")["sessions"] == []
    client = BrokerClient([victim.address, survivors[0].address])
    for p in moving:
        assert run(client.produce(TOPIC, p, "after")) == 0  # a moved partition starts over
        assert client.leaders[TOPIC, p] != victim.address
        assert run(client.fetch(TOPIC, p)) == [(0, "after")]


def test_sigstop_of_a_broker_unregisters_it_and_sigcont_brings_it_back_in_a_new_session(
    cluster, figure
):
    """(f) A hung broker (SIGSTOP) stops passing its TTL check: its member
    turns critical, its session ends, its key leaves every agent within
    TTL + 1 s and its partitions move; after SIGCONT it opens a new session,
    registers again and is given partitions again."""
    agents, brokers = cluster
    victim = non_controller_broker(agents, brokers)
    survivors = [b for b in brokers if b is not victim]
    old_session = victim.status()["session"]
    assert old_session and registered_session(agents[0], victim.id) == old_session
    victim.signal(signal.SIGSTOP)
    try:
        conditions: dict[str, Any] = {
            f"key gone on {a.name}": lambda a=a: not_found(a, f"brokers/{victim.id}")
            for a in agents
        }
        conditions["served elsewhere"] = lambda: in_force(survivors, {b.id for b in survivors})
        conditions.update({f"critical on {a.name}": lambda a=a: health_of(
            a, victim.agent.name) == "critical" for a in agents})  # fmt: skip
        stopped = timeline(conditions, 30)
    finally:
        victim.signal(signal.SIGCONT)
    everyone = {b.id for b in brokers}

    def back() -> bool:
        status = victim.status()
        if status is None or status["session"] in (None, old_session) or not status["leading"]:
            return False
        return in_force(brokers, everyone) is not None

    resumed = timeline({"served again": back}, 30)
    new_session = victim.status()["session"]
    gone = max(t for name, t in stopped.items() if name.startswith("key gone"))
    critical = max(t for name, t in stopped.items() if name.startswith("critical"))
    report(figure, f"broker SIGSTOP (TTL {SESSION_TTL_S} s) -> its partitions served "
                   f"elsewhere: {stopped['served elsewhere']:.2f} s (key gone from every agent "
                   f"at {gone:.2f} s, member critical on every agent at {critical:.2f} s); "
                   f"SIGCONT -> new session, leading {victim.status()['leading']}: "
                   f"{resumed['served again']:.2f} s")  # fmt: skip
    assert gone <= SESSION_TTL_S + 1
    for a in agents:
        poll_until(lambda a=a: registered_session(a, victim.id) == new_session, 10)
        poll_until(lambda a=a: health_of(a, victim.agent.name) == "passing", 10)
    (session,) = victim.agent.api.get("/v1/sessions")["sessions"]
    assert session["id"] == new_session != old_session
    client = BrokerClient([b.address for b in brokers])
    assert all(run(client.produce(TOPIC, p, "x")) >= 0 for p in range(PARTITIONS))


def test_kill_9_of_the_controllers_broker_moves_the_controller_and_its_partitions(cluster, figure):
    """(g) The broker beside the controller (the one that writes the
    assignment) dies while its agent lives: with `healthy_only` the agent's
    critical check makes it hand the controller over, and the broker beside
    the new controller writes an assignment without the dead one."""
    agents, brokers = cluster
    name, epoch, _ = controller_of(agents[0])
    victim = next(b for b in brokers if b.agent.name == name)
    survivors = [b for b in brokers if b is not victim]
    victim.signal(signal.SIGKILL)
    marks = timeline({
        "controller moved": lambda: (c := controller_of(survivors[0].agent))[0] not in (None, name)
        and c[1] > epoch,
        "served elsewhere": lambda: in_force(survivors, {b.id for b in survivors}),
    }, 30)  # fmt: skip
    report(figure, f"kill -9 of the controller's broker (TTL {SESSION_TTL_S} s) -> controller "
                   f"moved {marks['controller moved']:.2f} s, its partitions served elsewhere "
                   f"{marks['served elsewhere']:.2f} s")  # fmt: skip
    assert victim.agent.running()  # only the application died


class AnswerLosingProxy:
    """A TCP proxy in front of an agent's API that loses the next write of
    the key `topics` (a network that fails mid-request, for real): either
    the request never reaches the agent, or the agent's answer never comes
    back. The client, having sent its request, cannot tell which."""

    def __init__(self, agent) -> None:
        self.agent = agent
        self.lose: str | None = None  # "request" or "answer", for one write
        self.lost: list[str] = []

    async def start(self) -> str:
        self.server = await asyncio.start_server(self._relay, "127.0.0.1", 0)
        return f"127.0.0.1:{self.server.sockets[0].getsockname()[1]}"

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        first = await reader.read(65536)
        lose = self.lose if first.startswith(b"PUT /v1/meta/topics") else None
        if lose is not None:
            self.lose = None
            self.lost.append(lose)
        if lose == "request":
            writer.transport.abort()  # the client sent it; nobody will ever answer
            return
        up_reader, up_writer = await asyncio.open_connection(self.agent.ip, 7947)
        up_writer.write(first)

        async def upstream() -> None:
            while data := await reader.read(65536):
                up_writer.write(data)

        pump = asyncio.create_task(upstream())
        answer = await up_reader.read()  # the agent answers, then closes (Connection: close)
        pump.cancel()
        up_writer.close()
        if lose == "answer":
            writer.transport.abort()  # committed, but the client never hears it
            return
        writer.write(answer)
        await writer.drain()
        writer.close()


def test_a_write_whose_answer_is_lost_is_read_back_and_never_taken_twice(cluster):
    """(h) `create_topic` through a connection that fails after the request
    was sent: the client gets Unknown. The broker's logic (metadata.py)
    reads the key back: a topic committed under its token is `ok`; a topic
    never written is written again with cas, once. A namesake with another
    token is refused (`exists`)."""
    from shoal.client import AsyncClient
    from shoal.examples.broker.metadata import create_topic

    agents, _ = cluster

    async def scenario() -> tuple[list[dict[str, Any]], list[str]]:
        proxy = AnswerLosingProxy(agents[1])
        client = AsyncClient(addr=await proxy.start(), timeout=5.0)
        answers = []
        for name, lose in (("answer-lost", "answer"), ("request-lost", "request")):
            proxy.lose = lose
            answers.append(await create_topic(client, name, 2, f"token-{name}", 10.0))
        answers.append(await create_topic(client, "answer-lost", 4, "another", 10.0))
        await client.close()
        proxy.server.close()  # its listening socket, else left to the collector
        await proxy.server.wait_closed()
        return answers, proxy.lost

    answers, lost = run(scenario())
    assert lost == ["answer", "request"]  # each creation's first write was lost
    assert [a.get("ok") for a in answers[:2]] == [True, True], answers
    assert answers[2] == {"error": "exists", "topic": "answer-lost", "partitions": 2}
    with Client(addr=f"{agents[0].ip}:7947") as shoal:
        held = json.loads(shoal.meta.get("topics").value)
    assert held["answer-lost"] == {"partitions": 2, "token": "token-answer-lost"}
    assert held["request-lost"] == {"partitions": 2, "token": "token-request-lost"}
