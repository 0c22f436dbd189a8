"""Backups and restores over the API (daemon/backup.py is the file's format).

    GET  /v1/snapshot                          a backup of the cluster, a tar
    POST /v1/snapshot/restore[?kv=merge|replace]  restore the backup in the body

**Save, from any agent while the cluster serves.** A linearizable barrier
first: a read through the controller (ReadIndex, metalog/reads.py) returns
the revision committed when it was asked, and this agent waits until it
has applied as far (`MetaService.read`). The state it has applied then, at
a revision at or after the barrier, is copied (a dict copy, milliseconds at
10^5 keys) and encoded with the kv records into the tar in a thread, as
daemon/disk/snapshots.py encodes its snapshots: the loop keeps serving.
The kv records are this agent's replica, read in pages between which the
loop runs: eventually consistent, as every kv read is (docs/storage.md).

**Restore into the running cluster.** The file is checked whole first
(checksums, format, that it is this cluster's: its `cluster` name); a
refusal is a 400 (409 for another cluster's, 413 for a state over the
online cap) and changes nothing. Then the metadata state replaces the keys
through the log, as one entry at a new revision (metalog/restore.py),
whose outcome is told as a write's is: committed (200), not applied (503,
nothing changed), unknown (504: it may yet commit; the kv records were not
touched). An entry this large may take longer to commit and apply than the
log's answer timeout: an unknown outcome is settled by looking, for up to
a minute, for this agent's state to become exactly the backup's at one
revision (a later write meanwhile leaves it unknown). Once it committed,
the kv records: `merge` (the default) writes each as a new write, so it
wins over the live one; `replace` also deletes the live keys the backup
does not hold (those live when the kv records begin). A live ephemeral key
(an open session's, a live member's) is left alone, neither written nor
deleted, decided as its batch is written (`_batch`: a session's write
racing the restore through another agent is ordered as any two writes
are); the answer counts them (`kv_skipped_ephemeral`). A key fenced under a
controller epoch is written fenced under the current one (an unfenced
write to it would be refused).

The kv records go in batches (`Agent.write_many`, `AntiEntropy.write_many`):
each batch in one pass of the loop, every record of it stamped and checked
as a write of its own at that moment (so it wins or loses against a
client's write exactly as one would), staged for the group commit, and
pushed to the other agents as one stream each; the route waits for each
batch's sync while the next one is written, and answers once all are
durable here. A batch is sized to about 20 ms of this loop's work
(`_next_size`), so a health check or a lease renewal waits behind one such
batch here, and behind its merge (one push) on each peer. One by one (a
write, a flush and a datagram per record to each peer) 10^5 records took
49-95 s; in batches, bench/backup.py.
"""

from __future__ import annotations

import asyncio
import datetime
import time
from dataclasses import dataclass
from typing import Any

import structlog

from shoal import __version__
from shoal.daemon.api.answers import HttpError, Raw, Request, Result
from shoal.daemon.api.port import AgentPort
from shoal.daemon.backup import Backup, BackupError, build_backup, read_backup
from shoal.daemon.meta import MetaService
from shoal.kernel.errors import ShoalError
from shoal.metalog.messages import OUTCOME_COMMITTED, OUTCOME_NOT_APPLIED
from shoal.metalog.restore import MAX_RESTORE_BYTES
from shoal.metalog.snapshot import TakeSnapshot, encode_view, restore
from shoal.metalog.state import MetaRestore
from shoal.storage.records import Record

log = structlog.get_logger("shoal.api")
SNAPSHOT_ROUTE = "/v1/snapshot"
RESTORE_ROUTE = "/v1/snapshot/restore"
# The largest backup a restore accepts in its body: the metadata state's
# cap and room for kv records (each up to 512 KiB).
MAX_BACKUP_BYTES = 512 * 1024 * 1024
_BARRIER_KEY = b"/"  # any key: the read is a barrier, its value unused
_PAGE = 1024  # kv records read per pass of the loop
# A restore's kv writes go in batches (`Agent.write_many`), each stamped
# and pushed to the other agents in one pass of the loop: a batch is sized
# to cost the writing loop about `_KV_BUDGET_S` (the next batch's size from
# the last one's time, `_next_size`), from `_KV_BATCH_MIN` to `_KV_BATCH`
# records, and at most `_KV_BATCH_BYTES`. Each peer merges a batch in one
# pass too (one push), at about the same cost. Measured (bench/backup.py,
# 10^5 records of 100 bytes, 3 agents on 2 loaded cores, pure Python): in
# fixed batches of 1,024 (about 40 ms each, unloaded) the restore took
# 7.4-13.9 s and each agent's longest gap in its health answers in the kv
# part was 0.18-0.75 s, 4-35 gaps over 100 ms per agent (3 runs); with the
# 20 ms budget (160-290 batches) 8.9-13.9 s, longest gaps 0.20-0.87 s,
# but 1-7 gaps over 100 ms per agent (3 runs; gap counts in 2 of each):
# fewer stalls, the longest not set by the batches (the controller, which
# only merges pushes of a few hundred records, saw 0.87 s). Merging a push in slices
# on the receivers as well (128 records a pass) made it worse (one run:
# gaps of 1.9-2.6 s, 18 s): pushes merged later left the trees apart when
# sessions compared them, and sessions carried 17,500 records, in answers
# of up to 4 MiB each merged in one pass (storage/responder.py).
_KV_BUDGET_S = 0.02
_KV_BATCH = 1024
_KV_BATCH_MIN = 32
_KV_BATCH_FIRST = 128
_KV_BATCH_BYTES = 1 << 20
Change = tuple[bytes, bytes | None]  # a key and its value (None: delete it)
_READ_BACK_S = 60.0  # an unknown restore: how long to look for it applied here


def _meta(agent: AgentPort) -> MetaService:
    if agent.meta is None:
        raise HttpError(503, "the metadata log is off on this agent ([meta] enabled, "
                        "docs/metadata.md): no backup from here")  # fmt: skip
    return agent.meta


async def save_route(agent: AgentPort, request: Request) -> Result:
    """A backup taken at a revision at or after a linearizable barrier."""
    service = _meta(agent)
    done = await service.read(_BARRIER_KEY)
    if done is None or not done.ok:
        raise HttpError(503, "no backup: no controller confirmed its leadership in time "
                        "(the barrier failed); safe to retry", outcome="not_applied")  # fmt: skip
    view, voters = service.backup_view()
    if view.index < done.revision:
        raise HttpError(503, f"no backup: this agent has applied revision {view.index}, the "
                        f"barrier is at {done.revision}; retry, or save from another agent",
                        outcome="not_applied")  # fmt: skip
    records = await live_records(agent)
    manifest = {
        "cluster": agent.config.cluster,
        "lineage": voters.lineage.hex() if voters is not None else "",
        "voters": list(voters.voters) if voters is not None else [],
        "voter_ids": [i.hex() for i in voters.ids] if voters is not None else [],
        "voters_version": voters.version if voters is not None else 0,
        "meta_keys": len(view.keys),
        "source_node": agent.config.node_name,
        "taken_at": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "shoal_version": __version__,
    }
    body = await asyncio.to_thread(_build, view, manifest, records)
    return Raw(200, "application/x-tar", body)


def _build(view: TakeSnapshot, manifest: dict[str, Any], records: list[Record]) -> bytes:
    """The tar (in the saving thread)."""
    return build_backup(manifest, encode_view(view), records)


async def live_records(agent: AgentPort, prefix: bytes = b"") -> list[Record]:
    """This agent's live, non-ephemeral kv records, in key order, read a
    page per pass of the loop; not the agents' own (keys from a zero byte
    on, hidden from listings: api/kv.py)."""
    out: list[Record] = []
    after = b""
    while True:
        page = agent.scan(prefix, after, _PAGE)
        out.extend(r for r in page if r.value is not None and not r.owner and r.key[:1] != b"\0")
        if len(page) < _PAGE:
            return out
        after = page[-1].key
        await asyncio.sleep(0)


async def restore_route(agent: AgentPort, request: Request) -> Result:
    """Check the backup in the body, replace the metadata state through the
    log, then merge or replace the kv records (module docstring)."""
    service = _meta(agent)
    mode = request.query.get("kv", ["merge"])[0]
    if mode not in ("merge", "replace"):
        raise HttpError(400, f"kv must be merge or replace, not {mode[:40]!r}")
    try:
        backup = await asyncio.to_thread(read_backup, request.body)
    except BackupError as exc:
        raise HttpError(400, str(exc)) from None
    cluster = backup.manifest.get("cluster")
    if cluster != agent.config.cluster:
        raise HttpError(409, f"backup: it is of cluster {cluster!r}, this agent's is "
                        f"{agent.config.cluster!r}; nothing restored")  # fmt: skip
    size = len(backup.snapshot.data)
    if size > MAX_RESTORE_BYTES:
        raise HttpError(413, f"backup: its metadata state is {size} bytes, over the "
                        f"{MAX_RESTORE_BYTES} an online restore carries; restore it offline "
                        "into a new cluster (shoal snapshot restore FILE --offline "
                        "--data-dir DIR, docs/operations.md)")  # fmt: skip
    done = await service.propose(MetaRestore(backup.snapshot.data, backup.snapshot.digest))
    if done is not None and done.outcome == OUTCOME_NOT_APPLIED:
        raise HttpError(
            503,
            "not applied: no controller known, or it was not the controller "
            "any more; nothing changed, safe to retry",
            outcome="not_applied",
        )
    revision = done.revision if done is not None and done.outcome == OUTCOME_COMMITTED else 0
    if not revision:
        revision = await _read_back(service, backup)
        log.info("restore settled by reading it back", revision=revision)
    if not revision:
        raise HttpError(
            504,
            "unknown: the restore was handed to the controller and no "
            "answer came in time; it may yet commit (the kv records were not "
            "touched): list the keys, or restore again",
            outcome="unknown",
        )
    kv = await _restore_kv(agent, backup, mode == "replace")
    return 200, {"outcome": "committed", "revision": revision,
                 "meta_keys": backup.manifest.get("meta_keys"), "kv_written": kv.written,
                 "kv_deleted": kv.deleted, "kv_refused": kv.refused,
                 "kv_skipped_ephemeral": kv.skipped}  # fmt: skip


async def _read_back(service: MetaService, backup: Backup) -> int:
    """The revision the restore was applied at here, once this agent's
    state is exactly the backup's at one revision (every key's create and
    mod revision; the keys sessions own aside: metalog/restore.py); 0 when
    it is not within `_READ_BACK_S` (a large entry may take longer than the
    log's answer timeout to commit and apply)."""
    state = await asyncio.to_thread(restore, backup.snapshot, True)
    expected = {key: held.value for key, held in state.keys.items() if not held.session}
    loop = asyncio.get_running_loop()
    deadline = loop.time() + _READ_BACK_S
    while loop.time() < deadline:
        keys = {k: h for k, h in service.applied_keys()[0].items() if not h.session}
        revisions = {(held.create_revision, held.mod_revision) for held in keys.values()}
        if len(revisions) == 1 and keys.keys() == expected.keys():
            ((created, modified),) = revisions
            if created == modified and all(expected[k] == h.value for k, h in keys.items()):
                return modified
        await asyncio.sleep(0.2)
    return 0


@dataclass
class KvCounts:
    """What a restore did with the kv records (its answer's kv_ fields)."""

    written: int = 0  # backed-up records written (those refused among them)
    deleted: int = 0  # live keys the backup lacks, deleted (`replace`)
    refused: int = 0  # writes and deletes refused (a fence, the clock)
    skipped: int = 0  # keys left alone: a live ephemeral key held them


async def _restore_kv(agent: AgentPort, backup: Backup, replace: bool) -> KvCounts:
    """Write the backup's kv records (and, with `replace`, delete the live
    keys it does not hold), but none over a live ephemeral key."""
    changes: list[Change] = [(r.key, r.value) for r in backup.records]
    if replace:
        held = {r.key for r in backup.records}
        changes += [(r.key, None) for r in await live_records(agent) if r.key not in held]
    return await _write_all(agent, changes)


async def _write_all(agent: AgentPort, changes: list[Change]) -> KvCounts:
    """Write `changes` in batches (`_next_batch`), one per pass of the
    loop, each batch's sync overlapping the next batch (at most two wait
    for theirs); the counts once all are durable."""
    epoch = agent.status().node.epoch
    counts = KvCounts()
    previous: asyncio.Future[None] | None = None
    start, size = 0, _KV_BATCH_FIRST
    while start < len(changes):
        chunk = _next_batch(changes, start, size)
        start += len(chunk)
        began = time.perf_counter()
        writes = _batch(agent, chunk, epoch, counts)
        durable: asyncio.Future[None] | None = None
        try:
            _, rejected, durable = agent.write_many(writes)
            counts.refused += rejected
        except ShoalError:  # this agent's clock: none written
            counts.refused += len(writes)
        size = _next_size(len(chunk), time.perf_counter() - began)
        if previous is not None:
            await asyncio.shield(previous)  # shared by its group: never cancelled
        await asyncio.sleep(0)  # the next batch in the next pass
        previous = durable
    if previous is not None:
        await asyncio.shield(previous)
    return counts


def _next_size(size: int, took_s: float) -> int:
    """The next batch's size after one of `size` records took `took_s`:
    as many as `_KV_BUDGET_S` holds at that pace, at most twice as many."""
    if took_s <= 0:
        return min(size * 2, _KV_BATCH)
    fits = int(size * _KV_BUDGET_S / took_s)
    return max(_KV_BATCH_MIN, min(fits, size * 2, _KV_BATCH))


def _batch(agent: AgentPort, chunk: list[Change], epoch: int | None,
           counts: KvCounts) -> list[tuple[bytes, bytes | None, int | None]]:  # fmt: skip
    """The writes of `chunk`, decided key by key as it is written (in the
    same pass of the loop, nothing between): a key whose current version
    is fenced is written fenced under the current epoch; a key a live
    ephemeral record holds (an open session's, a live member's) is left
    alone, as its owner's (its end deletes it). So a session's write
    through this agent made before the key's batch is kept, one made after
    it is newer than the restore's; one made through another agent that
    this agent has not heard of when the batch is written races it as any
    two writes do: the later stamp wins everywhere, and if that is the
    restore's the key is the backup's plain record, no longer the
    session's (as after a client's write without the session)."""
    visible = agent.visible
    writes: list[tuple[bytes, bytes | None, int | None]] = []
    for key, value in chunk:
        held = agent.read(key)
        if held is not None and held.owner and held.value is not None and visible(held):
            counts.skipped += 1
            continue
        if value is None:
            counts.deleted += 1
        else:
            counts.written += 1
        writes.append((key, value, epoch if held is not None and held.epoch and epoch
                       else None))  # fmt: skip
    return writes


def _next_batch(changes: list[Change], start: int, size: int) -> list[Change]:
    """The batch from `changes[start]`: `size` records, or fewer up to
    `_KV_BATCH_BYTES` (the record that crosses it included)."""
    chunk: list[Change] = []
    total = 0
    for key, value in changes[start : start + size]:
        chunk.append((key, value))
        total += len(key) + len(value or b"")
        if total >= _KV_BATCH_BYTES:
            break
    return chunk
