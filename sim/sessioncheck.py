"""What must hold of sessions in the metadata log's swarm (sim/metasessions.py).

Theory of operation. A session's end (`SessionEnd`: its client's close, or
the controller's expiry) is an entry; every node deletes the session's
keys when it applies it. Checked here, beside the linearizability of the
clients' histories (sim/sessionmodel.py, where each committed end is an
operation that deletes its session's keys):

- **No ephemeral key outlives its session's committed end**, on every
  node's applied state: after each entry a node applies, every key it holds
  owned by a session belongs to an open one (`on_apply`); and in reads: a
  read served at a revision at or after the end of the session a value was
  written under never returns that value (`check`).
- **A session's keys vanish only by its end, a delete, or an overwrite
  without the session**: per node, the keys owned before an entry and not
  owned by the same session after it are explained by that entry.
- **None is deleted while its session is alive and renewed in time**: an
  `END_EXPIRED` of session S appended by the controller of epoch E by true
  time T (the first time that controller sent it, or a node applied it,
  whichever came first) is a violation if any of
  these is later than T + tolerance, with `ttl` S's TTL:
    - t + ttl, for an acknowledged renewal of S sent (by its client) at t;
    - t + ttl, for the call of S's open at t (its TTL runs from its open);
    - start(E) + ttl, where start(E) is when E's controller started
      leading (it reported itself controller of E, or first sent an append
      of E, whichever came first: it leads the log at or after the first,
      before the second): a new controller gives every session a full TTL
      from its start, whatever the old one knew.
  The tolerance is ttl x (1 - 1/(1 + d)) for the fastest clock rate error
  d the run drew (a controller whose clock runs fast counts a TTL in less
  true time), and a millisecond. No answer timeout is added: a renewal is
  counted from when its client sent it, which is before the controller
  received it and moved the deadline, however long the answer took.
  These rules hold only while clocks keep the drift bound the leases are
  built on: where the run draws rates far outside it (one run in four,
  sim/meta.py), a controller whose clock runs slow may still believe in
  its lease, and serve renewals, after its successor has started. There
  only the renewals served by the expiring controller itself count (and
  the grace and the open, as everywhere).
- **A renewal is served only by a controller whose lease holds** on its
  own clock (`served`): one woken from a pause past its lease, before its
  timers have told it so, must not answer for a successor.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from shoal.election.events import ControllerChanged
from shoal.kernel.contract import Address, Channel
from shoal.metalog.core import MetaLog
from shoal.metalog.messages import Append, Entry, KeepaliveResult
from shoal.metalog.state import (
    END_CLOSED,
    END_EXPIRED,
    MetaDelete,
    MetaGet,
    MetaOp,
    MetaPut,
    MetaRestore,
    MetaTxn,
    SessionEnd,
    SessionOpen,
)
from shoal.sim.cluster import SimCluster

if TYPE_CHECKING:
    from shoal.sim.metasessions import Renewal

# Floating point and the simulator's rounding of deadlines to true time.
_SLACK_S = 0.001
# Violations of one kind reported per run, at most (one is enough to fail it).
_REPORTED = 5


class SessionChecker:
    """Watches every node's applied entries and the controllers' appends."""

    def __init__(self, cluster: SimCluster, violations: list[str]) -> None:
        self.cluster, self.violations = cluster, violations
        self.applied_at: dict[int, float] = {}  # index -> first applied anywhere
        self.sent_at: dict[tuple[int, int], float] = {}  # an end's (epoch, index) -> first sent
        self.epoch_start: dict[int, float] = {}  # epoch -> its controller's start, at the latest
        # A renewal answered by a controller (to, rid) -> that controller's epoch.
        self.served_by: dict[tuple[Address, int], int] = {}
        self._owned: dict[MetaLog, tuple[int, dict[bytes, bytes]]] = {}
        self._reported: dict[str, int] = {}
        cluster.send_hooks.append(self.on_send)
        cluster.observers.append(self)

    def on_event(self, now: float, node: int, event: Any) -> None:
        """A node that reports itself controller of an epoch leads from now on."""
        if type(event) is ControllerChanged and event.node == self.cluster.idents[node].name:
            self.epoch_start.setdefault(event.epoch, now)

    def on_send(self, src: int, to: Address, messages: tuple[Any, ...], channel: Channel) -> None:
        """A controller's appends: when its epoch started, when it sent each
        end; its renewals: served under a lease."""
        now = self.cluster.now
        for msg in messages:
            if type(msg) is KeepaliveResult and msg.ok:
                self.served(src, (to, msg.rid))
            elif type(msg) is Append:
                self.epoch_start.setdefault(msg.epoch, now)
                for entry in msg.entries:
                    if type(entry.op) is SessionEnd:
                        self.sent_at.setdefault((entry.epoch, entry.index), now)

    def served(self, i: int, renewal: tuple[Address, int] | None = None) -> None:
        """Host `i` served a renewal (`renewal`: to whom, which; None: its
        own client's): its lease must hold on its clock; its epoch noted."""
        node = self.cluster.nodes[i]
        assert node is not None and node.meta is not None
        lease = node.election
        if lease.lease_epoch is None or self.cluster._local(i) >= lease.lease_end_at:  # noqa: SLF001
            self._violation("lease", f"{node.name} served a renewal at {self.cluster.now:.3f} "
                            f"after its lease ended (epoch {node.meta.epoch})")  # fmt: skip
        if renewal is not None and node.meta.epoch is not None:
            self.served_by[renewal] = node.meta.epoch

    def on_apply(self, meta: MetaLog, entry: Entry) -> None:
        """After `meta` applied `entry`: its owned keys, checked."""
        self.applied_at.setdefault(entry.index, self.cluster.now)
        state = meta.state
        owned = {key: held.session for key, held in state.keys.items() if held.session}
        last = self._owned.get(meta)
        if last is not None and last[0] == entry.index - 1:  # not across a snapshot
            for key, sid in last[1].items():
                if owned.get(key) != sid and not explains(entry.op, key, sid):
                    text = f"{key!r} of session {sid.hex()[:8]} went at {entry.index}"
                    by = "a restore" if type(entry.op) is MetaRestore else entry.op
                    self._violation("vanished", f"{meta.name}: {text} by {by}")
        for key, sid in owned.items():
            if sid not in state.sessions:
                text = f"{key!r} of session {sid.hex()[:8]} at revision {entry.index}"
                self._violation("outlived", f"{meta.name} holds {text}, after its end")
        self._owned[meta] = (entry.index, owned)

    def decided_by(self, end: Entry) -> float:
        """A time by which the controller had appended `end`: when it first
        sent it, or when a node first applied it if sooner (a controller
        that is the only voter commits before it sends)."""
        applied = self.applied_at[end.index]
        return min(self.sent_at.get((end.epoch, end.index), applied), applied)

    def _violation(self, kind: str, text: str) -> None:
        seen = self._reported.get(kind, 0)
        self._reported[kind] = seen + 1
        if seen < _REPORTED:
            self.violations.append(text)

    def check(self, entries: dict[int, Entry], opened_at: dict[bytes, float],
              renewals: dict[bytes, list[Renewal]],
              reads: Iterable[tuple[bytes, int, float]]) -> dict[str, int]:  # fmt: skip
        """At the end of the run: expiries against renewals, reads against
        ends (`reads`: the session a value read was written under, the
        revision the read was served at, when it returned). Returns the
        committed opens, expiries and closes."""
        ttls = {e.op.id: e.op.ttl_ms / 1000 for e in entries.values() if type(e.op) is SessionOpen}
        ends = first_ends(entries)
        drift = max(0.0, *(c.drift for c in self.cluster.clocks))
        bound = self.cluster.lease_config.drift_ratio_max
        wild = max(abs(c.drift) for c in self.cluster.clocks) > bound
        for sid, end in sorted(ends.items(), key=lambda item: item[1].index):
            assert isinstance(end.op, SessionEnd)
            if end.op.reason == END_EXPIRED and sid in ttls:
                ttl = ttls[sid]
                served = [r for r in renewals.get(sid, []) if not wild or r.epoch == end.epoch]
                self._expiry(sid, end, ttl, ttl * (1 - 1 / (1 + drift)) + _SLACK_S,
                             opened_at.get(sid), served)  # fmt: skip
        for sid, revision, returned in reads:
            ended = ends.get(sid)
            if ended is not None and ended.index <= revision:
                self._violation("read", f"a read served at revision {revision} (returned "
                                f"{returned:.3f}) saw a key of session {sid.hex()[:8]}, "
                                f"ended at {ended.index}")  # fmt: skip
        reasons = [e.op.reason for e in ends.values() if isinstance(e.op, SessionEnd)]
        return {"opened": len(ttls), "expired": reasons.count(END_EXPIRED),
                "closed": reasons.count(END_CLOSED)}  # fmt: skip

    def _expiry(self, sid: bytes, end: Entry, ttl: float, tolerance: float,
                opened: float | None, renewals: list[Renewal]) -> None:  # fmt: skip
        """An expiry appended no sooner than its session's TTL allows."""
        at = self.decided_by(end)
        floors = [(f"renewal sent at {r.sent:.3f} (epoch {r.epoch})", r.sent) for r in renewals]
        if opened is not None:
            floors.append((f"open called at {opened:.3f}", opened))
        start = self.epoch_start.get(end.epoch)
        if start is not None:
            floors.append((f"epoch {end.epoch}'s controller started at {start:.3f}", start))
        for what, t in floors:
            if t + ttl > at + tolerance:
                when = f"expired at {at:.3f} by epoch {end.epoch}'s controller"
                why = f"before its TTL from its {what} (tolerance {tolerance:.3f})"
                self._violation("expiry", f"session {sid.hex()[:8]} (ttl {ttl:g} s) {when}, {why}")
                return


def first_ends(entries: dict[int, Entry]) -> dict[bytes, Entry]:
    """Each session's end, the first committed: a later one (an expiry
    appended twice across a failover, a close after an expiry) ends
    nothing (NoSession)."""
    ends: dict[bytes, Entry] = {}
    for index in sorted(entries):
        entry = entries[index]
        if type(entry.op) is SessionEnd:
            ends.setdefault(entry.op.id, entry)
    return ends


def explains(op: MetaOp | MetaGet, key: bytes, sid: bytes) -> bool:
    """Whether entry `op` may take `key` from session `sid`: its end, a
    delete of the key, or a write of it without that session."""
    if type(op) is SessionEnd:
        return op.id == sid
    if type(op) is MetaDelete:
        return op.key == key
    if type(op) is MetaPut:
        return op.key == key and op.session != sid
    if type(op) is MetaTxn:
        return any(explains(o, key, sid) for o in (*op.success, *op.failure))
    return False
