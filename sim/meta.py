"""The metadata log's swarm: clients, faults, and what must hold.

Each seeded run picks a cluster size, datagram loss and duplication, fsync
latency, clock rates within the drift bound, and a schedule of faults
(crashes, a crash right after a log write and before its fsync, restarts,
partitions, the controller cut off, heals); meanwhile simulated clients,
each talking to one node as an application talks to its local agent, put,
compare-and-set, delete and read a few keys, and run transactions over
two others (sim/metatxn.py: a transfer with compares on both keys'
revisions, a create-if-absent whose failure branch deletes). Every call
and return is recorded on true time, and an outcome the client cannot know (a timeout, a
node that crashed under it, `unknown`) is recorded as such, never as a
success or a failure.

What must hold, checked after the run:

- **Linearizability** of the client histories: `history()` turns the calls
  into the checker's operations (sim/metamodel.py, sim/metahistory.py,
  sim/linearizability.py: Wing & Gong with Lowe's cache, per key),
  `linearizable()` checks them.
- **State machine safety**: no two nodes ever apply different entries at
  one index (checked as each entry is applied, `MetaLog.on_apply`).
- **No acknowledged write lost**: every write a client saw committed at
  revision R is the entry that nodes applied at index R.
- **Equal states at equal revisions**: every node's state machine at the
  end (restored from snapshots, caught up by one, or applied entry by
  entry) is, byte for byte, the state that applying the committed entries
  in order gives at its revision.

Snapshots are taken often (every few entries, a short tail kept), so
followers behind after a partition or a crash catch up by snapshot,
restarts load one, and one run in two with fsync latency crashes a node
right after it writes an installed snapshot, before the fsync.

Voter changes are in the schedule (a leave removes a voter, its return
adds it back, and in runs with observers one takes a lost voter's place):
the log decides them (election/controller.py, "Voter changes"), one at a
time, never before the controller has committed an entry of its own epoch,
and while one is being decided a commit needs a majority of both sets. One
run in three pauses the controller's agent (SIGSTOP) for half its lease to
three leases: it wakes deposed, with a full socket buffer, believing it
leads until its timers catch up. One run in three loses
disks (sim/wipe.py): voters that held committed entries come back with
empty data directories while the voters that lack those entries return
from a cut; a voter is its name and its data directory's id, so the wiped
ones never vote as their old selves.

With `meta_run(..., sessions=N)`, N more clients hold sessions (issue 38,
sim/metasessions.py): they open, renew, close, crash and pause, and write
ephemeral keys under their sessions; each committed end is in the history
as an operation deleting its session's keys (sim/sessionmodel.py), and
sim/sessioncheck.py checks the keys on every node against the ends and
the expiries against the renewals.

A restore client (sim/metarestore.py) restores a few backups online in
every run (`meta_run(..., restores=N)`, 3 by default; 0: none), some
damaged: each is one operation of the history (sim/restoremodel.py);
every read served at revision S returned the committed entries' state at
S, the calls' revisions are in real-time order, and a watch on every node
(fed as the agent's) holds the node's keys after every entry, so it was
told to resync by each restore.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import msgspec

from shoal.election.config import LeaseConfig
from shoal.membership.profiles import PROFILES
from shoal.metalog.core import MetaConfig, MetaLog, ProposalDone, ReadDone
from shoal.metalog.messages import (
    OUTCOME_COMMITTED,
    OUTCOME_CONFLICT,
    OUTCOME_NOT_APPLIED,
    Entry,
)
from shoal.metalog.snapshot import encode_state
from shoal.metalog.state import (
    CMP_EQUAL,
    TARGET_CREATE,
    TARGET_MOD,
    Compare,
    MetaDelete,
    MetaGet,
    MetaOp,
    MetaPut,
    MetaState,
    MetaTxn,
    TxnApplied,
)
from shoal.sim.clock import NodeClock
from shoal.sim.cluster import SimCluster
from shoal.sim.elections import (
    FAULTS,
    SwarmRun,
    _crash_before_fsync,
    _fsync_latency,
    attack,
    random_fault,
)
from shoal.sim.linearizability import CheckResult, Operation
from shoal.sim.metacall import Call, settle, write_output
from shoal.sim.metahistory import check_meta
from shoal.sim.metamodel import Delete, Get, Put, Read
from shoal.sim.metarestore import RestoreClient, WatchCheck, check_reads
from shoal.sim.metatxn import TXN_KEYS, txn_input, txn_output
from shoal.sim.network import LinkProfile
from shoal.sim.wipe import schedule_wipe

if TYPE_CHECKING:
    from shoal.sim.metasessions import SessionSwarm

# Every fault of the election's swarm, leaves included: a leave removes the
# voter at once, its return adds it back (voter changes under load).
_KINDS = FAULTS
# The runs that lose disks (sim/wipe.py).
WIPE_RATE = 0.33


@dataclass
class MetaRun:
    """What one run did and found."""

    seed: int
    n: int
    loss: float
    fsync_s: float
    calls: list[Call] = field(default_factory=list)
    faults: list[str] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)
    committed_entries: int = 0
    replays: int = 0  # copies of traffic the replayer delivered
    cluster: SimCluster | None = field(default=None, repr=False)  # as the run left it
    snapshots_taken: int = 0
    snapshots_installed: int = 0  # by followers, from their leader
    restored: int = 0  # boots that loaded a snapshot
    sessions: SessionSwarm | None = field(default=None, repr=False)  # sim/metasessions.py
    restores: RestoreClient | None = field(default=None, repr=False)  # sim/metarestore.py

    def count(self, outcome: str) -> int:
        """Calls that ended with `outcome`."""
        return sum(1 for c in self.calls if c.outcome == outcome)

    def history(self) -> list[Operation]:
        """The calls as the checker's operations: a read not served (it
        changed nothing) is left out; an unknown write has no return."""
        ops = [] if self.sessions is None else self.sessions.ends()
        for c in self.calls:
            key = c.key.decode()
            if c.kind in ("open", "close"):
                continue  # their entries are in the history as ends (sessions.ends)
            if c.kind == "restore":
                assert self.restores is not None
                ops.append(self.restores.operation(c))
                continue
            if c.txn is not None:
                done = txn_output(c.txn, c.txn_result, c.outcome)
                ops.append(Operation(c.client, c.call_at, None if done is None else c.return_at,
                                     txn_input(c.txn), done))  # fmt: skip
                continue
            if c.kind == "get":
                if c.outcome == "ok":
                    value = None if c.read_value is None else c.read_value.decode()
                    ops.append(Operation(c.client, c.call_at, c.return_at, Get(key),
                                         Read(value, c.read_mod_revision)))  # fmt: skip
                continue
            call: Put | Delete = (Put(key, (c.value or b"").decode(), c.cas, c.session.hex())
                                  if c.kind == "put" else Delete(key, c.cas))  # fmt: skip
            output = write_output(c)
            ops.append(Operation(c.client, c.call_at, None if output is None else c.return_at,
                                 call, output))  # fmt: skip
        return ops

    def linearizable(self, max_steps: int = 2_000_000) -> CheckResult:
        """The checker's verdict on this run's history."""
        return check_meta(self.history(), max_steps=max_steps)


class _Clients:
    """Closed-loop clients: each has one call in flight at its node."""

    def __init__(self, cluster: SimCluster, rng: random.Random, clients: int, keys: int,
                 run: MetaRun, until: float) -> None:  # fmt: skip
        self.cluster, self.rng, self.run, self.until = cluster, rng, run, until
        self.keys = [b"k%d" % k for k in range(keys)]
        self.home = [c % cluster.n for c in range(clients)]
        self.waiting: dict[tuple[int, str, int], Call] = {}  # (node, kind, id) -> call
        self.by_node: dict[int, set[tuple[int, str, int]]] = {}
        self.last_rev: dict[bytes, int] = {}  # the mod revision a client last saw, per key
        self.values = 0
        cluster.observers.append(self)
        cluster.boot_hooks.append(self.on_boot)
        for c in range(clients):
            self._schedule(c, rng.uniform(0.0, 0.5))

    def _schedule(self, client: int, after: float) -> None:
        when = self.cluster.now + after
        if when < self.until:
            self.cluster.at(when, lambda: self._issue(client))

    def _op(self) -> tuple[str, bytes, bytes | None, int | None]:
        rng, key = self.rng, self.rng.choice(self.keys)
        roll = rng.random()
        if roll < 0.4:
            return "get", key, None, None
        self.values += 1
        value = b"v%d" % self.values
        cas = None
        if roll < 0.6:
            cas = self.last_rev.get(key, 0) if rng.random() < 0.8 else rng.randrange(0, 50)
        if roll > 0.93:
            return "delete", key, None, cas
        return "put", key, value, cas

    def _issue(self, client: int) -> None:
        node_i = self.home[client]
        node = self.cluster.nodes[node_i]
        if node is None or self.cluster.is_paused(node_i):  # down or paused: try again soon
            self._schedule(client, 0.5)
            return
        kind, key, value, cas = self._op()
        call = Call(client, kind, key, value, cas, self.cluster.now)
        self.run.calls.append(call)
        now = self.cluster._local(node_i)  # noqa: SLF001 - the node's own clock
        if self.rng.random() < 0.1:
            call.kind, call.key, call.value, call.cas = "txn", b"", None, None
            call.txn = self._txn()
            ident = ("write", node.meta_propose(call.txn, now))
        elif kind == "get":
            ident = ("read", node.meta_read(key, now))
        else:
            op: MetaOp = MetaPut(key, value or b"", cas) if kind == "put" else MetaDelete(key, cas)
            ident = ("write", node.meta_propose(op, now))
        slot = (node_i, *ident)
        self.waiting[slot] = call
        self.by_node.setdefault(node_i, set()).add(slot)
        self.cluster._flush(node_i)  # noqa: SLF001

    def _txn(self) -> MetaTxn:
        """A transfer over both keys if neither changed since last seen, or
        (one in three) both created if the second is absent, else it is
        deleted: a failure branch that writes."""
        a, b = TXN_KEYS
        self.values += 1
        va, vb = b"a%d" % self.values, b"b%d" % self.values
        if self.rng.random() < 0.33:
            return MetaTxn(
                (Compare(b, TARGET_CREATE, CMP_EQUAL, 0),),
                (MetaPut(b, vb), MetaPut(a, va)),
                (MetaDelete(b), MetaGet(a)),
            )
        compares = tuple(Compare(k, TARGET_MOD, CMP_EQUAL, self.last_rev.get(k, 0))
                         for k in TXN_KEYS)  # fmt: skip
        return MetaTxn(compares, (MetaPut(a, va), MetaPut(b, vb)), (MetaGet(a), MetaGet(b)))

    def _learn(self, txn: MetaTxn, done: TxnApplied) -> None:
        """The mod revisions a committed transaction tells of its keys."""
        for op, result in zip(txn.success if done.succeeded else txn.failure, done.results,
                              strict=True):  # fmt: skip
            if isinstance(op, MetaPut):
                self.last_rev[op.key] = done.revision
            elif isinstance(op, MetaDelete):
                self.last_rev[op.key] = 0
            else:
                self.last_rev[op.key] = 0 if result is None else result.mod_revision

    def on_event(self, now: float, node: int, event: Any) -> None:
        if isinstance(event, ProposalDone):
            call = self._done((node, "write", event.pid))
            if call is None:
                return
            if call.txn is not None and event.outcome == OUTCOME_COMMITTED:
                assert event.txn is not None
                call.outcome, call.revision, call.return_at = "ok", event.revision, now
                call.txn_result = event.txn
                self._learn(call.txn, event.txn)
            elif event.outcome == OUTCOME_COMMITTED:
                call.outcome, call.revision, call.return_at = "ok", event.revision, now
                self.last_rev[call.key] = event.revision if call.kind == "put" else 0
            elif event.outcome == OUTCOME_CONFLICT:
                call.outcome, call.revision, call.return_at = "conflict", event.revision, now
                self.last_rev[call.key] = event.revision
            elif event.outcome == OUTCOME_NOT_APPLIED:
                call.outcome, call.return_at = "not_applied", now
            else:
                call.outcome = "unknown"
        elif isinstance(event, ReadDone):
            call = self._done((node, "read", event.rid))
            if call is None:
                return
            if event.ok:
                call.outcome, call.return_at = "ok", now
                call.read_value, call.read_mod_revision = event.value, event.mod_revision
                call.read_revision = event.revision
                self.last_rev[call.key] = event.mod_revision
            else:
                call.outcome, call.return_at = "failed", now  # not served: no effect

    def _done(self, slot: tuple[int, str, int]) -> Call | None:
        call = self.waiting.pop(slot, None)
        if call is None:
            return None
        self.by_node[slot[0]].discard(slot)
        self._schedule(call.client, self.rng.uniform(0.0, 0.05))
        return call

    def on_boot(self, i: int) -> None:
        """Node `i` (re)started: what its previous run was asked is unknown."""
        for slot in sorted(self.by_node.get(i, ())):
            call = self.waiting.pop(slot)
            call.outcome = "unknown" if call.kind != "get" else "failed"
            if call.kind == "get":
                call.return_at = self.cluster.now
            self._schedule(call.client, 0.05)
        self.by_node[i] = set()


def meta_run(seed: int, duration_s: float = 30.0, heal_at_s: float = 22.0,
             clients: int = 6, keys: int = 3, sessions: int = 0,
             restores: int = 3) -> MetaRun:  # fmt: skip
    """One seeded run of the swarm (module docstring). One run in four
    has clocks far outside the drift bound (rates of 0.4x to 1.6x: leases
    may then overlap, which the log must not depend on), one in three a
    replayer copying traffic (sim/attacker.py). With `sessions`, that many
    more clients hold sessions and write ephemeral keys under them
    (sim/metasessions.py), checked as that module says. `restores`
    backups are restored online meanwhile (sim/metarestore.py)."""
    rng = random.Random(seed)
    lease = LeaseConfig()
    n = rng.choice([3, 5, 5])
    loss = rng.choice([0.0, 0.02, 0.1])
    wild = rng.random() < 0.25
    replay_rate = 20.0 if rng.random() < 0.33 else 0.0
    drift = min(0.6, lease.drift_ratio_max * (30 if wild else 0.95))
    clocks = [NodeClock(rng.uniform(0, 100), rng.uniform(-drift, drift)) for _ in range(n)]
    disk_rng = random.Random(seed * 7_919 + 11)
    fsync_s = disk_rng.choice([0.0, 0.002, 0.02])

    snap_rng = random.Random(seed * 6_007 + 5)  # its own stream: the schedules stay
    config = MetaConfig(snapshot_every=snap_rng.choice([5, 10, 25]),
                        keep_entries=snap_rng.choice([0, 2, 8]),
                        chunk_bytes=snap_rng.choice([64, 512]), chunk_window=2)  # fmt: skip
    # One five-node run in three has 3 voters: the other two observe the log
    # (replicated to, counted in no majority), and clients use them too.
    observed = n == 5 and random.Random(seed * 4_099 + 3).random() < 0.33
    if observed:
        lease = msgspec.structs.replace(lease, max_voters=3)
    # A voter that leaves is removed at once, soon, or (the default, 60 s)
    # not within the run: each run draws one, from a stream of its own.
    grace = random.Random(seed * 3_001 + 7).choice([0.0, 2.0, lease.left_voter_grace_s])
    lease = msgspec.structs.replace(lease, left_voter_grace_s=grace)
    cluster = SimCluster(n, seed, PROFILES["lan"],
                         LinkProfile(loss=loss, duplicate=rng.choice([0.0, 0.02])),
                         clocks=clocks, lease_config=lease, bootstrap_expect=n,
                         fsync=_fsync_latency(fsync_s), meta=config)  # fmt: skip
    run = MetaRun(seed, n, loss, fsync_s, cluster=cluster)
    applied = _Applied(cluster, run)
    ephemeral: tuple[bytes, ...] = ()
    if sessions:
        from shoal.sim.metasessions import (  # noqa: PLC0415 - it imports this module
            EPHEMERAL_KEYS,
            SessionSwarm,
        )

        run.sessions = SessionSwarm(cluster, run, applied.hooks, random.Random(seed * 5_003 + 29),
                                    sessions)  # fmt: skip
        ephemeral = EPHEMERAL_KEYS
    if wild:
        run.faults.append(f"clock rates up to {drift:+.0%}")
    if observed:
        run.faults.append("3 voters, 2 observers")
    if grace < lease.lease_s:
        run.faults.append(f"a voter that left removed after {grace:.0f} s")
    attackers = attack(cluster, replay_rate)
    for i in range(n):
        cluster.start(i, rng.uniform(0.0, 1.0), [0] if i else [])
    cluster.run_until(6.0)  # formed, voters settled, a controller
    plain = _Clients(cluster, rng, clients, keys, run, duration_s - 3.0)
    if run.sessions is not None:
        run.sessions.start(duration_s - 3.0)
    if restores:  # its own random stream: the other schedules stay
        run.restores = RestoreClient(cluster, run, random.Random(seed * 8_009 + 31),
                                     [*plain.keys, *TXN_KEYS], ephemeral)  # fmt: skip
        applied.hooks.append(WatchCheck(run.violations, run.restores.stats).on_apply)
        run.restores.start(restores, cluster.now + 1.0, duration_s - 4.0)
    down: set[int] = set()
    at = cluster.now
    faults = SwarmRun(seed, n, loss, fsync_s)  # the election swarm's schedule, without leaves
    while True:
        at += rng.uniform(1.0, 4.0)
        if at >= heal_at_s - 0.5:
            break
        random_fault(cluster, rng, at, down, faults, _KINDS)
    # -- lost disks (sim/wipe.py): one run in three, its own random stream --
    wipe_rng = random.Random(seed * 6_007 + 13)
    if wipe_rng.random() < WIPE_RATE:
        schedule_wipe(cluster, wipe_rng, wipe_rng.uniform(7.0, heal_at_s - 7.0), down, run.faults)
    # --
    if fsync_s > 0:
        _crash_before_fsync(cluster, disk_rng.uniform(7.0, heal_at_s - 4.0), heal_at_s - 2.0,
                            disk_rng.uniform(0.05, 1.0), down, faults)  # fmt: skip
    if fsync_s > 0 and snap_rng.random() < 0.5:
        _crash_installing(cluster, snap_rng.uniform(0.05, 1.0), down, run, applied)
    # -- a controller paused past its lease: one run in three, its own stream --
    pause_rng = random.Random(seed * 7_001 + 17)
    if pause_rng.random() < 0.33:
        _pause_controller(cluster, pause_rng.uniform(7.0, heal_at_s - 6.0),
                          pause_rng.uniform(0.5, 3.0) * lease.lease_s, run)  # fmt: skip
    run.faults += faults.faults

    def heal_all() -> None:
        cluster.net.heal()
        for i in sorted(down):
            cluster._boot(i, [j for j in range(n) if j != i])  # noqa: SLF001
        down.clear()

    cluster.at(heal_at_s, heal_all)
    cluster.run_until(duration_s)
    settle(run.calls, cluster.now)
    applied.check(cluster)
    if run.sessions is not None:
        run.sessions.check(applied.entries)
    if run.restores is not None:
        run.restores.stats.reads_checked = check_reads(run.calls, applied.entries, run.violations)
    run.snapshots_taken = sum(m.counters.snapshots_taken for m in applied.metas)
    run.snapshots_installed = sum(m.counters.snapshots_installed for m in applied.metas)
    run.replays = sum(a.replayed for a in attackers)
    return run


def _pause_controller(cluster: SimCluster, at: float, for_s: float, run: MetaRun) -> None:
    """At `at`, pause the controller's agent for `for_s` (SIGSTOP: its
    lease runs out meanwhile, a successor is elected, and it runs on with
    what it held, its socket buffers full of what came while it slept)."""

    def pause() -> None:
        for i, node in enumerate(cluster.nodes):
            if node is not None and node.election.is_controller:
                cluster.pause(i, cluster.now, for_s)
                run.faults.append(f"{at:.1f} pause controller {i} for {for_s:.1f} s")
                return

    cluster.at(at, pause)


class _Applied:
    """Every entry any node applies, by index (state machine safety as it
    happens), and the checks at the end (module docstring)."""

    def __init__(self, cluster: SimCluster, run: MetaRun) -> None:
        self.run = run
        self.entries: dict[int, Entry] = {}
        self.metas: list[MetaLog] = []  # every node's log, each run of it
        # More checks of each entry applied: called with the node's log after it.
        self.hooks: list[Callable[[MetaLog, Entry], None]] = []
        cluster.boot_hooks.append(lambda i: self.on_boot(cluster, i))

    def on_boot(self, cluster: SimCluster, i: int) -> None:
        node = cluster.nodes[i]
        assert node is not None and node.meta is not None
        meta = node.meta
        self.metas.append(meta)
        self.run.restored += meta.snapshot is not None
        meta.on_apply = lambda entry: self.on_apply(meta, entry)

    def on_apply(self, meta: MetaLog, entry: Entry) -> None:
        first = self.entries.setdefault(entry.index, entry)
        if first != entry:
            self.run.violations.append(f"{meta.name} applied {entry} where another applied {first}")
        for hook in self.hooks:
            hook(meta, entry)

    def check(self, cluster: SimCluster) -> None:
        """No acknowledged write lost; equal states at equal revisions."""
        run, entries = self.run, self.entries
        run.committed_entries = len(entries)
        for call in run.calls:
            if call.kind == "get" or call.outcome != "ok" or call.revision not in entries:
                continue
            entry = entries[call.revision]
            expected: MetaOp = MetaDelete(call.key, call.cas)
            if call.txn is not None:
                expected = call.txn
            elif call.op is not None:
                expected = call.op
            elif call.kind == "put":
                expected = MetaPut(call.key, call.value or b"", call.cas, call.session)
            if entry.op != expected:
                run.violations.append(f"acknowledged {call.kind} {call.key!r} at revision "
                                      f"{call.revision} is not there: {entry}")  # fmt: skip
        live = sorted((n.meta.state.revision, n.name, n.meta.state) for n in cluster.nodes
                      if n is not None and n.meta is not None)  # fmt: skip
        reference = MetaState()
        for revision, name, state in live:
            while reference.revision < revision and reference.revision + 1 in entries:
                e = entries[reference.revision + 1]
                reference.apply(e.index, e.op, e.origin, e.pid)
            if reference.revision == revision and encode_state(state) != encode_state(reference):
                run.violations.append(f"{name}'s state at revision {revision} is not the "
                                      "committed entries' state")  # fmt: skip


def _crash_installing(cluster: SimCluster, reboot_s: float, down: set[int], run: MetaRun,
                      applied: _Applied) -> None:  # fmt: skip
    """Crash the first node that writes a snapshot it installed, before
    that write's fsync (its acknowledgement is lost with it), and boot it
    again `reboot_s` later."""
    n, armed, seen = cluster.n, [True], [0]

    def on_write(i: int) -> None:
        installed = sum(m.counters.snapshots_installed for m in applied.metas)
        fresh, seen[0] = installed > seen[0], installed
        if not fresh or not armed[0] or i in down or len(down) >= (n - 1) // 2:
            return
        armed[0] = False
        down.add(i)
        run.faults.append(f"{cluster.now:.3f} crash {i} installing a snapshot, before fsync")
        cluster.at(cluster.now, lambda: cluster._halt(i))  # noqa: SLF001

        def reboot() -> None:
            if i in down:
                down.discard(i)
                cluster._boot(i, [j for j in range(n) if j != i])  # noqa: SLF001

        cluster.at(cluster.now + reboot_s, reboot)

    cluster.write_hooks.append(on_write)
