"""Online restores in the metadata log's swarm (sim/meta.py).

A restore client (an operator running `shoal snapshot restore FILE`)
proposes a few `MetaRestore` entries a run (metalog/restore.py), each
through a live agent chosen at random, at any time of the run: under
partitions, crashes, a paused controller. Half its backups were saved
from a live node earlier in the run (`shoal snapshot save`: the node's
state as it had applied it, session-owned keys of sessions that may still
be open included); the others it makes up (`backup`): each key the clients
use holds the value a client last read of it, a value of its own, or
nothing (the restore deletes it); the ephemeral keys of session clients
hold a value of its own or a session-owned row of a session of the past.
The backup's session-owned keys must not be restored, and a live
session's key must stay as it is. One restore in six is damaged (its digest does not
match): it must be refused (a conflict), and change nothing. A restore not
applied (no controller) is tried again a second later, up to eight times,
as the API tells its user to; one whose outcome is unknown is left so, as
every other call.

Each restore is in the history as one operation (sim/restoremodel.py).
What it cannot see, two keys taking one restore at two instants, is
`check_reads`'s: every read served at revision S returned the state the
committed entries give at S, and the revisions of the calls that
returned are in real-time order (a read called after a call returned at
revision A is served at A or later; a write committed after A): so no
read sees part of a restore, nor misses one that another call had seen
before it was called. And `WatchCheck` follows every node's key
changes as a watch does (daemon/metawatch.py: a stream fed from
`MetaState.changes`, listing again when those are reset): a watch that
was not told to resync after a restore holds keys the node does not.
"""

from __future__ import annotations

import bisect
import random
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from shoal.metalog.core import ProposalDone
from shoal.metalog.messages import OUTCOME_COMMITTED, OUTCOME_CONFLICT, OUTCOME_NOT_APPLIED
from shoal.metalog.snapshot import Snapshot, take
from shoal.metalog.state import KeyState, MetaRestore, MetaState, SessionInfo
from shoal.sim.linearizability import Operation
from shoal.sim.metacall import Call, write_output
from shoal.sim.restoremodel import Restore

if TYPE_CHECKING:
    from shoal.metalog.core import MetaLog
    from shoal.metalog.messages import Entry
    from shoal.sim.cluster import SimCluster
    from shoal.sim.meta import MetaRun

RESTORE_CLIENT = 90  # the restore client's number in the history
DAMAGED_RATE = 1 / 6
_RETRIES = 8  # of a restore not applied, a second apart
_REPORTED = 5  # violations of one kind reported per run, at most


@dataclass
class RestoreStats:
    """What the restore client did."""

    proposed: int = 0  # calls, retries included
    committed: int = 0
    refused: int = 0  # damaged, answered conflict
    not_applied: int = 0
    unknown: int = 0
    resynced: int = 0  # watches told to resync by a restore applied, over all nodes
    reads_checked: int = 0  # reads checked against the state at their revision


@dataclass(frozen=True)
class _Backup:
    """A restore as proposed: the entry, and what the model expects of it."""

    op: MetaRestore
    rows: tuple[tuple[str, str], ...]  # the keys it restores (no session-owned ones)
    intact: bool


class RestoreClient:
    """The run's restore client (module docstring)."""

    def __init__(self, cluster: SimCluster, run: MetaRun, rng: random.Random,
                 keys: list[bytes], ephemeral: tuple[bytes, ...]) -> None:  # fmt: skip
        self.cluster, self.run, self.rng = cluster, run, rng
        self.keys, self.ephemeral = keys, ephemeral
        self.universe = tuple(sorted(k.decode() for k in (*keys, *ephemeral)))
        self.backups: dict[int, _Backup] = {}  # id(call) -> its backup
        self.waiting: dict[tuple[int, int], tuple[Call, int]] = {}  # (node, pid) -> call, tries
        self.stats = RestoreStats()
        self.made = 0
        self.saved: list[_Backup] = []  # backups saved from live nodes so far
        self.until = float("inf")  # no retry after this
        cluster.observers.append(self)
        cluster.boot_hooks.append(self.on_boot)

    def start(self, count: int, start: float, until: float) -> None:
        """`count` restores at random instants between `start` and `until`;
        a backup saved from a live node every few seconds before."""
        self.until = until
        for at in sorted(self.rng.uniform(start, until) for _ in range(count)):
            self.cluster.at(at, lambda: self._propose(None, 0))
            self.run.faults.append(f"{at:.1f} restore a backup")
        at = start
        while (at := at + self.rng.uniform(1.0, 4.0)) < until:
            self.cluster.at(at, self._save)

    def _save(self) -> None:
        """`shoal snapshot save` on a live node: its state as it applied it."""
        live = [node for node in self.cluster.nodes if node is not None and node.meta is not None]
        if live:
            state = self.rng.choice(live).meta.state  # type: ignore[union-attr]
            snapshot = take(state, 1)
            saved = MetaRestore(snapshot.data, snapshot.digest)
            self.saved.append(_Backup(saved, _rows(state), True))

    def backup(self) -> _Backup:
        """One of the backups saved (half the time, if any), or one made
        up (module docstring), encoded as a snapshot; one in six damaged."""
        rng = self.rng
        if self.saved and rng.random() < 0.5:
            backup = rng.choice(self.saved)
        else:
            snapshot, state = self._made_up()
            backup = _Backup(MetaRestore(snapshot.data, snapshot.digest), _rows(state), True)
        if rng.random() >= DAMAGED_RATE:
            return backup
        damaged = bytes(b ^ 0xFF for b in backup.op.digest)
        return _Backup(MetaRestore(backup.op.data, damaged), backup.rows, False)

    def _made_up(self) -> tuple[Snapshot, MetaState]:
        """A backup of values clients read or new ones, session rows of the past."""
        rng, self.made = self.rng, self.made + 1
        last_read: dict[bytes, bytes] = {}
        for c in self.run.calls:
            if c.kind == "get" and c.outcome == "ok" and c.read_value is not None:
                last_read[c.key] = c.read_value
        state, revision = MetaState(), rng.randrange(1, 1000)
        for key in self.keys:
            roll = rng.random()
            if roll < 0.5 and key in last_read:
                value = last_read[key]
            elif roll < 0.8:
                value = b"r%d-%s" % (self.made, key)
            else:
                continue
            state.keys[key] = KeyState(value, revision, revision, rng.randrange(1, 5))
        for key in self.ephemeral:
            roll, owner = rng.random(), rng.randbytes(16)
            if roll < 0.4:
                state.keys[key] = KeyState(b"r%d-%s" % (self.made, key), revision, revision, 1)
            elif roll < 0.8:  # a session's of the past: not restored
                state.keys[key] = KeyState(b"old%d-%s" % (self.made, key), revision, revision, 1,
                                           owner)  # fmt: skip
                state.sessions[owner] = SessionInfo(owner, 2000, "old", "node-0", (), revision)
        state.revision = revision
        return take(state, 1), state

    def _propose(self, again: Call | None, tries: int) -> None:
        """Propose a backup (`again`: the one not applied, once more)."""
        cluster = self.cluster
        live = [i for i in range(cluster.n)
                if cluster.nodes[i] is not None and not cluster.is_paused(i)]  # fmt: skip
        if not live:
            cluster.at(cluster.now + 0.5, lambda: self._propose(again, tries))
            return
        node_i = self.rng.choice(live)
        node = cluster.nodes[node_i]
        assert node is not None
        backup = self.backups[id(again)] if again is not None else self.backup()
        call = Call(RESTORE_CLIENT, "restore", b"", None, None, cluster.now, op=backup.op)
        self.backups[id(call)] = backup
        self.run.calls.append(call)
        self.stats.proposed += 1
        pid = node.meta_propose(backup.op, cluster._local(node_i))  # noqa: SLF001
        self.waiting[(node_i, pid)] = (call, tries)
        cluster._flush(node_i)  # noqa: SLF001

    def on_event(self, now: float, node: int, event: Any) -> None:
        """The answers to its proposals."""
        if not isinstance(event, ProposalDone):
            return
        found = self.waiting.pop((node, event.pid), None)
        if found is None:
            return
        call, tries = found
        if event.outcome == OUTCOME_COMMITTED:
            call.outcome, call.revision, call.return_at = "ok", event.revision, now
            self.stats.committed += 1
        elif event.outcome == OUTCOME_CONFLICT:
            call.outcome, call.revision, call.return_at = "conflict", event.revision, now
            self.stats.refused += 1
        elif event.outcome == OUTCOME_NOT_APPLIED:
            call.outcome, call.return_at = "not_applied", now
            self.stats.not_applied += 1
            if tries < _RETRIES and now + 1.0 < self.until:
                self.cluster.at(now + 1.0, lambda: self._propose(call, tries + 1))
        else:
            call.outcome = "unknown"
            self.stats.unknown += 1

    def on_boot(self, i: int) -> None:
        """Node `i` (re)started: what it was asked is unknown."""
        for slot in [s for s in self.waiting if s[0] == i]:
            call, _ = self.waiting.pop(slot)
            call.outcome = "unknown"
            self.stats.unknown += 1

    def operation(self, call: Call) -> Operation:
        """A restore call as the checker's operation."""
        backup = self.backups[id(call)]
        output = write_output(call)
        restore = Restore(backup.rows, self.universe, backup.intact)
        return Operation(call.client, call.call_at, None if output is None else call.return_at,
                         restore, output)  # fmt: skip


class WatchCheck:
    """A watch on every node, fed as daemon/metawatch.py feeds one: it
    follows the key changes each entry records, and lists the keys again
    when the state is new or its `changes` were reset. After every entry it
    must hold the node's keys (value and mod revision)."""

    def __init__(self, violations: list[str], stats: RestoreStats) -> None:
        self.violations, self.stats = violations, stats
        self.watches: dict[MetaLog, tuple[MetaState, dict[bytes, tuple[bytes, int]]]] = {}
        self.reported = 0

    def on_apply(self, meta: MetaLog, entry: Entry) -> None:
        """After `meta` applied `entry`."""
        state = meta.state
        watch = self.watches.get(meta)
        if watch is None or watch[0] is not state or state.changes is None:
            if watch is not None and type(entry.op) is MetaRestore:
                self.stats.resynced += 1
            state.changes = []
            self.watches[meta] = (state, _listed(state))
            return
        held = watch[1]
        for _, key, after in state.changes:
            if after is None:
                held.pop(key, None)
            else:
                held[key] = (after.value, after.mod_revision)
        state.changes = []
        if held != _listed(state) and self.reported < _REPORTED:
            self.reported += 1
            self.violations.append(f"a watch on {meta.name} holds other keys than its state "
                                   f"after entry {entry.index} ({type(entry.op).__name__}): "
                                   "it was not told to resync")  # fmt: skip
            self.watches[meta] = (state, _listed(state))


def _rows(state: MetaState) -> tuple[tuple[str, str], ...]:
    """What restoring `state` restores: its keys not owned by a session."""
    return tuple((key.decode(), held.value.decode())
                 for key, held in sorted(state.keys.items()) if not held.session)  # fmt: skip


def _listed(state: MetaState) -> dict[bytes, tuple[bytes, int]]:
    """The keys as a watch's client lists them."""
    return {key: (held.value, held.mod_revision) for key, held in state.keys.items()}


def check_reads(calls: list[Call], entries: dict[int, Entry], violations: list[str]) -> int:
    """Every read served at revision S returned the key as the committed
    entries leave it at S (a restore applied at one revision is there
    whole for a read, or not at all), and revisions are in real-time order
    (`_in_order`). Returns the reads checked."""
    _in_order(calls, violations)
    reads = sorted(((c.read_revision, i) for i, c in enumerate(calls)
                    if c.kind == "get" and c.outcome == "ok"))  # fmt: skip
    reference, checked, reported = MetaState(), 0, 0
    for revision, i in reads:
        while reference.revision < revision and reference.revision + 1 in entries:
            e = entries[reference.revision + 1]
            reference.apply(e.index, e.op, e.origin, e.pid)
        if reference.revision != revision:
            break  # an entry nobody applied: no state to compare with past it
        c, checked = calls[i], checked + 1
        held = reference.get(c.key)
        expected = (None, 0) if held is None else (held.value, held.mod_revision)
        if (c.read_value, c.read_mod_revision) != expected and reported < _REPORTED:
            reported += 1
            violations.append(f"client {c.client} read {c.key!r} at revision {revision} as "
                              f"{(c.read_value, c.read_mod_revision)}; the committed entries "
                              f"hold {expected} there")  # fmt: skip
    return checked


def _in_order(calls: list[Call], violations: list[str]) -> None:
    """A call that returned (a read at the revision it was served at, a
    write at its commit's) bounds the calls made after it returned: a read
    is served at that revision or later, a write commits after it."""
    done = sorted(((c.return_at, _revision(c), c) for c in calls
                   if c.outcome == "ok" and c.return_at is not None),
                  key=lambda d: (d[0], d[1]))  # fmt: skip
    ends = [at for at, _, _ in done]
    highest: list[tuple[int, Call]] = []  # the highest revision returned so far, and whose
    for _, revision, c in done:
        highest.append((revision, c) if not highest or revision > highest[-1][0] else highest[-1])
    reported = 0
    for _, revision, c in done:
        i = bisect.bisect_left(ends, c.call_at)  # returned strictly before the call
        if not i:
            continue
        bound, before = highest[i - 1]
        if (revision < bound if c.kind == "get" else revision <= bound) and reported < _REPORTED:
            reported += 1
            violations.append(f"client {c.client}'s {c.kind} called at {c.call_at:.4f} is at "
                              f"revision {revision}, but client {before.client}'s "
                              f"{before.kind} at revision {bound} returned before")  # fmt: skip


def _revision(c: Call) -> int:
    """A read's served revision, a write's commit revision."""
    return c.read_revision if c.kind == "get" else c.revision
