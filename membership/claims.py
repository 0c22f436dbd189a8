"""Claims: what `Alive`, `Suspect`, `Dead` and `Leave` do to this node's view.

Theory of operation. A claim names a member, an incarnation and a state;
`MemberTable` decides whether it changes anything (the state rules live
there, SWIM §4.2), and this role decides what follows from the change:

- ALIVE -> SUSPECT starts a `SuspicionTimer` (Lifeguard §IV-B) in the
  deadline heap; every independent confirmation of it moves the deadline
  earlier and is gossiped on, so that others count it too. At the deadline
  a member still suspect is declared DEAD by this node, unless a lost
  member was heard from just before (a heal): then the verdict is held
  once, for a probe timeout, and the suspect pinged (suspicion.py, `hold`).
- A claim about ourselves at our incarnation or above is refuted: the
  incarnation goes up (persisted first: the contract's persist-before-send
  order), `Alive` is gossiped, and Lifeguard §IV-A counts the refutation
  against our local health.
- Going DEAD or LEFT keeps the member in gossip for gossip_to_dead_s and
  reaps it after dead_reap_s / left_reap_s, leaving a tombstone against
  ghosts for as long again (Serf's reconnect and tombstone timeouts).
- Corrections (ours): a stale `Suspect` or `Dead` (older than the `Alive` we
  hold) is answered with that `Alive`, to its sender only; see `correct`.

Every state change is broadcast (gossip.py); every ignored claim is counted.
"""

from __future__ import annotations

from collections.abc import Callable

from shoal.kernel.contract import Address, PersistIncarnation, Send
from shoal.kernel.deadlines import Deadlines
from shoal.kernel.outbox import Outbox
from shoal.kernel.versions import Versions, incompatible
from shoal.membership.awareness import LocalHealth
from shoal.membership.counters import SwimCounters
from shoal.membership.events import (
    MemberDied,
    MemberJoined,
    MemberLeft,
    MemberReaped,
    MemberRefused,
    MemberRefuted,
    MemberSuspected,
    MemberUpdated,
    NameConflicted,
)
from shoal.membership.gossip import Gossip
from shoal.membership.member import LocalState, Member, MemberState, NodeIdentity
from shoal.membership.messages import Alive, Dead, Leave, Suspect
from shoal.membership.probe import ProbeScheduler
from shoal.membership.profiles import SwimConfig
from shoal.membership.reconnect import Reconnects
from shoal.membership.suspicion import SuspicionTimer
from shoal.membership.table import (
    ALIVE,
    LEFT,
    SUSPECT,
    Ignored,
    IndexedSet,
    MemberTable,
    Transition,
)

# The "sender" of claims the node makes to itself (merges, its own verdicts).
LOCAL: Address = ("", 0)
_MAX_CONFLICT_REPORTS = 1024
# Corrections (see Claims.correct) per probe round, at most.
_MAX_CORRECTIONS = 64
_COUNTER_OF = {reason: "ignored_" + reason.value for reason in Ignored}


class Claims:
    """Applies state claims to the table and acts on what they changed."""

    def __init__(
        self,
        local: LocalState,
        table: MemberTable,
        config: SwimConfig,
        health: LocalHealth,
        deadlines: Deadlines,
        out: Outbox,
        counters: SwimCounters,
        gossip: Gossip,
        scheduler: ProbeScheduler,
        reconnects: Reconnects,
    ) -> None:
        """Share the node's state with the claims role.

        Args:
            local: this node's identity, incarnation and leaving flag.
            table: the view; the only place state rules are applied.
            config: suspicion, gossip and reap timing.
            health: Lifeguard's LHM, raised by refutations.
            deadlines: the node's deadline heap.
            out: the node's outbox (persist, sends, events).
            counters: the node's counters.
            gossip: where changes are broadcast.
            scheduler: probe order, which new members join.
            reconnects: told of each member we suspect or declare dead,
                which it tries again (reconnect.py).
        """
        self._local = local
        self._name = local.ident.name  # never changes (set_tags keeps it)
        self._table = table
        self._members = table.members
        self._config = config
        self._health = health
        self._deadlines = deadlines
        self._out = out
        self._send = out.sends
        self._events = out.events
        self._counters = counters
        self._gossip = gossip
        self._broadcast = gossip.broadcast
        self._recent_dead = gossip.recent_dead
        self._scheduler = scheduler
        self._reconnects = reconnects
        self.suspicions: dict[str, SuspicionTimer] = {}
        # Told of each suspicion another member raised: Prober.check, set by
        # SwimNode once the prober exists (probing.py, "Checks").
        self.check_suspect: Callable[[str, float], None] = lambda name, now: None
        self.dead = IndexedSet()  # dead (not left) members, for reconnects
        self._corrected: set[tuple[Address, str]] = set()  # this probe interval
        self._corrected_until = 0.0  # when the set above is cleared
        self._conflicts: set[tuple[str, bytes]] = set()
        self._refused: set[tuple[str, Versions]] = set()
        # Old-news alive claims not yet added to counters.ignored_stale
        # (SwimNode.counters adds them): a native int here, where the struct's
        # attribute cost a read and a write per claim, 17.8 M at 1,000
        # simulated nodes.
        self.stale_claims = 0

    # -- handlers --------------------------------------------------------------

    def on_alive(self, msg: Alive, sender: Address, now: float) -> None:
        """Someone says `msg.node` is alive at `msg.incarnation`."""
        # Old news, inline: 19 of every 20 alive claims while a cluster
        # forms (1,000 simulated nodes: 17.8 M of 18.8 M, merged rows included).
        node = msg.node
        name = node.name
        known = self._members.get(name)
        if known is not None:
            ident = known.ident
            if ((ident is node or ident.node_id == node.node_id)
                    and known.incarnation >= msg.incarnation and name != self._name):  # fmt: skip
                self.stale_claims += 1
                return
        self.alive(node, msg.incarnation, now, msg)

    def alive(self, node: NodeIdentity, incarnation: int, now: float,
              msg: Alive | None = None) -> None:  # fmt: skip
        """Apply the claim that `node` is alive at `incarnation`; `msg` is the
        `Alive` that said so, gossiped on if it changes the view (built only
        then, when the claim came from a push-pull's row)."""
        name = node.name
        if name == self._name:
            local = self._local
            if node.node_id != local.ident.node_id:
                self._report_conflict(local.ident.node_id, node)
            elif incarnation > local.incarnation and not local.leaving:
                self.refute(incarnation, now, "")  # we restarted; they remember more
            return
        known = self._members.get(name)
        if known is not None and known.incarnation >= incarnation:
            if known.ident is node or known.ident.node_id == node.node_id:
                self._counters.ignored_stale += 1  # the common case: old news
                return
        result = self._table.apply_alive(node, incarnation, now)
        if isinstance(result, Ignored):
            if result is Ignored.INCOMPATIBLE:
                self.refuse(node, incarnation, now)
            elif result is Ignored.NAME_CONFLICT:
                known = self._table.get(name)
                assert known is not None
                self._report_conflict(known.ident.node_id, node)
            self._count(result)
            return
        m = self._table.get(name)
        assert m is not None
        timer = self.suspicions.pop(name, None)
        if timer is not None and result is Transition.REFUTED:
            # a suspect is back: maybe a cut healed
            self._reconnects.heard(name, now, timer.started_at)
        if result is Transition.JOINED:
            if name in self.dead:
                self._reconnects.heard(name, now)  # a dead member is back: as above
                self.dead.discard(name)
            self._recent_dead.discard(name)
            self._scheduler.insert(name)
            self._events.append(MemberJoined(m.view()))
        elif result is Transition.REFUTED:
            self._events.append(MemberRefuted(m.view()))
        elif result is Transition.UPDATED:
            self._events.append(MemberUpdated(m.view()))
        self._broadcast(name, msg if msg is not None else Alive(incarnation, node), now)

    def on_suspect(self, msg: Suspect, sender: Address, now: float) -> None:
        """`msg.source` suspects `msg.node` (a first suspicion or a confirmation)."""
        if msg.node == self._name:
            self._about_me(msg.incarnation, now, msg.source, sender)
            return
        result = self._table.apply_suspect(msg.node, msg.incarnation, now)
        if result is Transition.SUSPECTED:
            m = self._table.get(msg.node)
            assert m is not None
            timer = SuspicionTimer.begin(now, msg.source, self._config, self._table.num_live())
            self.suspicions[msg.node] = timer
            self._deadlines.push(timer.deadline_at, self._due_suspicion, msg.node)
            if msg.source == self._name:
                self._counters.suspicions_raised += 1
            self._reconnects.suspected(msg.node, msg.source == self._name, now)
            self._events.append(MemberSuspected(m.view(), msg.source))
            self._broadcast(msg.node, msg, now)
            if msg.source != self._name:
                self.check_suspect(msg.node, now)
            return
        if result is Ignored.ALREADY:
            running = self.suspicions.get(msg.node)
            if msg.source == self._name:
                self._reconnects.suspected(msg.node, True, now)
            if running is not None and running.confirm(msg.source):
                self._deadlines.push(running.deadline_at, self._due_suspicion, msg.node)
                self._broadcast(msg.node, msg, now)  # others count confirmations too
            return
        assert isinstance(result, Ignored)
        self._count(result)
        if result is Ignored.STALE:
            self.correct(msg.node, msg.incarnation, sender, now)

    def on_dead(self, msg: Dead, sender: Address, now: float) -> None:
        """`msg.source` declares `msg.node` dead."""
        if msg.node == self._name:
            self._about_me(msg.incarnation, now, msg.source, sender)
            return
        result = self._table.apply_dead(msg.node, msg.incarnation, now, left=False)
        if isinstance(result, Ignored):
            self._count(result)
            if result is Ignored.STALE:
                self.correct(msg.node, msg.incarnation, sender, now)
            return
        m = self._member_down(msg.node, now)
        self.dead.add(msg.node)
        self._reconnects.died(msg.node, now)
        if msg.source == self._name:
            self._counters.deaths_declared += 1
        self._events.append(MemberDied(m.view(), msg.source))
        self._broadcast(msg.node, msg, now)

    def on_leave(self, msg: Leave, sender: Address, now: float) -> None:
        """`msg.node` says it is leaving (or a merge says it has left)."""
        if msg.node == self._name:
            local = self._local
            if msg.incarnation >= local.incarnation and not local.leaving:
                self.refute(msg.incarnation, now, msg.node)
            return
        result = self._table.apply_dead(msg.node, msg.incarnation, now, left=True)
        if isinstance(result, Ignored):
            self._count(result)
            return
        m = self._member_down(msg.node, now)
        self.dead.discard(msg.node)
        self._events.append(MemberLeft(m.view()))
        self._broadcast(msg.node, msg, now)

    def _about_me(self, claimed: int, now: float, source: str, sender: Address) -> None:
        """A suspicion or death of ours: refute it, or correct a stale one."""
        local = self._local
        if claimed >= local.incarnation and not local.leaving:
            self.refute(claimed, now, source)
            # and the claimant is told at once, not by gossip: after a cut,
            # its timer may be about to run out (see `correct`)
            self.correct(self._name, claimed, sender, now)
        else:
            self.correct(self._name, claimed, sender, now)

    # -- transitions -----------------------------------------------------------

    def _member_down(self, name: str, now: float) -> Member:
        m = self._table.get(name)
        assert m is not None
        self.suspicions.pop(name, None)
        self._gossip.gossip_to_dead(name, now)
        config = self._config
        reap_s = config.left_reap_s if m.state is LEFT else config.dead_reap_s
        self._deadlines.push(now + reap_s, self._due_reap, (name, now))
        return m

    def _due_suspicion(self, name: str, now: float) -> None:
        timer = self.suspicions.get(name)
        if timer is None or timer.deadline_at > now:
            return  # refuted, or a confirmation moved the deadline
        m = self._table.get(name)
        if m is None or m.state is not SUSPECT:
            return
        config = self._config
        if timer.hold(self._reconnects.heard_at, now, config.probe_interval_s,
                      config.probe_timeout_s):  # fmt: skip
            # a lost member was heard from just before: maybe a heal
            self._counters.suspicions_held += 1
            self._deadlines.push(timer.deadline_at, self._due_suspicion, name)
            self._reconnects.ping(name)  # with the suspicion: a live suspect refutes to us
            return
        self.on_dead(Dead(m.incarnation, name, self._name), LOCAL, now)

    def _due_reap(self, arg: tuple[str, float], now: float) -> None:
        name, down_at = arg
        m = self._table.get(name)
        if m is None or self._table.down_at(name) != down_at:
            return  # back, or down again since
        self._table.reap(name)
        self.dead.discard(name)
        self._recent_dead.discard(name)
        self._events.append(MemberReaped(m.view()))
        reap_s = self._config.left_reap_s if m.state is LEFT else self._config.dead_reap_s
        self._deadlines.push(now + reap_s, self._due_tombstone, (name, m.ident.node_id))

    def _due_tombstone(self, arg: tuple[str, bytes], now: float) -> None:
        self._table.forget_tombstone(*arg)

    def refute(self, claimed: int, now: float, source: str) -> None:
        """Someone says we are suspect, dead or gone: outbid the claim."""
        self._counters.refutations += 1
        self._health.apply(1)
        self.bump_incarnation(max(self._local.incarnation, claimed), now)
        self._events.append(MemberRefuted(self._table.me.view(), source))

    def bump_incarnation(self, above: int, now: float) -> None:
        """Become alive at incarnation `above + 1`: persist it, then gossip it."""
        local = self._local
        local.incarnation = above + 1
        self._out.persist(PersistIncarnation(local.incarnation))
        self._table.set_self(MemberState.ALIVE, local.incarnation, now, local.ident)
        self._broadcast(self._name, Alive(local.incarnation, local.ident), now)

    # -- corrections and reports -------------------------------------------------

    def correct(self, name: str, claimed: int, sender: Address, now: float) -> None:
        """`sender` spreads a suspicion (or death) of `name` older than the
        refutation we hold: send it that `Alive`, directly.

        Ours; memberlist drops the stale claim. But its sender missed the
        refutation (each update reaches a member only by chance, about λ·log N
        sends in all), and without this it learns of it from a push-pull or a
        ping of the member it suspects, after its suspicion has expired and it
        has declared a live member dead: in the simulator (60 nodes, 5 % loss)
        one node held a refuted suspicion for 44 s, then reported the member
        failed. Each (sender, member) pair is corrected at most once per probe
        interval, `_MAX_CORRECTIONS` pairs at most, so a refutation racing its
        suspicion costs at most one datagram per stale claim received.

        The budget renews every probe interval of time, not every probe
        round: rounds stretch up to 8-fold with Lifeguard's local health,
        and a member just back from a cut has both a poor health score and
        dozens of stale claims about itself to answer. Renewed by round, it
        answered the first 64 at a heal and then none for up to 8 s, while
        members that held it suspect at its old incarnation declared it
        dead (60 simulated nodes, 30 | 30 cut, seed 1: 6.1 s to heal).
        Claims about ourselves are answered beyond the budget (once per
        sender and interval still): at a heal the budget went on claims
        about others, and a suspect that acked a ping carrying its stale
        suspicion left it unanswered for 3.9 s (60 nodes, 30 | 30, 3 s).
        """
        corrected = self._corrected
        if now >= self._corrected_until:
            corrected.clear()
            self._corrected_until = now + self._config.probe_interval_s
        if sender == LOCAL or self._local.leaving:
            return
        if len(corrected) >= _MAX_CORRECTIONS and name != self._name:
            return
        m = self._table.get(name)
        if m is None or m.state is not ALIVE or m.incarnation <= claimed:
            return
        key = (sender, name)
        if key in corrected:
            return
        corrected.add(key)
        self._counters.corrections_sent += 1
        self._send.append(Send(sender, (Alive(m.incarnation, m.ident),)))

    def refuse(self, node: NodeIdentity, incarnation: int, now: float) -> None:
        """`node` announces versions we cannot talk with: report it once,
        and if we hold it live under an older identity (it restarted on an
        incompatible build), declare it dead at the new incarnation, so that
        it stops counting toward a quorum here."""
        mine = self._table.versions
        key = (node.name, node.versions)
        if key not in self._refused and len(self._refused) < _MAX_CONFLICT_REPORTS:
            self._refused.add(key)
            protocols = incompatible(mine, node.versions)
            self._events.append(MemberRefused(node.name, node.addr, node.versions, mine,
                                              tuple(protocols)))  # fmt: skip
        known = self._members.get(node.name)
        if (known is not None and known.ident.node_id == node.node_id
                and known.state in (ALIVE, SUSPECT)
                and incarnation > known.incarnation):  # fmt: skip
            self.on_dead(Dead(incarnation, node.name, self._name), LOCAL, now)

    def _report_conflict(self, known_id: bytes, claim: NodeIdentity) -> None:
        key = (claim.name, claim.node_id)
        if key in self._conflicts or len(self._conflicts) >= _MAX_CONFLICT_REPORTS:
            return
        self._conflicts.add(key)
        self._events.append(NameConflicted(claim.name, known_id, claim.node_id, claim.addr))

    def _count(self, reason: Ignored) -> None:
        self._counters.bump(_COUNTER_OF[reason])
