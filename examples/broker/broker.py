"""One broker: a TCP service for produce/fetch, coordinated through shoal.

Theory of operation. A broker runs beside a shoal agent and talks to it
only through `shoal.client.AsyncClient`:

- It registers through a SESSION of its own: the key `brokers/<id>` =
  {"id", "host", "port", "session"} is written with the session, which the
  client renews in the background (every TTL/3). When the broker process
  dies or hangs, the renewals stop and the agent deletes the key on every
  replica after the TTL; when its agent fails, the key goes with the
  agent's member. Nobody has to clean up after a crash.
- It keeps a TTL check of its agent passing (`check_pass` every
  `check_interval_s` while its event loop runs), and the session is bound
  to that check: a hung broker's check goes critical, which ends the
  session, and its member's health (the worst of its checks, gossiped)
  tells every controller not to give it partitions.
- A lost session (a renewal answered 404: it expired, its check went
  critical, or the agent restarted) wakes a refresh, which opens a NEW
  session and registers again. Until then the broker serves nothing.
- Two watches (members + controller + `brokers/`, and the kv key
  `metadata-changed`, which a broker rings after each change it makes to
  the log) only say "something changed". Each change, and a tick every
  `refresh_s`, runs one `_refresh`, which re-reads what it needs from the
  agent: the controller and the registered brokers (kv), the topics and the
  assignment (the metadata log, read linearizably). Reading the state
  again instead of applying events one by one means a missed or repeated
  event can do no harm.
- When the agent says `is_self`, the `PartitionController` writes a new
  assignment to the metadata log with compare-and-set (controller.py).
- `create_topic` adds a topic to the key `topics` with compare-and-set
  (metadata.py); the controller then gives its partitions leaders.
- The broker serves produce and fetch for the partitions the assignment in
  force gives it, and answers `not_leader` (with the leader's address) for
  the others.
- When its agent stops answering, the broker stops serving at once
  (`unavailable`): its partitions are about to move, since its key goes
  with its agent. A long poll held open on the agent breaks the moment the
  agent dies, so this happens before the agent's peers suspect it. The
  broker serves again when a refresh succeeds.
- A broker that finds it was stopped (SIGSTOP, a swapped-out machine)
  longer than its session's TTL knows the session and its partitions are
  gone: it serves nothing until a refresh has registered it again and read
  the assignment in force, so it does not answer for partitions that moved
  while it slept.

Logs live in memory only. There are no replicas: a partition that moves
starts empty on its new leader (offset 0), and the `epoch` in every answer
tells a consumer that the log it reads was started under a new assignment.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import uuid
from collections.abc import Callable
from typing import Any

from shoal.client import AsyncClient, AsyncSession, AsyncWatch, NotFound, ShoalError

from .assignment import Assignment, Part, part_name, valid_topic
from .controller import BrokerInfo, PartitionController, read_brokers
from .metadata import (
    DOORBELL,
    Topic,
    check_create,
    create_topic,
    read_assignment,
    read_topics,
    ring,
)

__all__ = ["Broker"]

log = logging.getLogger("broker")

FETCH_MAX = 100  # messages per fetch answer, at most


class Broker:
    """A broker process's state and its two services (TCP and shoal).

    Args:
        broker_id: unique name of this broker (the key `brokers/<id>`).
        host: the address clients reach this broker at.
        port: its TCP port.
        agent: the local shoal agent, "ADDR:PORT" or "unix:/path".
        refresh_s: re-read the cluster at least this often (the watches
            wake a refresh sooner), and retry this often without an agent.
        check_id: the agent's TTL check this broker keeps passing, and
            binds its session to (default "broker-<id>"; the agent's config
            file declares it, `[[checks]] kind = "ttl"`).
        session_ttl_s: the session's TTL: how long after the broker dies or
            hangs its key stays registered.
        check_interval_s: how often the broker reports its check passing
            (well inside the check's `ttl_s`).
    """

    def __init__(self, broker_id: str, host: str, port: int, agent: str,
                 refresh_s: float = 1.0, check_id: str | None = None,
                 session_ttl_s: float = 3.0, check_interval_s: float = 1.0) -> None:  # fmt: skip
        self.id = broker_id
        self.check_id = check_id or f"broker-{broker_id}"
        self.session_ttl_s = session_ttl_s
        self.check_interval_s = check_interval_s
        self.session: AsyncSession | None = None  # the one the key was written with
        self._ticked_at = 0.0  # loop time of the health loop's last turn
        self.host = host
        self.port = port
        self.refresh_s = refresh_s
        self.client = AsyncClient(addr=agent, timeout=2.0)
        # The metadata log's calls may wait for the controller (a write's
        # answer within 3 s, docs/metadata.md): a client of their own.
        self.meta = AsyncClient(addr=agent, timeout=5.0)
        self.controller = PartitionController(self.meta)
        self.topics: dict[str, Topic] = {}
        self.assignment: Assignment | None = None
        self._revisions = (0, 0)  # mod revisions of the topics and assignment in force
        self.brokers: dict[str, BrokerInfo] = {}
        self.logs: dict[Part, list[Any]] = {}  # only for the partitions led here
        self.connected = False  # the last refresh reached the agent
        self.meta_readable = False  # the last refresh read the metadata log
        self._changed = asyncio.Event()

    # -- lifecycle --------------------------------------------------------------

    async def run(self, stop: asyncio.Event) -> None:
        """Serve until `stop` is set; then withdraw the registration."""
        server = await asyncio.start_server(self._serve_connection, self.host, self.port)
        log.info("broker %s listening on %s:%d", self.id, self.host, self.port)
        tasks = [
            asyncio.create_task(self._report_health()),
            asyncio.create_task(self._refresh_loop()),
            asyncio.create_task(self._hold_agent()),
            asyncio.create_task(self._follow(self._cluster_events)),
            asyncio.create_task(self._follow(self._doorbell)),
        ]
        try:
            await stop.wait()
        finally:
            server.close()
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            with contextlib.suppress(ShoalError):
                await self._withdraw()  # move partitions now
            await self.client.close()
            await self.meta.close()
            await server.wait_closed()

    async def _refresh_loop(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), self.refresh_s)
            self._changed.clear()
            try:
                await self._refresh()
            except ShoalError as exc:
                self._lose_agent(exc)

    async def _hold_agent(self) -> None:
        """Keep one long poll open on the agent (a wait for a new controller).

        A killed agent's connections break at once, so this notices a dead
        agent within milliseconds, before its peers' failure detector does,
        and the broker stops serving before its partitions are given away.
        """
        epoch: int | None = None
        while True:
            try:
                epoch = (await self.client.wait_controller(after_epoch=epoch, timeout=60.0)).epoch
                self._changed.set()
            except TimeoutError:
                continue
            except ShoalError as exc:
                self._lose_agent(exc)
                await asyncio.sleep(self.refresh_s)  # the refresh loop says when it is back

    async def _report_health(self) -> None:
        """Keep the TTL check passing while this event loop runs.

        A turn that comes more than a session TTL after the last one means
        the process was stopped or starved that long: its session has ended
        (its check went critical, its renewals stopped) and its partitions
        have moved. It serves nothing until a refresh registers it again.
        """
        loop = asyncio.get_running_loop()
        self._ticked_at = loop.time()
        said_missing = False
        while True:
            now = loop.time()
            if now - self._ticked_at > self.session_ttl_s:
                log.warning("this broker was stopped for %.1f s, beyond its session's TTL: "
                            "serving nothing until it has registered again",
                            now - self._ticked_at)  # fmt: skip
                self.connected = False
                self._changed.set()
            self._ticked_at = now
            try:
                async with asyncio.timeout(self.check_interval_s):
                    await self.client.check_pass(self.check_id, "serving")
            except NotFound:
                if not said_missing:  # a SIGHUP of the agent may add it: keep trying
                    log.error('the agent has no check %r: declare it in its config file '
                              '([[checks]] kind = "ttl")', self.check_id)  # fmt: skip
                said_missing = True
            except (ShoalError, TimeoutError):
                pass  # no agent: the refresh loop and the long poll say so
            await asyncio.sleep(self.check_interval_s)

    def _lose_agent(self, exc: ShoalError) -> None:
        if self.connected:
            log.warning("agent unreachable (%s): serving nothing until it answers", exc)
        self.connected = False

    async def _follow(self, events: Callable[[], AsyncWatch[Any]]) -> None:
        """Turn every event of a watch into a refresh; restart a watch that fails."""
        while True:
            try:
                async with events() as watch:
                    async for _ in watch:
                        self._changed.set()
            except ShoalError:
                pass
            self._changed.set()
            await asyncio.sleep(self.refresh_s)  # the agent is gone; the refresh loop says so

    def _cluster_events(self) -> AsyncWatch[Any]:
        return self.client.watch(topics=("members", "controller", "kv"), prefix="brokers/")

    def _doorbell(self) -> AsyncWatch[Any]:
        return self.client.kv.watch(prefix=DOORBELL)

    # -- coordination -----------------------------------------------------------

    async def _refresh(self) -> None:
        """Re-read the cluster from the agent; register, act as controller, apply."""
        controller = await self.client.controller()
        self.brokers = await read_brokers(self.client)
        mine, session = self.brokers.get(self.id), self.session
        if mine is None or session is None or session.lost or mine.session != session.id:
            await self._register()
        if not self.connected:
            log.info("agent reachable: serving again")
        self.connected = True
        try:
            # A read is safe to give up: one that waits on a controller that
            # just died would hold up the refresh after the next election.
            async with asyncio.timeout(self.refresh_s):
                topics, topics_revision = await read_topics(self.meta)
                current, revision = await read_assignment(self.meta)
            if controller.is_self and controller.epoch is not None:
                current, revision = await self.controller.reconcile(
                    controller.epoch, self.brokers, topics, current, revision)  # fmt: skip
        except (ShoalError, TimeoutError) as exc:  # no controller serves reads now
            if self.meta_readable:
                log.warning("metadata log unreadable (%s): keeping what is in force",
                            exc or "no answer in time")  # fmt: skip
            self.meta_readable = False
            return
        self.meta_readable = True
        self._apply(topics, topics_revision, current, revision)

    async def _register(self) -> None:
        """Write `brokers/<id>` with a live session, opening a new one if the
        last is lost (or the agent no longer holds it)."""
        if self.session is None or self.session.lost:
            await self._open_session()
        try:
            await self._put_registration()
        except NotFound:  # the agent restarted, or the session expired just now
            await self._open_session()
            await self._put_registration()

    async def _open_session(self) -> None:
        if self.session is not None:
            await self.session.close()  # a lost one: nothing to send
        # The check starts critical on the agent, and a session bound to a
        # critical check is refused: report it passing first.
        await self.client.check_pass(self.check_id, "registering")
        self.session = self.client.session(
            ttl=self.session_ttl_s, name=f"broker-{self.id}", checks=(self.check_id,),
            on_lost=self._session_lost)  # fmt: skip
        await self.session.open()
        log.info("session %s opened (ttl %g s, bound to check %s)", self.session.id,
                 self.session_ttl_s, self.check_id)  # fmt: skip

    async def _put_registration(self) -> None:
        assert self.session is not None
        doc = {"id": self.id, "host": self.host, "port": self.port, "session": self.session.id}
        await self.session.put(f"brokers/{self.id}", json.dumps(doc))
        self.brokers[self.id] = BrokerInfo(self.id, self.host, self.port, None, self.session.id)
        log.info("registered as brokers/%s under session %s", self.id, self.session.id)

    def _session_lost(self, session: AsyncSession) -> None:
        log.warning("session %s lost (%s): registering again", session.id, session.reason)
        self._changed.set()

    async def _withdraw(self) -> None:
        """Close the session (the agent deletes its key at once)."""
        if self.session is not None and not self.session.lost:
            await self.session.close()
        else:
            await self.client.kv.delete(f"brokers/{self.id}")

    def _apply(self, topics: dict[str, Topic], topics_revision: int, new: Assignment | None,
               revision: int) -> None:  # fmt: skip
        """Make `topics` and `new` the ones in force, each if it is at a
        later revision of the log than the one in force."""
        if topics_revision > self._revisions[0]:
            self.topics = topics
            self._revisions = (topics_revision, self._revisions[1])
        if new is None or revision <= self._revisions[1]:
            return
        old, self.assignment = self.assignment, new
        self._revisions = (self._revisions[0], revision)
        before = set(old.led_by(self.id)) if old is not None else set()
        after = set(new.led_by(self.id))
        for p in before - after:
            del self.logs[p]
        for p in after - before:
            self.logs[p] = []
        if old is None or (old.epoch, old.leaders) != (new.epoch, new.leaders):
            log.info("assignment of epoch %d (revision %d) in force: leading %s", new.epoch,
                     revision, " ".join(map(part_name, sorted(after))))  # fmt: skip

    # -- the line protocol ------------------------------------------------------

    async def _serve_connection(self, reader: asyncio.StreamReader,
                                writer: asyncio.StreamWriter) -> None:  # fmt: skip
        try:
            while line := await reader.readline():
                answer = self.answer(line)
                if answer.get("op") == "create_topic":  # the only one that waits
                    answer = await self._create_topic(answer)
                writer.write(json.dumps(answer).encode() + b"\n")
                await writer.drain()
        except (ConnectionError, ValueError):
            pass  # ValueError: a line over the stream limit
        finally:
            writer.close()

    def answer(self, line: bytes) -> dict[str, Any]:
        """The answer to one request line (see README.md for the protocol);
        a valid `create_topic` request is returned as it is, to be run."""
        try:
            request = json.loads(line)
            op = request["op"]
        except (ValueError, TypeError, KeyError):
            return {"error": "bad_request", "detail": "one JSON object with an 'op' per line"}
        if op == "status":
            return self._status()
        if op == "create_topic":
            return check_create(request)
        if op not in ("produce", "fetch"):
            return {"error": "bad_request", "detail": f"unknown op {op!r}"}
        topic, partition = request.get("topic"), request.get("partition")
        if not valid_topic(topic):
            return {"error": "bad_request", "detail": "topic: 1-100 of A-Z a-z 0-9 . _ -"}
        if topic not in self.topics:
            return {"error": "no_such_topic", "detail": f"no topic {topic!r} known here"}
        count = self.topics[topic].partitions
        if not isinstance(partition, int) or not 0 <= partition < count:
            return {"error": "bad_request", "detail": f"partition must be 0..{count - 1}"}
        refused = self._refusal((topic, partition))
        if refused is not None:
            return refused
        entries = self.logs[topic, partition]
        epoch = self.assignment.epoch if self.assignment is not None else 0
        if op == "produce":
            entries.append(request.get("value"))
            return {"ok": True, "offset": len(entries) - 1, "epoch": epoch}
        offset = request.get("offset", 0)
        if not isinstance(offset, int) or offset < 0:
            return {"error": "bad_request", "detail": "offset must be an int >= 0"}
        chunk = entries[offset : offset + FETCH_MAX]
        messages = [{"offset": offset + i, "value": v} for i, v in enumerate(chunk)]
        return {"ok": True, "messages": messages, "end": len(entries), "epoch": epoch}

    async def _create_topic(self, request: dict[str, Any]) -> dict[str, Any]:
        token = request.get("token") or uuid.uuid4().hex
        answer = await create_topic(self.meta, request["topic"], request["partitions"], token,
                                    float(request.get("timeout", 5.0)))  # fmt: skip
        if answer.get("ok"):
            log.info("topic %s created (%d partitions)", answer["topic"], answer["partitions"])
            await ring(self.client, answer["revision"])  # the controller gives it leaders
        return {**answer, "token": token}

    def _refusal(self, part: Part) -> dict[str, Any] | None:
        """Why this broker does not serve `part` now, or None if it does."""
        if not self.connected or self.assignment is None:
            return {"error": "unavailable", "detail": "no assignment in force here"}
        if self.session is None or self.session.lost:
            return {"error": "unavailable", "detail": "not registered (no live session)"}
        if asyncio.get_running_loop().time() - self._ticked_at > self.session_ttl_s:
            return {"error": "unavailable", "detail": "stopped beyond the session's TTL"}
        leader = self.assignment.leaders.get(part)
        if leader is None:
            return {"error": "unavailable", "detail": "no leader assigned yet"}
        if leader == self.id:
            return None
        info = self.brokers.get(leader)
        return {"error": "not_leader", "leader": leader,
                "address": info.address if info is not None else None}  # fmt: skip

    def _status(self) -> dict[str, Any]:
        a = self.assignment
        s = self.session
        return {"ok": True, "id": self.id, "connected": self.connected,
                "meta_readable": self.meta_readable,
                "session": s.id if s is not None and not s.lost else None,
                "topics": {n: t.partitions for n, t in sorted(self.topics.items())},
                "epoch": a.epoch if a is not None else None,
                "revision": self._revisions[1] if a is not None else None,
                "leaders": {part_name(p): b for p, b in sorted(a.leaders.items())} if a else {},
                "leading": [part_name(p) for p in sorted(self.logs)] if self.connected else [],
                "brokers": {b.id: b.address for b in self.brokers.values()}}  # fmt: skip
