"""Publishing: what the agent does with each event the cores emit.

In order: a structlog line, a history row, the configured event handlers
(`event_handlers`, `controller_handler`), systemd's STATUS line, every
`/v1/events` stream, the numbered change log of the `/v1/watch` streams
(api/changes.py; key changes join it from `publish_records`), and the
blocking `/v1/controller` callers. A finished
join attempt is then handed back to the agent (its waiters and the
discovery throttle). Nothing here blocks the loop: the history log is
written from its own thread, handlers run as subprocesses, and the streams'
queues are bounded.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Coroutine
from typing import Any

import structlog

from shoal.daemon.api.changes import ChangeLog, record_json
from shoal.daemon.api.watch import ControllerWatch, Watchers
from shoal.daemon.config import AgentConfig
from shoal.daemon.handlers import run_command
from shoal.daemon.health import HEALTH_TAG, PASSING
from shoal.daemon.systemd import Notifier
from shoal.election.events import (
    ControllerChanged,
    ControllerElected,
    ControllerLost,
    VoterReplaced,
    VotersChanged,
    election_fields,
)
from shoal.membership.events import JoinCompleted, event_fields
from shoal.node.composition import ShoalNode
from shoal.node.features import FeatureLevelChanged, FeatureLevelUnsupported, feature_fields
from shoal.node.history import Observer, history_row
from shoal.node.status import summary
from shoal.node.wiped import WipedVoters
from shoal.storage.history import HistoryWriter
from shoal.storage.records import Record
from shoal.storage.store import RecordChange
from shoal.storage.syncstate import SyncCompleted

log = structlog.get_logger("shoal")
ELECTION_EVENTS = (
    ControllerElected,
    ControllerLost,
    ControllerChanged,
    VotersChanged,
    VoterReplaced,
)
HANDLER_TIMEOUT_S = 30.0


class Publisher:
    """Publishes one node's events (see the module docstring)."""

    def __init__(self, config: Callable[[], AgentConfig], node: ShoalNode, observer: Observer,
                 history: HistoryWriter, notifier: Notifier,
                 on_join: Callable[[JoinCompleted], None], run: str) -> None:  # fmt: skip
        self._config = config  # read at each event: SIGHUP may replace it
        self._node = node
        self._observer = observer
        self.history = history
        self._notifier = notifier
        self._on_join = on_join
        self.watchers = Watchers()
        self.controller_watch = ControllerWatch()
        self.changes = ChangeLog(run)
        self._health: dict[str, str] = {}  # member -> its last health (shoal:health tag)
        self._status = ""
        # Told of a feature level above this build's (the agent stops).
        self.on_feature_unsupported: Callable[[FeatureLevelUnsupported], None] | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        # Members back with a new data directory (`GET /v1/members`).
        self.wiped = WipedVoters()
        self.wiped.saw(node.election.voters)

    def publish(self, event: Any) -> None:
        """Publish one event (see the module docstring)."""
        if isinstance(event, SyncCompleted):
            _log_sync(event)
            return
        if isinstance(event, FeatureLevelChanged | FeatureLevelUnsupported):
            self._publish_feature(event)
            return
        if isinstance(event, ELECTION_EVENTS):
            record = election_fields(event)
            self.controller_watch.changed(event)
            if isinstance(event, VotersChanged):
                self.wiped.saw(event.config)
        else:
            record = event_fields(event)
        cfg = self._config()
        record["at_ms"] = at_ms = int(time.time() * 1000)
        record["observer"] = cfg.node_name
        row = history_row(self._observer, at_ms, event)
        if row is not None:
            self.history.write(row)
        kind = str(record.pop("type"))
        # A voter's disk was replaced: an operator should look (docs/operations.md).
        (log.warning if isinstance(event, VoterReplaced) else log.info)(kind, **record)
        record["type"] = kind
        self._run_event_handlers(cfg, kind, record)
        self.update_status()
        self.watchers.offer(record)
        if isinstance(event, JoinCompleted):
            self._on_join(event)
        else:
            topic = "controller" if isinstance(event, ELECTION_EVENTS) else "members"
            self.changes.append(topic, record, _same)
            if topic == "members" and isinstance(record.get("tags"), dict):
                self._note_health(cfg, record)

    def _publish_feature(self, event: FeatureLevelChanged | FeatureLevelUnsupported) -> None:
        """A feature-level change: logged, streamed to watchers; a level this
        build cannot follow stops the agent (`on_feature_unsupported`)."""
        record = feature_fields(event)
        kind = str(record.pop("type"))
        if isinstance(event, FeatureLevelUnsupported):
            log.error(kind, **record)
            if self.on_feature_unsupported is not None:
                self.on_feature_unsupported(event)
        else:
            log.info(kind, **record)
        record["type"] = kind
        record["at_ms"] = int(time.time() * 1000)
        self.watchers.offer(record)

    def _note_health(self, cfg: AgentConfig, record: dict[str, Any]) -> None:
        """Publish `member-health-changed` when a member's health tag
        (daemon/health.py) differs from what it was."""
        name = str(record.get("name"))
        health = record["tags"].get(HEALTH_TAG, PASSING)
        previous = self._health.get(name)
        self._health[name] = health
        if previous is None or previous == health:
            return
        changed = {"type": "member-health-changed", "name": name, "health": health,
                   "previous": previous, "status": record.get("status"),
                   "address": record.get("address"), "at_ms": record["at_ms"],
                   "observer": record["observer"]}  # fmt: skip
        log.info("member-health-changed", **{k: v for k, v in changed.items() if k != "type"})
        self._run_event_handlers(cfg, "member-health-changed", changed)
        self.watchers.offer(changed)
        self.changes.append("members", changed, _same)

    def publish_records(self, changes: list[RecordChange],
                        visible: Callable[[Record], bool]) -> None:  # fmt: skip
        """Number the key changes since the last call (`ShoalNode.take_changes`):
        a put when the record is visible now, a delete when it is not and
        its previous version was (a tombstone, or an ephemeral key hidden
        because its owner failed or left)."""
        if not changes:
            return
        append, render = self.changes.append, self._render_record
        for rec, was_visible, reason in changes:
            if rec.key[:1] == b"\x00":  # internal keys: user events (services/delivery.py)
                continue
            if rec.value is not None and visible(rec):
                append("kv", (rec, "put", reason), render, rec.key, len(rec.value))
            elif was_visible:
                append("kv", (rec, "delete", reason), render, rec.key)

    def publish_user(self, record: dict[str, Any]) -> None:
        """A user event is being delivered here: log it and give it to the
        `/v1/events` and `/v1/watch` streams (topic `events`)."""
        record["at_ms"] = int(time.time() * 1000)
        record["observer"] = self._config().node_name
        log.info("user event", **{k: v for k, v in record.items()
                                  if k not in ("type", "payload_base64")})  # fmt: skip
        self.watchers.offer(record)
        self.changes.append("events", record, _same)

    def _render_record(self, change: tuple[Record, str, str]) -> dict[str, Any]:
        rec, kind, reason = change
        name_of = self._node.name_of
        out = record_json(rec, name_of(rec.writer), name_of(rec.owner) if rec.owner else None)
        if kind == "delete" and rec.value is not None:  # hidden, not deleted: no value shown
            for field in ("value", "value_base64"):
                out.pop(field, None)
            out["deleted"] = True
        return {"type": kind, **out, "reason": reason}

    def status_text(self) -> str:
        """systemd's STATUS line: members alive and the controller."""
        s = summary(self._node)
        controller = f"controller {s.controller} (epoch {s.epoch})" if s.controller is not None \
            else "no controller"  # fmt: skip
        return f"{s.live_peers + 1}/{s.known} members alive, {controller}"

    def update_status(self) -> None:
        """Send the STATUS line to systemd if it changed."""
        if self._notifier.enabled:
            text = self.status_text()
            if text != self._status:
                self._status = text
                self._notifier.notify(f"STATUS={text}")

    def cancel(self) -> None:
        """Stop the handlers still running (the agent is exiting)."""
        for task in self._tasks:
            task.cancel()

    def _run_event_handlers(self, cfg: AgentConfig, kind: str, record: dict[str, Any]) -> None:
        handlers = list(cfg.event_handlers)
        if cfg.controller_handler:  # shorthand for the two controller events
            command = cfg.controller_handler
            handlers += [("controller-elected", command), ("controller-lost", command)]
        for event_filter, command in handlers:
            if event_filter not in ("", kind):
                continue
            me = cfg.node_name
            env = {"SHOAL_EVENT": kind, "SHOAL_SELF_NAME": me, "SHOAL_NODE": me}
            for key in (
                "name",
                "address",
                "status",
                "incarnation",
                "controller",
                "epoch",
                "health",
            ):
                if key in record:
                    env[f"SHOAL_{key.upper()}"] = str(record[key])
            self._spawn(run_handler(command, env, dict(record)))

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)


def _same(record: dict[str, Any]) -> dict[str, Any]:
    return record


def _log_sync(event: SyncCompleted) -> None:
    peer = f"{event.peer[0]}:{event.peer[1]}"
    if not event.ok:
        log.info("anti-entropy session failed", peer=peer)
    elif event.sent or event.received:
        log.info("anti-entropy repaired records", peer=peer, sent=event.sent,
                 received=event.received, rounds=event.rounds)  # fmt: skip
    else:
        log.debug("anti-entropy: in sync", peer=peer)


async def run_handler(command: str, env: dict[str, str], record: dict[str, Any]) -> None:
    """Run `command` in a shell with the event in `env` and as JSON on
    stdin (daemon/handlers.py); log its output; a failure or a timeout is
    logged, never fatal."""
    try:
        done = await run_command(command, env, json.dumps(record).encode(), HANDLER_TIMEOUT_S)
    except OSError as exc:
        log.error("event handler could not start", command=command, error=str(exc))
        return
    if done.returncode is None:
        log.error("event handler timed out", command=command, timeout_s=HANDLER_TIMEOUT_S)
        return
    level = log.info if done.returncode == 0 else log.error
    level("event handler ran", command=command, exit_code=done.returncode,
          output=done.stdout.decode(errors="replace")[-2000:])  # fmt: skip
