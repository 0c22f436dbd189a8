"""Listing and watching the metadata log on real agents: what a user of
`shoal meta list|watch`, `client.meta.list` and `client.meta.watch` sees."""

import asyncio
import subprocess
import sys
import threading
import time

import pytest

from shoal.client import AsyncClient, MetaEvent, NotApplied, Unavailable, Unknown
from tests.conftest import poll_until
from tests.integration.agents import api_request
from tests.integration.metaagents import client_of, controller_name, three


class Collector:
    """A watch on one agent, read by a thread: the events it delivered."""

    def __init__(self, agent, prefix: str, from_revision: int | None = None) -> None:
        self.events: list[MetaEvent] = []
        self.error: BaseException | None = None
        self.watch = client_of(agent, timeout=3.0).meta.watch(prefix, from_revision)
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            for event in self.watch:
                self.events.append(event)
        except BaseException as exc:  # noqa: BLE001 - shown by the test
            self.error = exc

    def seen(self, revision: int) -> bool:
        assert self.error is None, self.error
        return any(e.revision >= revision for e in self.events)


class Writer:
    """Puts and deletes under a prefix, through the agents given, retrying
    what was not applied; remembers what was acknowledged, by revision."""

    def __init__(self) -> None:
        self.acked: dict[int, tuple[str, str, bytes | None]] = {}  # revision -> (type, key, value)
        self.doubtful: set[int] = set()  # a delete retried after an unknown outcome
        self.counts: dict[str, int] = {}

    def write(self, through, prefix: str = "w/") -> None:
        n = self.counts[prefix] = self.counts.get(prefix, 0) + 1
        # Every fifth write deletes the key the one before it put: it exists.
        if n % 5 == 0:
            kind, key = "delete", f"{prefix}{(n - 1) % 7}"
        else:
            kind, key = "put", f"{prefix}{n % 7}"
        value = None if kind == "delete" else f"v{n}".encode()
        deadline = time.monotonic() + 30
        unknown = False
        while True:
            agent = through[n % len(through)] if isinstance(through, list) else through
            try:
                meta = client_of(agent, timeout=5.0).meta
                done = meta.delete(key) if value is None else meta.put(key, value)
            except (NotApplied, Unavailable, Unknown) as exc:
                # Unknown: it may have committed (the watch may show it): not acknowledged.
                unknown = unknown or isinstance(exc, Unknown)
                assert time.monotonic() < deadline, "no write committed in 30 s"
                time.sleep(0.1)
                continue
            if prefix == "w/":
                self.acked[done.revision] = (kind, key, value)
                if unknown and kind == "delete":
                    self.doubtful.add(done.revision)
            return


def _check(collector: Collector, writer: Writer) -> None:
    """Every acknowledged change delivered exactly once, in revision order,
    with its key and value; nothing outside the prefix."""
    revisions = [e.revision for e in collector.events]
    assert revisions == sorted(set(revisions)), "out of order or twice"
    assert all(e.key.startswith("w/") for e in collector.events)
    by_revision = {e.revision: e for e in collector.events}
    for revision, (kind, key, value) in writer.acked.items():
        event = by_revision.get(revision)
        if event is None and revision in writer.doubtful:
            continue  # its first try deleted the key: the retry changed nothing, no event
        assert event is not None, f"acknowledged revision {revision} ({kind} {key}) not seen"
        assert (event.type, event.key) == (kind, key)
        if kind == "put":
            assert event.value == value and event.mod_revision == revision


def test_a_watcher_on_a_follower_sees_every_write_once_in_order_across_restart_and_kill_9(agents):
    """A watch on a non-controller agent delivers every acknowledged write
    under its prefix exactly once, in revision order, while its own agent is
    killed and restarted (it resumes from its last revision + 1) and while
    the controller is killed with -9 (a successor takes over)."""
    started = three(agents)
    leader = next(a for a in started if a.name == controller_name(started[0]))
    watched = next(a for a in started[1:] if a is not leader)
    third = next(a for a in started if a not in (leader, watched))
    collector = Collector(watched, "w/")
    writer = Writer()
    for _ in range(20):
        writer.write(third, prefix="other/")  # not under the prefix: never delivered
        writer.write(started)
    # The last write is under the prefix: the next one, made while the watched
    # agent is down, is the revision the watch resumes from.
    poll_until(lambda: collector.seen(max(writer.acked)), 30)

    watched.kill()  # the watch reconnects by itself once its agent is back
    for _ in range(15):
        writer.write([leader, third])
    watched.start()
    for _ in range(5):
        writer.write(started)
    poll_until(lambda: collector.seen(max(writer.acked)), 60)

    old = leader.name
    leader.kill()
    alive = [watched, third]
    poll_until(lambda: all(controller_name(a) not in (None, old) for a in alive), 60)
    for _ in range(20):
        writer.write(alive)
    poll_until(lambda: collector.seen(max(writer.acked)), 60)
    collector.watch.close()
    _check(collector, writer)
    assert len(collector.events) >= 45


def test_a_watch_from_a_revision_replays_then_follows_and_one_ahead_waits(agents):
    """`from` below the agent's revision replays the changes kept, then goes
    on live; `from` ahead of it waits for that revision. The CLI prints one
    line per change; the async client resumes from where a sync watch stopped."""
    started = three(agents)
    first = client_of(started[0]).meta.put("r/a", "1").revision
    client_of(started[1]).meta.put("r/b", "2")
    client_of(started[2]).meta.delete("r/a")
    latest = client_of(started[0]).meta.put("r/c", "3").revision
    with client_of(started[1]).meta.watch("r/", from_revision=first) as watch:
        got = [next(watch) for _ in range(4)]
        assert [(e.type, e.key) for e in got] == [("put", "r/a"), ("put", "r/b"),
                                                  ("delete", "r/a"), ("put", "r/c")]  # fmt: skip
        assert got[-1].revision == latest and got[0].value == b"1"
        ahead = latest + 3
        collector = Collector(started[2], "r/", from_revision=ahead)
        later = [client_of(started[0]).meta.put(f"r/n{i}", f"{i}").revision for i in range(6)]
        assert next(watch).revision == later[0]  # the first watch follows live
    poll_until(lambda: collector.seen(later[-1]), 20)
    assert [e.revision for e in collector.events] == [r for r in later if r >= ahead]
    collector.watch.close()

    async def resumed() -> list[int]:
        client = AsyncClient(f"{started[0].ip}:7947")
        async with client.meta.watch("r/n", from_revision=later[2]) as watch:
            return [(await anext(watch)).revision for _ in range(4)]

    assert asyncio.run(asyncio.wait_for(resumed(), 30)) == later[2:]

    proc = subprocess.Popen([sys.executable, "-m", "shoal.daemon.cli", "meta", "watch", "--api",
                             f"{started[1].ip}:7947", "--from", str(first), "r/"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
    try:
        lines = [proc.stdout.readline().decode().strip() for _ in range(4)]  # type: ignore[union-attr]
    finally:
        proc.kill()
        proc.communicate(timeout=10)
    assert lines == [f"{first} put r/a 1", f"{first + 1} put r/b 2", f"{first + 2} delete r/a",
                     f"{latest} put r/c 3"]  # fmt: skip


def test_listing_pages_hold_every_key_once_and_see_every_acknowledged_write(agents):
    """`GET /v1/meta/?prefix=` pages: every key under the prefix exactly once
    across pages, in key order, none outside it; a write acknowledged through
    one agent is in the next listing on any other (linearizable)."""
    started = three(agents)
    for i in range(23):
        client_of(started[i % 3]).meta.put(f"l/{i:02d}", f"v{i}")
    client_of(started[0]).meta.put("lz", "outside")
    seen: list[str] = []
    after = ""
    revisions = []
    while True:
        status, page = api_request(started[1], "GET", f"/v1/meta/?prefix=l/&limit=5&after={after}")
        assert status == 200, page
        seen += [item["key"] for item in page["items"]]
        revisions.append(page["revision"])
        assert all(item["mod_revision"] > 0 and item["version"] == 1 for item in page["items"])
        if not page["more"]:
            break
        after = page["next_after"]
    assert seen == [f"l/{i:02d}" for i in range(23)] and len(revisions) == 5
    assert revisions == sorted(revisions)
    written = client_of(started[0]).meta.put("l/new", "fresh")
    listing = client_of(started[2]).meta.list("l/")  # no waiting: linearizable
    assert [i.key for i in listing.items] == seen + ["l/new"]
    assert listing.items[-1].value == b"fresh" and listing.revision >= written.revision
    stale = client_of(started[2]).meta.list("l/", stale=True)
    assert {i.key for i in stale.items} <= set(seen) | {"l/new"}
    out = subprocess.run([sys.executable, "-m", "shoal.daemon.cli", "meta", "list",
                          "--api", f"{started[1].ip}:7947", "l/0"],
                         capture_output=True, timeout=60)  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert out.stdout.decode().splitlines() == [f"l/{i:02d} v{i}" for i in range(10)]
    for bad in ("limit=0", "limit=x", "watch=1&from=-1", "watch=1&from=0", "after=zz"):
        status, body = api_request(started[0], "GET", f"/v1/meta/?prefix=l/&{bad}")
        assert status == 400 and "error" in body, (bad, body)


def test_without_the_log_a_listing_and_a_watch_are_503(agents):
    """An agent without `--meta` refuses both, as not applied."""
    (plain,) = agents.start(1, extra=["--no-discovery"])
    poll_until(lambda: plain.members(), 10)
    for query in ("prefix=a", "prefix=a&watch=1"):
        status, body = api_request(plain, "GET", f"/v1/meta/?{query}")
        assert status == 503 and body["outcome"] == "not_applied"
    with pytest.raises(Unavailable):
        client_of(plain).meta.list("a")
