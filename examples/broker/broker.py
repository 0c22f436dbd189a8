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
- Two watches (members + controller + `brokers/`, and the key `assignment`)
  only say "something changed". Each change, and a tick every
  `refresh_s`, runs one `_refresh`, which re-reads what it needs from the
  agent: the controller, the registered brokers and the assignment. Reading
  the state again instead of applying events one by one means a missed or
  repeated event can do no harm.
- When the agent says `is_self`, the `PartitionController` writes a new
  assignment under the controller's epoch as a fenced write (controller.py).
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
from collections.abc import Callable
from typing import Any

from shoal.client import AsyncClient, AsyncSession, AsyncWatch, NotFound, ShoalError

from .assignment import Assignment
from .controller import BrokerInfo, PartitionController, read_brokers

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
        partitions: how many partitions the cluster has (same on every broker).
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
                 partitions: int = 8, refresh_s: float = 1.0, check_id: str | None = None,
                 session_ttl_s: float = 3.0, check_interval_s: float = 1.0) -> None:  # fmt: skip
        self.id = broker_id
        self.check_id = check_id or f"broker-{broker_id}"
        self.session_ttl_s = session_ttl_s
        self.check_interval_s = check_interval_s
        self.session: AsyncSession | None = None  # the one the key was written with
        self._ticked_at = 0.0  # loop time of the health loop's last turn
        self.host = host
        self.port = port
        self.partitions = partitions
        self.refresh_s = refresh_s
        self.client = AsyncClient(addr=agent, timeout=2.0)
        self.controller = PartitionController(self.client, partitions)
        self.assignment: Assignment | None = None
        self._version = (0, 0)  # of the assignment in force: (fence epoch, HLC)
        self.brokers: dict[str, BrokerInfo] = {}
        self.logs: dict[int, list[Any]] = {}  # only for the partitions led here
        self.connected = False  # the last refresh reached the agent
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
            asyncio.create_task(self._follow(self._assignment_events)),
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

    def _assignment_events(self) -> AsyncWatch[Any]:
        return self.client.kv.watch(prefix="assignment")

    # -- coordination -----------------------------------------------------------

    async def _refresh(self) -> None:
        """Re-read the cluster from the agent; register, act as controller, apply."""
        controller = await self.client.controller()
        self.brokers = await read_brokers(self.client)
        mine, session = self.brokers.get(self.id), self.session
        if mine is None or session is None or session.lost or mine.session != session.id:
            await self._register()
        current, version = await self._read_assignment()
        epoch = controller.epoch if controller.is_self else None
        if epoch is not None and await self.controller.reconcile(epoch, self.brokers, current):
            current, version = await self._read_assignment()  # the one written, its version
        if not self.connected:
            log.info("agent reachable: serving again")
        self.connected = True
        self._apply(current, version)

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

    async def _read_assignment(self) -> tuple[Assignment | None, tuple[int, int]]:
        """The assignment this agent holds, and its version: (fence epoch, HLC),
        the order in which every replica ranks fenced versions."""
        try:
            kv = await self.client.kv.get("assignment")
        except NotFound:
            return None, (0, 0)
        try:
            return Assignment.decode(kv.value), (kv.epoch, kv.hlc)
        except ValueError as exc:
            log.warning("ignoring the key assignment: %s", exc)
            return None, (0, 0)

    def _apply(self, new: Assignment | None, version: tuple[int, int]) -> None:
        """Make `new` the assignment in force, if it is newer than the one in
        force (a freshly restarted agent may still hold an older one)."""
        if new is None or version <= self._version:
            return
        old, self.assignment, self._version = self.assignment, new, version
        before = set(old.led_by(self.id)) if old is not None else set()
        after = set(new.led_by(self.id))
        for p in before - after:
            del self.logs[p]
        for p in after - before:
            self.logs[p] = []
        if old is None or (old.epoch, old.leaders) != (new.epoch, new.leaders):
            log.info("assignment of epoch %d in force: leading %s", new.epoch, sorted(after))

    # -- the line protocol ------------------------------------------------------

    async def _serve_connection(self, reader: asyncio.StreamReader,
                                writer: asyncio.StreamWriter) -> None:  # fmt: skip
        try:
            while line := await reader.readline():
                writer.write(json.dumps(self.answer(line)).encode() + b"\n")
                await writer.drain()
        except (ConnectionError, ValueError):
            pass  # ValueError: a line over the stream limit
        finally:
            writer.close()

    def answer(self, line: bytes) -> dict[str, Any]:
        """The answer to one request line (see README.md for the protocol)."""
        try:
            request = json.loads(line)
            op = request["op"]
        except (ValueError, TypeError, KeyError):
            return {"error": "bad_request", "detail": "one JSON object with an 'op' per line"}
        if op == "status":
            return self._status()
        if op not in ("produce", "fetch"):
            return {"error": "bad_request", "detail": f"unknown op {op!r}"}
        partition = request.get("partition")
        if not isinstance(partition, int) or not 0 <= partition < self.partitions:
            return {"error": "bad_request", "detail": f"partition must be 0..{self.partitions - 1}"}
        refused = self._refusal(partition)
        if refused is not None:
            return refused
        entries = self.logs[partition]
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

    def _refusal(self, partition: int) -> dict[str, Any] | None:
        """Why this broker does not serve `partition` now, or None if it does."""
        if not self.connected or self.assignment is None:
            return {"error": "unavailable", "detail": "no assignment in force here"}
        if self.session is None or self.session.lost:
            return {"error": "unavailable", "detail": "not registered (no live session)"}
        if asyncio.get_running_loop().time() - self._ticked_at > self.session_ttl_s:
            return {"error": "unavailable", "detail": "stopped beyond the session's TTL"}
        leader = self.assignment.leaders.get(partition)
        if leader == self.id:
            return None
        info = self.brokers.get(leader) if leader is not None else None
        return {"error": "not_leader", "leader": leader,
                "address": info.address if info is not None else None}  # fmt: skip

    def _status(self) -> dict[str, Any]:
        a = self.assignment
        s = self.session
        return {"ok": True, "id": self.id, "connected": self.connected,
                "session": s.id if s is not None and not s.lost else None,
                "epoch": a.epoch if a is not None else None,
                "leaders": {str(p): b for p, b in sorted(a.leaders.items())} if a else {},
                "leading": sorted(self.logs) if self.connected else [],
                "brokers": {b.id: b.address for b in self.brokers.values()}}  # fmt: skip
