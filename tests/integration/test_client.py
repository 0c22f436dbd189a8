"""shoal.client against real agents on loopback: what a program using the
library sees (docs/client.md). Watches are cut under the client by a TCP
relay the test controls, and resumed across a restart of the agent."""

from __future__ import annotations

import asyncio
import os
import re
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from shoal.client import AsyncClient, Client, Conflict, KvEvent, NotFound, Unauthorized
from tests.conftest import poll_until
from tests.integration.metaagents import writable


class Relay:
    """A TCP relay from a loopback port to an agent's API. `cut()` resets
    every connection through it; while `closed`, new ones are refused (so a
    watch keeps retrying), as a broken network would."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.closed = False
        self.accepted = 0
        self._pairs: list[tuple[socket.socket, socket.socket]] = []
        self._lock = threading.Lock()
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.addr = f"127.0.0.1:{self.sock.getsockname()[1]}"
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                down, _ = self.sock.accept()
            except OSError:
                return
            if self.closed:
                down.close()
                continue
            try:
                up = socket.create_connection(self.target, timeout=5)
            except OSError:
                down.close()
                continue
            with self._lock:
                self.accepted += 1
                self._pairs.append((down, up))
            for a, b in ((down, up), (up, down)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def cut(self) -> None:
        with self._lock:
            pairs, self._pairs = self._pairs, []
        for pair in pairs:
            for s in pair:
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                s.close()

    def close(self) -> None:
        self.sock.close()
        self.cut()


def next_within(watch, timeout_s: float = 30.0):
    """The watch's next event; fails (instead of hanging) after `timeout_s`."""
    box: list = []

    def pull() -> None:
        try:
            box.append(next(watch))
        except BaseException as exc:  # handed to the test below
            box.append(exc)

    worker = threading.Thread(target=pull, daemon=True)
    worker.start()
    worker.join(timeout_s)
    assert box, f"no event within {timeout_s} s"
    if isinstance(box[0], BaseException):
        raise box[0]
    return box[0]


def client_of(agent, **kwargs) -> Client:
    return Client(f"{agent.ip}:7947", token="", **kwargs)


def started(agents, n: int = 1, extra: tuple[str, ...] = ()) -> list:
    """`n` agents, all seeing each other alive."""
    out = agents.start(n, extra=["--no-discovery", "--bootstrap-expect", str(n), *extra])
    agents.wait_all_see([a.name for a in out], "alive", out)
    return out


def test_members_self_tags_and_filters_by_regex(agents):
    """members(tags=) matches like `shoal members --tag` (full match, missing tag fails)."""
    web = agents.add(extra=["--no-discovery", "--tag", "role=web"])
    db = agents.add(extra=["--no-discovery", "--tag", "role=db"])
    agents.wait_all_see([web.name, db.name], "alive", [web, db])
    with client_of(web) as c:
        assert sorted(m.name for m in c.members()) == sorted([web.name, db.name])
        assert [m.name for m in c.members(tags={"role": "w.b"})] == [web.name]
        assert c.members(tags={"role": "we"}) == [] and c.members(tags={"rack": ".*"}) == []
        assert [m.name for m in c.members(status="alive", name=db.name)] == [db.name]
        me = c.self()
        assert (me.name, me.tags["role"]) == (web.name, "web") and me.counters
        assert c.set_tags({"rack": "r7"})["rack"] == "r7"
        assert "rack" not in c.delete_tags(["rack"])
        poll_until(lambda: c.members(tags={"rack": ".*"}) == [], 10)


def test_keys_round_trip_as_bytes_with_their_versions(agents):
    (a,) = started(agents)
    c = client_of(a)
    written = c.kv.put("cfg/blob", bytes(range(256)))
    got = c.kv.get("cfg/blob")
    assert got.value == bytes(range(256)) and got.hlc == written.hlc and got.writer == a.name
    c.kv.put("cfg/text", "héllo")
    assert c.kv.get("cfg/text").text == "héllo"
    assert [kv.key for kv in c.kv.list("cfg/")] == ["cfg/blob", "cfg/text"]
    assert c.kv.delete("cfg/blob").deleted
    with pytest.raises(NotFound):
        c.kv.get("cfg/blob")


def test_a_fenced_write_is_refused_once_a_newer_epoch_wrote_the_key(agents):
    """The controller's writes carry its epoch; older epochs and unfenced writes lose (409)."""
    (a,) = started(agents)
    c = client_of(a)
    ctl = c.wait_controller(timeout=30)
    assert ctl.controller == a.name and ctl.epoch >= 1
    assert c.kv.put("leader/plan", "v1", fence=ctl.epoch).epoch == ctl.epoch
    assert c.kv.get("leader/plan").epoch == ctl.epoch
    with pytest.raises(Conflict) as unfenced:
        c.kv.put("leader/plan", "sneaky")
    assert unfenced.value.status == 409
    with pytest.raises(Conflict) as ahead:
        c.kv.put("leader/plan", "made-up", fence=ctl.epoch + 5)
    assert ahead.value.fence == ctl.epoch + 5
    if ctl.epoch > 1:
        with pytest.raises(Conflict) as stale:
            c.kv.put("leader/plan", "old", fence=ctl.epoch - 1)
        assert stale.value.epoch == ctl.epoch
    assert c.kv.get("leader/plan").text == "v1"


def test_waiting_for_the_next_controller_after_the_old_one_dies(agents):
    """wait_controller(after_epoch=E) returns the successor, with a higher epoch."""
    trio = started(agents, 3)
    ctl = client_of(trio[0]).wait_controller(timeout=30)
    victim = next(a for a in trio if a.name == ctl.controller)
    survivor = next(a for a in trio if a is not victim)
    victim.kill()
    after = client_of(survivor).wait_controller(after_epoch=ctl.epoch, timeout=30)
    assert after.epoch > ctl.epoch and after.controller != victim.name


def test_an_ephemeral_key_is_deleted_for_watchers_when_its_owner_fails(agents):
    """A broker's registration vanishes from every agent when its machine dies."""
    trio = started(agents, 3)
    owner, watcher = trio[1], trio[0]
    w = client_of(watcher)
    with w.kv.watch(prefix="brokers/") as watch:
        client_of(owner).kv.put("brokers/b1", "127.0.0.1:9092", ephemeral=True)
        put = next_within(watch)
        assert (put.type, put.key, put.ephemeral, put.owner) == ("put", "brokers/b1", True,
                                                                owner.name)  # fmt: skip
        owner.kill()
        gone = next_within(watch)
    assert (gone.type, gone.key, gone.reason) == ("delete", "brokers/b1", "owner-failed")
    assert not gone.resync and gone.index > put.index
    with pytest.raises(NotFound):
        w.kv.get("brokers/b1")


def test_a_watch_resumes_after_its_connection_is_cut_losing_and_repeating_nothing(agents):
    (a,) = started(agents)
    writer = client_of(a)
    relay = Relay((a.ip, 7947))
    try:
        watch = Client(relay.addr, token="").kv.watch(prefix="seq/")
        writer.kv.put("seq/000", "0")
        seen = [next_within(watch)]
        for round_ in range(3):
            relay.cut()
            for i in range(round_ * 10 + 1, round_ * 10 + 11):
                writer.kv.put(f"seq/{i:03d}", str(i))  # while the watch is cut off
            seen += [next_within(watch) for _ in range(10)]
        watch.close()
    finally:
        relay.close()
    assert [e.key for e in seen] == [f"seq/{i:03d}" for i in range(31)]
    assert not any(e.resync for e in seen)
    indexes = [e.index for e in seen]
    assert indexes == sorted(set(indexes))
    assert relay.accepted >= 4  # it did reconnect, three times


def test_a_watch_across_an_agent_restart_resyncs_what_changed(agents):
    """A restart starts indexes again: the watch re-lists and yields the
    difference (puts for new keys, deletes for vanished ones) as resync events."""
    (a,) = started(agents)
    c = client_of(a)
    c.kv.put("app/keep", "1")
    c.kv.put("app/drop", "2")
    c.kv.put("app/mine", "e", ephemeral=True)  # ends with this run of the agent
    relay = Relay((a.ip, 7947))
    try:
        with Client(relay.addr, token="").kv.watch(prefix="app/", index=0) as watch:
            first = [next_within(watch) for _ in range(3)]
            assert [e.key for e in first] == ["app/keep", "app/drop", "app/mine"]
            run = watch.run
            relay.closed = True
            relay.cut()
            a.kill()
            a.start()
            poll_until(lambda: a.members(), 20)
            c.kv.delete("app/drop")
            c.kv.put("app/new", "3")
            relay.closed = False
            resynced = {}
            while set(resynced) != {"app/drop", "app/new", "app/mine"}:
                event = next_within(watch)
                assert isinstance(event, KvEvent) and event.resync, event
                resynced[event.key] = event.type
            assert watch.run != run
    finally:
        relay.close()
    assert resynced == {"app/drop": "delete", "app/new": "put", "app/mine": "delete"}


def test_the_async_client_watches_members_and_closes_with_async_with(agents):
    (a,) = started(agents)

    async def main() -> tuple[str, str]:
        client = AsyncClient(f"{a.ip}:7947", token="")
        assert [m.name for m in await client.members()] == [a.name]
        async with client.watch_members() as watch:
            b = agents.add(join=[a.gossip], extra=["--no-discovery"])
            async for event in watch:
                if event.name == b.name and event.status == "alive":
                    return event.type, (await client.kv.put("k", b"v")).key
        raise AssertionError("the watch ended")

    kind, key = asyncio.run(asyncio.wait_for(main(), 60))
    assert kind == "member-joined" and key == "k"


def test_a_unix_socket_and_the_api_token(agents, tmp_path):
    """`unix:PATH` reaches the agent's api_socket; writes need the token."""
    token_file = tmp_path / "token"
    token_file.write_text("t" * 32)
    os.chmod(token_file, 0o600)
    sock = tmp_path / "api.sock"
    (a,) = started(agents, extra=("--api-socket", str(sock), "--api-token-file", str(token_file)))
    with pytest.raises(Unauthorized, match="token"):
        client_of(a).kv.put("k", "v")
    c = Client(f"unix:{sock}", token_file=str(token_file))
    assert c.kv.put("k", "v").key == "k" and c.self().name == a.name


def test_every_example_in_docs_client_md_runs(agents, tmp_path):
    """The documentation's programs run as written against a real agent."""
    config = tmp_path / "checks.toml"  # the TTL check the session example reports to
    config.write_text('[[checks]]\nid = "broker"\nkind = "ttl"\nttl_s = 30\n')
    # With the metadata log: its sessions, and the recipes on them.
    a, _ = started(agents, 2, extra=("--meta", "--config", str(config)))  # a peer joins: an event
    client_of(a).wait_controller(timeout=30)  # the fenced-write example expects one
    poll_until(lambda: writable(a), 30, interval_s=0.2)
    text = (Path(__file__).parents[2] / "docs" / "client.md").read_text()
    examples = re.findall(r"```python\n(.*?)```", text, re.S)
    assert len(examples) >= 11
    env = {**os.environ, "SHOAL_API_ADDR": f"{a.ip}:7947", "SHOAL_API_TOKEN": ""}
    env.pop("SHOAL_API_TOKEN_FILE", None)
    for example in examples:
        done = subprocess.run([sys.executable, "-c", example], capture_output=True, text=True,
                              env=env, timeout=60)  # fmt: skip
        assert done.returncode == 0, example + done.stderr
    assert client_of(a).kv.get("cluster/assignment").epoch >= 1


HOLDER = """
import sys, time
from shoal.client import Client
c = Client(sys.argv[1], token="")
session = c.session(ttl=2, name="holder")
session.put("brokers/held", "1")
print(session.id, flush=True)
time.sleep(600)  # until killed: only the keepalive thread runs
"""


def test_a_session_kept_by_a_process_ends_within_its_ttl_when_the_process_is_killed(agents):
    """Its key is gone from another agent within TTL + 1 s of the kill."""
    a, b = started(agents, 2)
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, f"{a.ip}:7947"],
                              stdout=subprocess.PIPE, text=True)  # fmt: skip
    try:
        session_id = holder.stdout.readline().strip()
        poll_until(lambda: _has(b, "brokers/held"), 10)
        poll_until(lambda: [s.renewals for s in client_of(a).sessions()] >= [2], 10)
        assert _has(b, "brokers/held")  # two renewals later (ttl 2 s): still there
        holder.kill()
        holder.wait(10)
        poll_until(lambda: not _has(b, "brokers/held"), 2 + 1)
        assert session_id not in [s.id for s in client_of(a).sessions()]
    finally:
        holder.kill()
        holder.wait(10)
        holder.stdout.close()


def test_leaving_a_session_block_deletes_its_keys_everywhere_at_once(agents):
    a, b = started(agents, 2)
    with client_of(a).session(ttl=60) as session:
        session.put("locks/x", "held")
        poll_until(lambda: _has(b, "locks/x"), 10)
        assert not session.lost
    poll_until(lambda: not _has(b, "locks/x"), 2)
    assert client_of(a).sessions() == []


def test_a_session_the_agent_ends_is_lost_and_calls_back_sync_and_async(agents):
    """An agent restart ends every session: the client says so at its next renewal."""
    (a,) = started(agents)
    c = client_of(a)
    seen: list[str] = []
    session = c.session(ttl=3, on_lost=lambda s: seen.append(s.reason))
    session.put("reg/sync", "1")

    async def open_async():
        s = AsyncClient(f"{a.ip}:7947", token="").session(ttl=3)
        await s.open()
        await s.put("reg/async", "1")
        return s

    loop = asyncio.new_event_loop()
    try:
        async_session = loop.run_until_complete(open_async())
        a.kill()
        a.start()
        poll_until(lambda: a.members().get(a.name) is not None, 20)
        # Told by a 404 once the agent is back (or, if its restart took
        # longer than the TTL, by the TTL running out): lost either way.
        assert session.wait_lost(10)
        assert "open a new one" in seen[0] or "it has ended the session" in seen[0]
        loop.run_until_complete(asyncio.wait_for(async_session.wait_lost(), 10))
        assert async_session.lost and not _has(a, "reg/sync") and not _has(a, "reg/async")
        loop.run_until_complete(async_session.close())
    finally:
        session.close()
        loop.close()


def _has(agent, key: str) -> bool:
    try:
        client_of(agent).kv.get(key)
    except NotFound:
        return False
    return True
