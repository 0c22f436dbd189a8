"""Session clients in the metadata log's swarm (sim/meta.py), issue 38.

Each session client is an application that opens a session (a TTL of 1 to
3 virtual seconds) through its agent, writes ephemeral keys under it
(puts and compare-and-sets with `session`, shared by every session
client, so that one's key is another's to overwrite), also overwrites and
deletes them without a session, reads them linearizably, now and then
closes its session and opens another, and renews it every third of its
TTL through its agent, or through the next live one when that is down or
did not answer ("a client may renew through any agent"). A renewal
answered "ended", or a write refused for want of the session
(OUTCOME_NO_SESSION), tells it its session is gone: it opens a new one.
An open whose outcome is unknown is held until a renewal says whether the
session exists.

Some clients fail: one in four crashes (it stops, its session is never
renewed again and must expire), one in four is paused (SIGSTOP) for 1.5 to
4 TTLs and then runs on with the session it held, which has expired
meanwhile: its first call a put under it (`woken`), which must be refused
(issue 38: "a write it makes after SIGCONT under the old fence is
refused"), then a renewal, answered "ended".

What must hold is sim/sessioncheck.py's (expiries against renewals, keys
against ends on every node) and sim/sessionmodel.py's (the histories, with
each committed end an operation deleting its session's keys). `ends()`
gives those operations.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any

from shoal.metalog.core import ProposalDone, ReadDone
from shoal.metalog.events import KeepaliveDone
from shoal.metalog.messages import (
    OUTCOME_COMMITTED,
    OUTCOME_CONFLICT,
    OUTCOME_NO_SESSION,
    OUTCOME_NOT_APPLIED,
    Entry,
)
from shoal.metalog.state import END_CLOSED, MetaDelete, MetaOp, MetaPut, SessionEnd, SessionOpen
from shoal.sim.cluster import SimCluster
from shoal.sim.linearizability import Operation
from shoal.sim.metacall import Call
from shoal.sim.metamodel import Written
from shoal.sim.sessioncheck import SessionChecker, first_ends
from shoal.sim.sessionmodel import End

if TYPE_CHECKING:
    from collections.abc import Callable

    from shoal.metalog.core import MetaLog
    from shoal.sim.meta import MetaRun

# The ephemeral keys, written by session clients only (and read by them).
EPHEMERAL_KEYS = (b"eph/0", b"eph/1", b"eph/2")
TTLS_S = (1.0, 1.5, 2.0, 3.0)
FIRST_CLIENT = 100  # session clients' numbers in the history


@dataclass
class Held:
    """The session a client holds: `confirmed` once its open is known committed."""

    sid: bytes
    confirmed: bool


@dataclass
class SessionClient:
    """One application holding sessions."""

    number: int
    home: int  # the host of its agent
    ttl: float
    held: Held | None = None
    busy: bool = False  # a call in flight
    crashed: bool = False
    paused_until: float = 0.0
    woke_with: bytes = b""  # the session held when paused: on waking, a put under it first
    retrying: bool = False  # a renewal not served: one more soon, through the next agent
    via: int = 0  # renewals go through the `via`-th live agent from home
    seen: dict[bytes, int] = field(default_factory=dict)  # key -> the mod revision last seen
    writes: int = 0


@dataclass(frozen=True)
class Renewal:
    """A renewal acknowledged: sent and answered (true time), and the epoch
    of the controller that served it (None: not seen)."""

    sent: float
    answered: float
    epoch: int | None


@dataclass
class SessionStats:
    """What the session clients did, and what the log decided."""

    opened: int = 0  # opens committed
    expired: int = 0  # ends committed: expiries
    closed: int = 0  # ends committed: closes
    renewals: int = 0  # sent
    renewed: int = 0  # answered: renewed
    told_ended: int = 0  # answered: the session is ended
    not_served: int = 0  # answered: not served (no controller), or timed out
    no_session: int = 0  # writes refused for want of the session


class SessionSwarm:
    """The session clients of one run, and their checker."""

    def __init__(self, cluster: SimCluster, run: MetaRun,
                 apply_hooks: list[Callable[[MetaLog, Entry], None]], rng: random.Random,
                 count: int) -> None:  # fmt: skip
        self.cluster, self.run, self.rng = cluster, run, rng
        self.clients = [SessionClient(FIRST_CLIENT + c, c % cluster.n, rng.choice(TTLS_S))
                        for c in range(count)]  # fmt: skip
        self.waiting: dict[tuple[int, str, int], tuple[SessionClient, Call]] = {}
        # (agent, rid) -> the client, its session, when sent, the agent's
        # epoch if it leads (then it serves the renewal itself).
        self.renewing: dict[tuple[int, int], tuple[SessionClient, bytes, float, int | None]] = {}
        self.opened_at: dict[bytes, float] = {}  # session -> its open's call
        self.renewals: dict[bytes, list[Renewal]] = {}  # acknowledged
        self.stats = SessionStats()
        self.woken: list[Call] = []  # the first write of each client woken from a pause
        self.until = 0.0
        self._entries: dict[int, Entry] = {}  # the committed entries, once checked
        self.checker = SessionChecker(cluster, run.violations)
        apply_hooks.append(self.checker.on_apply)
        cluster.observers.append(self)
        cluster.boot_hooks.append(self.on_boot)

    def start(self, until: float) -> None:
        """Start every client now; they stop calling at `until`. Some crash
        or pause (module docstring)."""
        self.until = until
        now, rng = self.cluster.now, self.rng
        for c in self.clients:
            self._later(c, rng.uniform(0.0, 0.5), self._act)
            self._later(c, rng.uniform(0.5, 1.0), self._renew)
            roll = rng.random()
            if roll < 0.25:
                at = rng.uniform(now + 3.0, until - 3.0)
                self._later(c, at - now, self._crash)
                self.run.faults.append(f"{at:.1f} session client {c.number} crashes")
            elif roll < 0.5:
                at, for_s = rng.uniform(now + 3.0, until - 8.0), c.ttl * rng.uniform(1.5, 4.0)
                self._later(c, at - now, partial(self._pause, until=at + for_s))
                self.run.faults.append(f"{at:.1f} session client {c.number} paused {for_s:.1f} s")

    @staticmethod
    def _crash(c: SessionClient) -> None:
        c.crashed = True

    @staticmethod
    def _pause(c: SessionClient, until: float) -> None:
        c.paused_until = until
        c.woke_with = c.held.sid if c.held is not None and c.held.confirmed else b""

    def _later(self, c: SessionClient, after: float,
               action: Callable[[SessionClient], None]) -> None:  # fmt: skip
        self.cluster.at(self.cluster.now + after, lambda: action(c))

    def _agent(self, c: SessionClient, skip: int = 0) -> int | None:
        """The `skip`-th live, running agent from the client's own, if any."""
        n, cluster = self.cluster.n, self.cluster
        live = [i for k in range(n) if cluster.nodes[i := (c.home + k) % n] is not None
                and not cluster.is_paused(i)]  # fmt: skip
        return live[skip % len(live)] if live else None

    # -- calls ------------------------------------------------------------------

    def _act(self, c: SessionClient) -> None:
        """The client's next call (one in flight at a time)."""
        now = self.cluster.now
        if c.crashed or c.busy or now >= self.until:
            return
        if now < c.paused_until:
            self._later(c, c.paused_until - now, self._act)
            return
        node = self._agent(c)
        if node is None or (c.held is not None and not c.held.confirmed):
            self._later(c, 0.2, self._act)  # no agent, or an open to confirm
            return
        if c.held is None:
            sid = self.rng.randbytes(16)
            opening = SessionOpen(sid, int(c.ttl * 1000), f"client-{c.number}", f"node-{node}")
            self.opened_at[sid] = now
            self._call(c, node, Call(c.number, "open", b"", None, None, now, op=opening))
            return
        self._call(c, node, self._pick(c, c.held.sid, now))

    def _pick(self, c: SessionClient, sid: bytes, now: float) -> Call:
        """A call on the ephemeral keys, or the session's close."""
        rng = self.rng
        key, roll = rng.choice(EPHEMERAL_KEYS), rng.random()
        c.writes += 1
        value = b"s%d-%d" % (c.number, c.writes)
        if c.woke_with:  # after SIGCONT, under the session that expired meanwhile
            old, c.woke_with = c.woke_with, b""
            self.woken.append(call := Call(c.number, "put", key, value, None, now, session=old))
            return call
        if roll < 0.3:
            return Call(c.number, "get", key, None, None, now)
        if roll < 0.38:
            return Call(c.number, "put", key, value, None, now)  # no session: takes the key
        if roll < 0.45:
            return Call(c.number, "delete", key, None, None, now)
        if roll < 0.48:
            return Call(c.number, "close", b"", None, None, now, op=SessionEnd(sid, END_CLOSED))
        cas = None
        if roll < 0.65:
            cas = c.seen.get(key, 0) if rng.random() < 0.8 else rng.randrange(0, 50)
        return Call(c.number, "put", key, value, cas, now, session=sid)

    def _call(self, c: SessionClient, node_i: int, call: Call) -> None:
        node = self.cluster.nodes[node_i]
        assert node is not None and node.meta is not None
        local = self.cluster._local(node_i)  # noqa: SLF001 - the node's own clock
        self.run.calls.append(call)
        if call.kind == "get":
            ident = ("read", node.meta_read(call.key, local))
        else:
            op: MetaOp
            if call.op is not None:
                op = call.op
            elif call.kind == "put":
                op = MetaPut(call.key, call.value or b"", call.cas, call.session)
            else:
                op = MetaDelete(call.key, call.cas)
            ident = ("write", node.meta_propose(op, local))
        c.busy = True
        self.waiting[(node_i, *ident)] = (c, call)
        self.cluster._flush(node_i)  # noqa: SLF001

    # -- renewals ---------------------------------------------------------------

    def _renew(self, c: SessionClient, again: bool = True) -> None:
        """Renew the session held, every third of its TTL (`again`)."""
        now = self.cluster.now
        if c.crashed or now >= self.until:
            return
        if now < c.paused_until:
            if again:  # on waking, a write first (`_pick`), then this
                self._later(c, c.paused_until - now + 0.01, self._renew)
            return
        node_i = self._agent(c, c.via)
        if c.held is not None and node_i is not None:
            meta = self.cluster.nodes[node_i].meta  # type: ignore[union-attr]
            assert meta is not None
            leading = meta.epoch
            rid = meta.keepalive((c.held.sid,), self.cluster._local(node_i))  # noqa: SLF001
            self.renewing[(node_i, rid)] = (c, c.held.sid, now, leading)
            self.stats.renewals += 1
            self.cluster._flush(node_i)  # noqa: SLF001
        if again:
            self._later(c, c.ttl / 3, self._renew)

    def _retry(self, c: SessionClient) -> None:
        c.retrying = False
        self._renew(c, again=False)

    def _renewed(self, node: int, event: KeepaliveDone, now: float) -> None:
        found = self.renewing.pop((node, event.rid), None)
        if found is None:
            return
        c, sid, sent, leading = found
        held = c.held if c.held is not None and c.held.sid == sid else None
        if not event.ok:
            self.stats.not_served += 1
            c.via += 1  # through the next agent, soon
            if not c.retrying:
                c.retrying = True
                self._later(c, 0.2, self._retry)
        elif sid in event.ended:
            self.stats.told_ended += 1
            if held is not None:
                c.held = None
        else:
            self.stats.renewed += 1
            if leading is not None:  # served by the client's own agent
                self.checker.served(node)
                epoch: int | None = leading
            else:
                to = self.cluster.idents[node].addr
                epoch = self.checker.served_by.pop((to, event.rid), None)
            self.renewals.setdefault(sid, []).append(Renewal(sent, now, epoch))
            c.via = 0
            if held is not None:
                held.confirmed = True

    # -- answers ----------------------------------------------------------------

    def on_event(self, now: float, node: int, event: Any) -> None:
        """Answers to the clients' calls and renewals."""
        if isinstance(event, KeepaliveDone):
            self._renewed(node, event, now)
        elif isinstance(event, ProposalDone):
            found = self.waiting.pop((node, "write", event.pid), None)
            if found is not None:
                self._written(*found, event, now)
        elif isinstance(event, ReadDone):
            found = self.waiting.pop((node, "read", event.rid), None)
            if found is not None:
                c, call = found
                if event.ok:
                    call.outcome, call.return_at = "ok", now
                    call.read_value, call.read_mod_revision = event.value, event.mod_revision
                    call.read_revision = event.revision
                    c.seen[call.key] = event.mod_revision
                else:
                    call.outcome, call.return_at = "failed", now
                self._next(c, call)

    def _written(self, c: SessionClient, call: Call, event: ProposalDone, now: float) -> None:
        outcome = event.outcome
        if outcome == OUTCOME_COMMITTED:
            call.outcome, call.revision, call.return_at = "ok", event.revision, now
            if call.kind in ("put", "delete"):
                c.seen[call.key] = event.revision if call.kind == "put" else 0
        elif outcome == OUTCOME_CONFLICT:
            call.outcome, call.revision, call.return_at = "conflict", event.revision, now
            c.seen[call.key] = event.revision
        elif outcome == OUTCOME_NOT_APPLIED:
            call.outcome, call.return_at = "not_applied", now
        elif outcome == OUTCOME_NO_SESSION:
            call.outcome, call.return_at = "no_session", now
            self.stats.no_session += 1
        else:
            call.outcome = "unknown"
        if call.kind == "open" and isinstance(call.op, SessionOpen):
            if outcome == OUTCOME_NOT_APPLIED:
                c.held = None
            else:  # unknown: the next renewal tells whether it is open
                c.held = Held(call.op.id, outcome == OUTCOME_COMMITTED)
        elif call.kind == "close" or outcome == OUTCOME_NO_SESSION:
            c.held = None  # closed (or its end decided meanwhile), or gone
        self._next(c, call)

    def _next(self, c: SessionClient, call: Call | None = None) -> None:
        """The client's next call soon; later after one not served."""
        c.busy = False
        backoff = call is not None and call.outcome in ("not_applied", "failed")
        self._later(c, self.rng.uniform(0.2, 0.4) if backoff else self.rng.uniform(0.0, 0.05),
                    self._act)  # fmt: skip

    def on_boot(self, i: int) -> None:
        """Host `i` (re)started: what its previous run was asked is unknown."""
        for slot in [s for s in self.waiting if s[0] == i]:
            c, call = self.waiting.pop(slot)
            call.outcome = "unknown" if call.kind != "get" else "failed"
            if call.kind == "get":
                call.return_at = self.cluster.now
            if call.kind == "open" and isinstance(call.op, SessionOpen):
                c.held = Held(call.op.id, False)
            self._next(c)
        for renewal in [s for s in self.renewing if s[0] == i]:
            del self.renewing[renewal]
            self.stats.not_served += 1

    # -- what the checker needs -------------------------------------------------

    def ends(self) -> list[Operation]:
        """Each committed end as the model's operation on the keys its
        session wrote (sim/sessionmodel.py): from when its controller had
        appended it (`SessionChecker.decided_by`) to when a node first
        applied it."""
        wrote: dict[bytes, set[str]] = {}
        for call in self.run.calls:
            if call.session:
                wrote.setdefault(call.session, set()).add(call.key.decode())
        checker, ops = self.checker, []
        for sid, entry in first_ends(self._entries).items():
            if wrote.get(sid):
                keys, index = tuple(sorted(wrote[sid])), entry.index
                sent = checker.decided_by(entry)
                ops.append(Operation("log", sent, checker.applied_at[index],
                                     End(sid.hex(), index, keys), Written(index)))  # fmt: skip
        return ops

    def check(self, entries: dict[int, Entry]) -> None:
        """At the end of the run (sim/sessioncheck.py); the figures in `stats`."""
        self._entries = entries
        written = {c.value: c.session for c in self.run.calls if c.session and c.value}
        reads = [(written[c.read_value], c.read_revision, c.return_at or 0.0)
                 for c in self.run.calls
                 if c.kind == "get" and c.outcome == "ok" and c.read_value in written]  # fmt: skip
        figures = self.checker.check(entries, self.opened_at, self.renewals, reads)
        self.stats.opened, self.stats.expired = figures["opened"], figures["expired"]
        self.stats.closed = figures["closed"]
