"""The metadata log on real agents: what a user of `shoal meta` and `client.meta` sees."""

import asyncio
import json
import signal
import threading
import time

import pytest

from shoal.client import AsyncClient, Conflict, NotApplied, NotFound, Unknown
from tests.conftest import poll_until
from tests.integration.agents import api_request
from tests.integration.metaagents import (
    META,
    client_of,
    controller_name,
    shoal_cli,
    three,
    writable,
)


def test_a_write_through_any_agent_is_read_on_every_agent(agents):
    """A put through one agent is committed with a revision, and a linearizable
    GET on every agent, the one that took it or not, returns it at once."""
    started = three(agents)
    for i, writer in enumerate(started):
        written = client_of(writer).meta.put(f"topics/t{i}", f"partitions={i + 1}")
        assert written.revision > 0
        for reader in started:  # no waiting: a linearizable read sees every commit
            got = client_of(reader).meta.get(f"topics/t{i}")
            assert got.value == f"partitions={i + 1}".encode()
            assert got.mod_revision == written.revision and got.revision >= written.revision
    blob = bytes(range(256)) * 800  # 200 KB: entries, forwarded writes, reads over streams
    big = client_of(started[1]).meta.put("blobs/b", blob)
    for reader in started:
        got = client_of(reader).meta.get("blobs/b")
        assert got.value == blob and got.mod_revision == big.revision
    out = shoal_cli("meta", "get", "--json", "--api", f"{started[1].ip}:7947", "topics/t0")
    assert out.returncode == 0, out.stderr
    shown = json.loads(out.stdout)
    assert shown["value"] == "partitions=1" and shown["mod_revision"] > 0
    deleted = shoal_cli("meta", "delete", "--api", f"{started[2].ip}:7947", "topics/t0")
    assert deleted.returncode == 0 and b"Committed" in deleted.stdout, deleted.stderr
    with pytest.raises(NotFound):
        client_of(started[0]).meta.get("topics/t0")


def test_two_writers_with_the_same_cas_one_wins_one_is_told_the_current_revision(agents):
    """Compare-and-set: of two writes made with the revision both read,
    exactly one commits; the other is a 409 naming the winner's revision."""
    started = three(agents)
    first = client_of(started[0]).meta.put("partitions/p0", "leader=a")
    answers: list[object] = []

    def write(agent, value: str) -> None:
        try:
            answers.append(client_of(agent).meta.put("partitions/p0", value, cas=first.revision))
        except Conflict as exc:
            answers.append(exc)

    threads = [threading.Thread(target=write, args=(started[i], f"leader=n{i}")) for i in (1, 2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    won = [a for a in answers if not isinstance(a, Conflict)]
    lost = [a for a in answers if isinstance(a, Conflict)]
    assert len(won) == 1 and len(lost) == 1, answers
    assert lost[0].status == 409 and lost[0].current == won[0].revision
    now = client_of(started[0]).meta.get("partitions/p0")
    assert now.mod_revision == won[0].revision and now.version == 2
    refused = shoal_cli("meta", "put", "--cas", str(first.revision), "--api",
                        f"{started[0].ip}:7947", "partitions/p0", "late")  # fmt: skip
    assert refused.returncode == 1 and str(won[0].revision).encode() in refused.stderr
    created = client_of(started[1]).meta.put("partitions/p1", "new", cas=0)  # only if absent
    with pytest.raises(Conflict) as again:
        client_of(started[2]).meta.put("partitions/p1", "newer", cas=0)
    assert again.value.current == created.revision

    async def with_asyncio() -> tuple[int, int | None]:
        client = AsyncClient(f"{started[2].ip}:7947")
        held = await client.meta.get("partitions/p1")
        written = await client.meta.put("partitions/p1", b"async", cas=held.mod_revision)
        try:
            await client.meta.delete("partitions/p1", cas=held.mod_revision)
        except Conflict as exc:
            return written.revision, exc.current
        return written.revision, None

    revision, current = asyncio.run(asyncio.wait_for(with_asyncio(), 30))
    assert current == revision and client_of(started[0]).meta.get("partitions/p1").value == b"async"


def test_every_acknowledged_write_survives_a_kill_9_of_the_controller(agents):
    """kill -9 of the controller's agent: once a successor leads, every write
    that was acknowledged is read back, on every agent, linearizably."""
    started = three(agents)
    acked: dict[str, int] = {}
    for i in range(30):
        written = client_of(started[i % 3]).meta.put(f"acked/{i:02d}", f"v{i}")
        acked[f"acked/{i:02d}"] = written.revision
    old = controller_name(started[0])
    victim = next(a for a in started if a.name == old)
    victim.kill()
    alive = [a for a in started if a is not victim]
    poll_until(lambda: all(controller_name(a) not in (None, old) for a in alive), 30)
    poll_until(lambda: writable(alive[0], "after"), 30, interval_s=0.2)
    for agent in alive:
        for key, revision in acked.items():
            got = client_of(agent).meta.get(key)
            assert got.mod_revision == revision and got.value == b"v%d" % int(key[-2:])
    victim.start()  # its log comes back from its data directory
    poll_until(lambda: _stale_revision(victim, "acked/29") == acked["acked/29"], 30)


def _stale_revision(agent, key: str) -> int | None:
    try:
        return client_of(agent).meta.get(key, stale=True).mod_revision
    except Exception:
        return None


def test_an_agent_with_no_controller_known_answers_503_not_applied(agents):
    """Alone (waiting for two more to elect a controller), an agent refuses
    a write as not applied, safe to retry, and never answers 200."""
    (alone,) = agents.start(1, extra=META)
    poll_until(lambda: alone.members(), 10)
    status, body = api_request(alone, "PUT", "/v1/meta/k", b"v")
    assert status == 503 and body["outcome"] == "not_applied" and "safe to retry" in body["error"]
    with pytest.raises(NotApplied):
        client_of(alone).meta.put("k", "v")
    out = shoal_cli("meta", "put", "--api", f"{alone.ip}:7947", "k", "v")
    assert out.returncode == 1 and b"not applied" in out.stderr
    status, _ = api_request(alone, "GET", "/v1/meta/k")
    assert status == 503


def test_meta_off_answers_503_and_bad_input_is_a_4xx(agents):
    """Without `--meta` the routes answer 503 (nothing applied); a bad cas is a 400."""
    (plain,) = agents.start(1, extra=["--no-discovery"])
    poll_until(lambda: plain.members(), 10)
    status, body = api_request(plain, "PUT", "/v1/meta/k", b"v")
    assert status == 503 and "[meta] enabled" in body["error"]
    status, body = api_request(plain, "PUT", "/v1/meta/k?cas=abc", b"v")
    assert status in (400, 503)
    status, _ = api_request(plain, "DELETE", "/v1/meta/")
    assert status == 405


def test_a_write_whose_controller_went_silent_is_unknown_never_success(agents):
    """The controller paused (SIGSTOP) after a write was handed to it: the
    agent answers 504 unknown, and a client that gives up first reports
    Unknown; neither reports success. After it resumes, the key is either
    there or not, and a read tells which."""
    started = three(agents)
    leader = next(a for a in started if a.name == controller_name(started[0]))
    asker = next(a for a in started if a is not leader)
    leader.signal(signal.SIGSTOP)
    try:
        with pytest.raises(Unknown):  # the client gave up after handing the write over
            client_of(asker, timeout=0.3).meta.put("paused/by-client", "v")
        began = time.monotonic()
        status, body = api_request(asker, "PUT", "/v1/meta/paused/by-agent", b"v",
                                   timeout_s=30)  # fmt: skip
        assert status == 504 and body["outcome"] == "unknown", body
        assert "may have been committed" in body["error"]
        assert time.monotonic() - began < 10  # bounded: the answer timeout, and a margin
    finally:
        leader.signal(signal.SIGCONT)
    poll_until(lambda: any(writable(a, "resumed") for a in started), 30, interval_s=0.2)


def test_beside_agents_of_0_2_0_the_log_stays_off_until_they_are_upgraded(agents):
    """Two agents of the previous release and one of this build with `--meta`:
    the cluster works as before (one controller, no packet dropped by anyone),
    a meta write is not applied (503); once the old two run this build with
    `--meta`, the feature level rises and writes commit."""
    from tests.integration import releases
    from tests.integration.agents import Build
    from tests.integration.rolling import controller_agreed, counters

    old = releases.previous_build()
    builds = [old, Build.current(), old]
    started = [agents.add(f"gate-{i}", extra=list(META) if b is not old else ["--no-discovery"],
                          build=b) for i, b in enumerate(builds)]  # fmt: skip
    agents.wait_all_see([a.name for a in started], "alive", started)
    controller_agreed(started)
    new = started[1]
    status, body = api_request(new, "PUT", "/v1/meta/k", b"v")
    assert status == 503 and body["outcome"] == "not_applied"
    dropped = {a.name: {k: v for k, v in counters(a).items() if k.startswith("dropped_") and v}
               for a in started}  # fmt: skip
    assert not any(dropped.values()), dropped
    for agent in (started[0], started[2]):  # one at a time, as an operator rolls
        agent.extra, agent.join = list(META), [new.gossip]  # the seed was gate-0 itself
        agent.restart_on(Build.current())
        agents.wait_all_see([a.name for a in started], "alive", started)
        controller_agreed(started)
    poll_until(lambda: all(writable(a, "k") for a in started), 40, interval_s=0.3)
    assert client_of(started[0]).meta.get("k").value == b"x"
