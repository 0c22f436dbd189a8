"""User events (`shoal event NAME PAYLOAD`), delivered at least once.

Serf gossips a user event a few times and forgets it: a member that was
down or cut off never hears of it, a payload over one datagram waits for
the 30 s push-pull, and a burst is coalesced. Here an event is a record of
the replicated store (storage/store.py, `EVENT_PREFIX`), under a key that
names its origin and a sequence number the origin persists (synced) before
sending. So it travels as every write does: pushed at once to every member
(by stream when it does not fit a datagram), and repaired by anti-entropy
for whoever missed it, including a member that comes back within
`store.event_retention_s` (one hour by default), after which every replica
drops it.

Each agent runs the matching handlers (`user:NAME=COMMAND`, `user=COMMAND`,
or an all-events handler) once per event id: handlers run concurrently (at
most `HANDLER_CONCURRENCY`), each with a timeout, the payload on stdin, and
the id in `SHOAL_EVENT_ID` (Serf's `SERF_EVENT=user`, `SERF_USER_EVENT` and
`SERF_USER_LTIME` too). The id is recorded as delivered (synced, in the
data directory) once its handlers have finished, so an event is never run
twice for one id unless the agent crashed while a handler ran (then it runs
again at the next start: handlers get the id to deduplicate that case).
Events not yet delivered are looked for again every `RESCAN_S`, so a full
queue delays an event and never drops it; on the sending agent a full
queue is a 429.

Which event is due, and when, is the pure delivery ledger's
(services/delivery.py, run by the simulator too): it hands an event out as
`UserEventReceived` in the node's output and is told when its handlers
finished. This module is the IO: the handler processes and the ledger's
writes to the data directory.
"""

from __future__ import annotations

import asyncio
import base64
import time
from collections.abc import Callable
from typing import Any

import structlog

from shoal.daemon.config import AgentConfig
from shoal.daemon.handlers import run_command
from shoal.node.composition import ShoalNode
from shoal.services.delivery import (
    QUEUE_MAX,
    ForgetDelivered,
    PersistDelivered,
    decode_event,
    encode_event,
    event_id,
    event_key,
)
from shoal.storage.engine import Engine
from shoal.storage.records import Record

HANDLER_CONCURRENCY = 8
HANDLER_TIMEOUT_S = 30.0
_SEQ = b"user-event-seq"
# Sequence numbers are reserved this many at a time (one synced write per
# block, not per event: a synced write on the loop cost the sender ~5 ms per
# event). After a crash the next block starts above the reserved one, so an
# id is never reused; numbers may be skipped.
_SEQ_BLOCK = 1000
_DONE = b"user-event-done/"
log = structlog.get_logger("shoal")


class QueueFull(Exception):
    """This agent's handler queue is full: the sender should retry (429)."""


class UserEvents:
    """Sends this agent's user events and runs the handlers of everyone's.

    Args:
        engine: the data directory's database (sequence, delivered ids).
        node: the agent's node; its delivery ledger is turned on here.
        config: the running configuration (handlers change on reload).
        publish: takes the JSON record of an event for logs and streams.
        flush: the agent's flush, after a write.
        loop: the agent's loop.
    """

    def __init__(self, engine: Engine, node: ShoalNode, config: Callable[[], AgentConfig],
                 publish: Callable[[dict[str, Any]], None], flush: Callable[[], None],
                 loop: asyncio.AbstractEventLoop) -> None:  # fmt: skip
        self._engine = engine
        self._node = node
        self._config = config
        self._publish = publish
        self._flush = flush
        self._loop = loop
        self._seq = self._reserved = int(engine.local_get(_SEQ) or b"0")
        done = {name[len(_DONE) :]: int(value or b"0")
                for name, value in engine.local_scan(_DONE)}  # fmt: skip
        self._ledger = node.deliver_events(done, loop.time())
        self._limit = asyncio.Semaphore(HANDLER_CONCURRENCY)
        self._tasks: set[asyncio.Task[None]] = set()
        self.sent = 0
        self.handler_failures = 0

    @property
    def delivered(self) -> int:
        """Events whose handlers finished here, in this run."""
        return self._ledger.counters.delivered

    def send(self, name: str, payload: bytes) -> tuple[str, Record]:
        """Fire event `name` with `payload` to every member (this one too).

        Raises:
            QueueFull: this agent's handler queue is full (429).
        """
        if self._ledger.full():
            raise QueueFull(f"{QUEUE_MAX} events wait for handlers on this agent; retry")
        self._seq += 1
        if self._seq > self._reserved:  # synced before any id of the block is used
            self._reserved = self._seq + _SEQ_BLOCK - 1
            self._engine.local_put(_SEQ, b"%d" % self._reserved)
        node = self._node
        key = event_key(node.swim.ident.node_id, self._seq)
        record = node.write(key, encode_event(name, payload), self._loop.time())
        self._flush()
        self.sent += 1
        return event_id(key), record

    def deliver(self, rec: Record) -> None:
        """Run the handlers of `rec` (the ledger's `UserEventReceived`), at
        most `HANDLER_CONCURRENCY` events at a time, then tell the ledger."""
        task = self._loop.create_task(self._deliver(rec))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def persist(self, write: object) -> None:
        """Write one of the ledger's `Persist` items to the data directory
        (in a worker thread: the write is synced)."""
        if isinstance(write, PersistDelivered):
            put = self._engine.local_put
            self._loop.run_in_executor(None, put, _DONE + write.key, b"%d" % write.wall_ms)
        elif isinstance(write, ForgetDelivered):
            self._engine.local_delete([_DONE + key for key in write.keys])

    def stop(self) -> None:
        """Stop the handlers still running (their events run again at the next start)."""
        for task in self._tasks:
            task.cancel()

    async def _deliver(self, rec: Record) -> None:
        async with self._limit:
            try:
                decoded = decode_event(rec.value or b"")
                if decoded is not None:
                    await self._run(rec, *decoded)
            except asyncio.CancelledError:
                self._ledger.released(rec.key)
                raise
        self._ledger.delivered(rec.key, int(time.time() * 1000))
        self._flush()

    async def _run(self, rec: Record, name: str, payload: bytes) -> None:
        node = self._node
        origin = node.name_of(rec.writer) or rec.writer.hex()
        ident = event_id(rec.key)
        record: dict[str, Any] = {
            "type": "user",
            "name": name,
            "id": ident,
            "origin": origin,
            "payload_bytes": len(payload),
            "payload_base64": base64.b64encode(payload[:4096]).decode(),
        }
        self._publish(record)
        cfg = self._config()
        commands = [c for f, c in cfg.event_handlers if f in ("", "user", f"user:{name}")]
        me = cfg.node_name
        env = {"SHOAL_EVENT": "user", "SHOAL_USER_EVENT": name, "SHOAL_EVENT_ID": ident,
               "SHOAL_ORIGIN": origin, "SHOAL_SELF_NAME": me, "SHOAL_NODE": me,
               "SERF_EVENT": "user", "SERF_USER_EVENT": name,
               "SERF_USER_LTIME": ident.rpartition(":")[2], "SERF_SELF_NAME": me}  # fmt: skip
        await asyncio.gather(*(self._handler(c, env, payload) for c in commands))

    async def _handler(self, command: str, env: dict[str, str], payload: bytes) -> None:
        try:
            done = await run_command(command, env, payload, HANDLER_TIMEOUT_S)
        except OSError as exc:
            self.handler_failures += 1
            log.error("user event handler could not start", command=command, error=str(exc))
            return
        if done.returncode is None:
            self.handler_failures += 1
            log.error("user event handler timed out", command=command, id=env["SHOAL_EVENT_ID"])
            return
        if done.returncode:
            self.handler_failures += 1
        level = log.info if done.returncode == 0 else log.error
        level("user event handler ran", command=command, id=env["SHOAL_EVENT_ID"],
              exit_code=done.returncode,
              output=done.stdout.decode(errors="replace")[-2000:])  # fmt: skip
