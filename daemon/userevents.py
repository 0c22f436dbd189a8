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
"""

from __future__ import annotations

import asyncio
import base64
import struct
import time
from collections.abc import Callable
from typing import Any

import structlog

from shoal.daemon.config import AgentConfig
from shoal.daemon.handlers import run_command
from shoal.node.composition import ShoalNode
from shoal.storage.engine import Engine
from shoal.storage.records import Record
from shoal.storage.store import EVENT_PREFIX

MAX_PAYLOAD_BYTES = 64 * 1024
HANDLER_CONCURRENCY = 8
HANDLER_TIMEOUT_S = 30.0
QUEUE_MAX = 1024
RESCAN_S = 10.0
_SEQ = b"user-event-seq"
# Sequence numbers are reserved this many at a time (one synced write per
# block, not per event: a synced write on the loop cost the sender ~5 ms per
# event). After a crash the next block starts above the reserved one, so an
# id is never reused; numbers may be skipped.
_SEQ_BLOCK = 1000
_DONE = b"user-event-done/"
_NAME_LEN = struct.Struct(">H")
log = structlog.get_logger("shoal")


class QueueFull(Exception):
    """This agent's handler queue is full: the sender should retry (429)."""


def event_key(origin: bytes, seq: int) -> bytes:
    """The store key of event `seq` of the member with id `origin`."""
    return EVENT_PREFIX + origin.hex().encode() + b"/%020d" % seq


def event_id(key: bytes) -> str:
    """`ORIGIN-ID:SEQ` from a store key."""
    origin, _, seq = key[len(EVENT_PREFIX) :].decode().partition("/")
    return f"{origin}:{int(seq)}"


def encode_event(name: str, payload: bytes) -> bytes:
    """The stored value: the name's length, the name, the payload."""
    raw = name.encode()
    return _NAME_LEN.pack(len(raw)) + raw + payload


def decode_event(value: bytes) -> tuple[str, bytes] | None:
    """(name, payload), or None for a value that is not an event."""
    if len(value) < _NAME_LEN.size:
        return None
    (n,) = _NAME_LEN.unpack_from(value)
    try:
        name = value[_NAME_LEN.size : _NAME_LEN.size + n].decode()
    except UnicodeDecodeError:
        return None
    return name, value[_NAME_LEN.size + n :]


class UserEvents:
    """Sends this agent's user events and runs the handlers of everyone's.

    Args:
        engine: the data directory's database (sequence, delivered ids).
        node: a callable giving the agent's node.
        config: the running configuration (handlers change on reload).
        publish: takes the JSON record of an event for logs and streams.
        flush: the agent's flush, after a write.
        loop: the agent's loop.
    """

    def __init__(self, engine: Engine, node: Callable[[], ShoalNode],
                 config: Callable[[], AgentConfig], publish: Callable[[dict[str, Any]], None],
                 flush: Callable[[], None], loop: asyncio.AbstractEventLoop) -> None:  # fmt: skip
        self._engine = engine
        self._node = node
        self._config = config
        self._publish = publish
        self._flush = flush
        self._loop = loop
        self._seq = self._reserved = int(engine.local_get(_SEQ) or b"0")
        self._done: dict[bytes, int] = {name[len(_DONE) :]: int(value or b"0")
                                         for name, value in engine.local_scan(_DONE)}  # fmt: skip
        self._pending: set[bytes] = set()
        self._queue: asyncio.Queue[Record] = asyncio.Queue(QUEUE_MAX)
        self._limit = asyncio.Semaphore(HANDLER_CONCURRENCY)
        self._tasks: set[asyncio.Task[None]] = set()
        self.sent = self.delivered = self.handler_failures = 0
        self._worker = loop.create_task(self._work())
        self._rescan: asyncio.TimerHandle = loop.call_later(1.0, self.rescan)

    def send(self, name: str, payload: bytes) -> tuple[str, Record]:
        """Fire event `name` with `payload` to every member (this one too).

        Raises:
            QueueFull: this agent's handler queue is full (429).
        """
        if self._queue.full():
            raise QueueFull(f"{QUEUE_MAX} events wait for handlers on this agent; retry")
        self._seq += 1
        if self._seq > self._reserved:  # synced before any id of the block is used
            self._reserved = self._seq + _SEQ_BLOCK - 1
            self._engine.local_put(_SEQ, b"%d" % self._reserved)
        node = self._node()
        key = event_key(node.swim.ident.node_id, self._seq)
        record = node.write(key, encode_event(name, payload), self._loop.time())
        self._flush()
        self.sent += 1
        return event_id(key), record

    def offer(self, rec: Record) -> None:
        """A user event record arrived or was written here: run its handlers
        once (a full queue leaves it for the next rescan)."""
        key = rec.key
        if key in self._done or key in self._pending or rec.value is None:
            return
        try:
            self._queue.put_nowait(rec)
        except asyncio.QueueFull:
            return  # found again by `rescan`
        self._pending.add(key)

    def rescan(self) -> None:
        """Offer every stored event not delivered yet; forget delivered ids
        older than the retention."""
        self._rescan = self._loop.call_later(RESCAN_S, self.rescan)
        node = self._node()
        after = b""
        while True:
            batch = node.sync.replica.store.scan(EVENT_PREFIX, after, 1000)
            for rec in batch:
                self.offer(rec)
            if len(batch) < 1000:
                break
            after = batch[-1].key
        retention_ms = int(node.sync.config.event_retention_s * 1000)
        old = int(time.time() * 1000) - retention_ms - 600_000
        stale = [key for key, at in self._done.items() if at < old]
        for key in stale:
            del self._done[key]
        self._engine.local_delete([_DONE + key for key in stale])

    def stop(self) -> None:
        """Stop the worker, the rescans and the handlers still running."""
        self._rescan.cancel()
        self._worker.cancel()
        for task in self._tasks:
            task.cancel()

    async def _work(self) -> None:
        while True:
            rec = await self._queue.get()
            await self._limit.acquire()
            task = self._loop.create_task(self._deliver(rec))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _deliver(self, rec: Record) -> None:
        try:
            decoded = decode_event(rec.value or b"")
            if decoded is not None:
                await self._run(rec, *decoded)
            self._done[rec.key] = int(time.time() * 1000)
            await asyncio.to_thread(self._engine.local_put, _DONE + rec.key,
                                    b"%d" % self._done[rec.key])  # fmt: skip
            self.delivered += 1
        finally:
            self._pending.discard(rec.key)
            self._limit.release()

    async def _run(self, rec: Record, name: str, payload: bytes) -> None:
        node = self._node()
        origin = node.name_of(rec.writer) or rec.writer.hex()
        ident = event_id(rec.key)
        record: dict[str, Any] = {"type": "user", "name": name, "id": ident, "origin": origin,
                                  "payload_bytes": len(payload),
                                  "payload_base64": base64.b64encode(payload[:4096]).decode()}
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
