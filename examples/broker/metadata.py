"""The cluster's metadata in shoal's metadata log (docs/metadata.md).

Two keys, each read linearizably (through the controller) and changed only
with compare-and-set on the mod revision it was read at:

    topics     = {"orders": {"partitions": 3, "token": "..."}, ...}
    assignment = {"epoch": E, "leaders": {"orders/0": "b1", ...}}  (assignment.py)

A write to the log is told one of four outcomes, and each has one right
answer here:

- committed: done;
- `Conflict` (the key changed since it was read): someone else wrote;
  read again and decide again (the topic may exist now);
- `NotApplied` (nothing was appended: no controller known): retry later;
- `Unknown` (it reached a controller that may have committed it, or may
  never): read the key back; if the change is not there, retry with `cas`
  on the revision just read, so that the write can never take effect twice
  (the old attempt, if it commits after all, moves the revision and the
  retry gets a Conflict, whose re-read then finds it). A creation carries a
  token so that the re-read can tell our own topic from a namesake.
"""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass
from typing import Any

from shoal.client import AsyncClient, Conflict, NotFound, ShoalError, Unknown

from .assignment import Assignment, valid_topic

__all__ = [
    "ASSIGNMENT",
    "DOORBELL",
    "TOPICS",
    "Topic",
    "check_create",
    "create_topic",
    "read_assignment",
    "read_topics",
    "ring",
]

log = logging.getLogger("broker.metadata")

TOPICS = "topics"
ASSIGNMENT = "assignment"
# A kv key, not the truth: its watch wakes every broker's refresh at once
# after a change to the log (whose own watch is not built yet).
DOORBELL = "metadata-changed"
MAX_PARTITIONS = 1000  # per topic


@dataclass(frozen=True, slots=True)
class Topic:
    """One topic's configuration, and the token of the request that created it."""

    partitions: int
    token: str = ""


async def _read(client: AsyncClient, key: str) -> tuple[bytes | None, int]:
    """A key's value and mod revision (None, 0 when absent), linearizably.

    Raises:
        ShoalError: not read (NotApplied: no controller served it now).
    """
    try:
        held = await client.meta.get(key)
    except NotFound:
        return None, 0
    return held.value, held.mod_revision


async def read_topics(client: AsyncClient) -> tuple[dict[str, Topic], int]:
    """Every topic, and the mod revision of the key `topics`."""
    raw, revision = await _read(client, TOPICS)
    if raw is None:
        return {}, revision
    try:
        doc = json.loads(raw)
        return {str(n): Topic(int(t["partitions"]), str(t.get("token", "")))
                for n, t in doc.items()}, revision  # fmt: skip
    except (TypeError, KeyError, ValueError, AttributeError) as exc:
        log.warning("ignoring the key topics: %s", exc)
        return {}, revision


async def read_assignment(client: AsyncClient) -> tuple[Assignment | None, int]:
    """The assignment in the log, and its mod revision."""
    raw, revision = await _read(client, ASSIGNMENT)
    if raw is None:
        return None, revision
    try:
        return Assignment.decode(raw), revision
    except ValueError as exc:
        log.warning("ignoring the key assignment: %s", exc)
        return None, revision


async def ring(client: AsyncClient, revision: int) -> None:
    """Tell every broker (their watch of `metadata-changed`) to read the
    log again now rather than at its next tick; a lost ring costs a tick."""
    try:
        await client.kv.put(DOORBELL, str(revision))
    except ShoalError as exc:
        log.debug("doorbell not rung: %s", exc)


def _encode(topics: dict[str, Topic]) -> bytes:
    doc = {n: {"partitions": t.partitions, "token": t.token} for n, t in sorted(topics.items())}
    return json.dumps(doc).encode()


async def create_topic(client: AsyncClient, name: str, partitions: int, token: str,
                       timeout_s: float) -> dict[str, Any]:  # fmt: skip
    """Create a topic, retrying for up to `timeout_s`; the answer for the
    client (README.md, "The protocol"):

    - {"ok": true, ...}: committed, by this request (or an earlier request
      with the same token);
    - {"error": "exists", ...}: another request created it; refused;
    - {"error": "not_applied", ...}: nothing was written; retry;
    - {"error": "unknown", ...}: an attempt may yet be committed; ask again
      with the same token to learn which.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    maybe, pause_s, last = False, 0.05, "no attempt"
    while True:
        try:
            topics, revision = await read_topics(client)
            held = topics.get(name)
            if held is not None and held.token != token:
                return {"error": "exists", "topic": name, "partitions": held.partitions}
            if held is None:
                topics[name] = Topic(partitions, token)
                revision = (await client.meta.put(TOPICS, _encode(topics), cas=revision)).revision
            return {"ok": True, "topic": name, "partitions": topics[name].partitions,
                    "revision": revision}  # fmt: skip
        except Conflict:
            last = "changed meanwhile"  # someone else's topic: read again at once
            if loop.time() < deadline:
                continue
        except Unknown as exc:
            maybe, last = True, str(exc)  # read back on the next turn, then cas
        except ShoalError as exc:
            last = str(exc)  # NotApplied, or no agent: nothing written by this attempt
        if loop.time() + pause_s > deadline:
            break
        await asyncio.sleep(pause_s)
        pause_s = min(pause_s * 2, 0.5)
    if maybe:
        return {
            "error": "unknown",
            "topic": name,
            "detail": f"may have been created (last: {last}); ask again with the same token",
        }
    return {"error": "not_applied", "topic": name,
            "detail": f"nothing was written (last: {last}); retry"}  # fmt: skip


def check_create(request: dict[str, Any]) -> dict[str, Any]:
    """A `create_topic` request checked (then run by the caller), or the
    bad_request answer."""
    topic, partitions = request.get("topic"), request.get("partitions")
    timeout, token = request.get("timeout", 5.0), request.get("token")
    if not valid_topic(topic):
        return {"error": "bad_request", "detail": "topic: 1-100 of A-Z a-z 0-9 . _ -"}
    if isinstance(partitions, bool) or not isinstance(partitions, int) or not (
            1 <= partitions <= MAX_PARTITIONS):  # fmt: skip
        return {"error": "bad_request", "detail": f"partitions must be 1..{MAX_PARTITIONS}"}
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not 0 < timeout <= 60:
        return {"error": "bad_request", "detail": "timeout must be seconds, 0 < t <= 60"}
    if token is not None and not (isinstance(token, str) and 0 < len(token) <= 100):
        return {"error": "bad_request", "detail": "token must be a string of 1-100 characters"}
    return {"op": "create_topic", "topic": topic, "partitions": partitions,
            "timeout": timeout, "token": token}  # fmt: skip
