"""The controller's notices: how every member learns who the controller is.

Theory of operation. Notices are not acknowledged. A new controller tells
every live member at once and `_NOTICE_REPEATS` more times, `_NOTICE_GAP_S`
apart; then every renewal that wins its majority tells every live member
again (`Notices.tell`), with the time left in the lease it just won, and
`notice_interval_s` after the last time it told everyone, tells everyone
again (a backstop, which a winning renewal pushes back: it would only
repeat that renewal's notice).

The other side is `KnownController`: the controller a member knows of,
`known` = (name, epoch), and until when. A notice of our configuration (or
a newer one, adopted first) sets it, unless it is older than the one known.
It holds **only as long as the lease the notice vouches for** (its
`remaining_ms`, counted from its arrival): a member never names a
controller whose lease nobody told it about (issue 28: a minority member
named a controller for 17 s after its lease had ended). The next notice
comes one renewal later, well inside that; a member that has not had it by
`renew_interval_s + _QUERY_AFTER_S` (a lost datagram) asks the controller
for a fresh one (`NoticeQuery`), twice at most, so one loss does not make
it report no controller for a moment. It is forgotten when that time runs
out, when the view reports the controller dead or left, or when the
controller releases its lease. Every change is a `ControllerChanged` event.

A member that has just started knows no controller, and the next renewal's
notice may be a second away: a restarted agent forwarded nothing (its
sessions' renewals among it) for 1.5-2.4 s after the signal. So until it
accepts its first notice, it asks each voter of the configuration it
stored for one (`NoticeQuery`) as soon as its view shows that voter live
(`ask_voters`, once per voter): the controller is always one of them, and
the others ignore the query. The answer is an ordinary notice, accepted
by the rules above, vouching for the lease it names and no more (issue 28
holds as it did). The member asks rather than the controller telling it:
a restart by kill -9 within the failure detector's time changes nothing
the controller's view reports (the same member, alive, at a higher
incarnation), and at most `max_voters` datagrams go, once per start.

A voter's renewals are not knowledge: a controller cut off from its
majority goes on renewing with the voters it still reaches, and they cannot
tell from a renewal whether it won. Only the controller knows its lease,
and a notice carries it.

Copies (the network's duplicates, or a replayer's captures) change nothing:
a notice that is not newer, by (epoch, seq), than the last one accepted
extends nothing, and a notice naming a holder this member's view reports
dead or left is ignored, so a dead controller is never named again by its
own old notices. An accepted notice also tells this node's voter who holds
the epoch it names (`voter.Voter.vouch`).
"""

from __future__ import annotations

from shoal.election.campaign import SendFn
from shoal.election.config import LeaseConfig
from shoal.election.decisions import (
    Adopt,
    Decisions,
    ElectionView,
    Follow,
    SawEpoch,
    Superseded,
    Vouch,
    Wake,
)
from shoal.election.events import ControllerChanged, ElectionCounters
from shoal.election.messages import ControllerNotice, NoticeQuery
from shoal.election.ranking import Standing
from shoal.election.view import Liveness, LivenessFn, ViewFn
from shoal.kernel.outbox import Outbox

# A new controller's notice goes out this many more times, `_NOTICE_GAP_S`
# apart, before the slow `notice_interval_s` pace: notices are not
# acknowledged, and one lost would leave a member without a controller (and
# `shoal controller` without an answer) until the next. With 1 % loss and
# notices 5 s apart the simulator showed 2 % of failovers taking 6.5 s
# instead of 2 s. The gap was one renewal interval; at 1 s that made a lost
# first notice cost 1 s (kill -9 at 3 % loss, 300 seeds: all survivors knew
# the successor in p99 2.98 s, max 3.03 s); at 0.25 s, p99 2.25 s, max 2.40 s.
_NOTICE_REPEATS = 2
_NOTICE_GAP_S = 0.25
# A member asks for a fresh notice when none came this long after the next
# one was due (one renewal after the last), and again as long after that:
# both answers still arrive inside the lease the last notice vouched for
# (1.96 s at the defaults; the asks go at 1.2 s and 1.4 s).
_QUERY_AFTER_S = 0.2
_QUERIES = 2
_LIVE = Liveness.LIVE


class Notices:
    """When to tell everyone again, and telling them."""

    def __init__(self, name: str, notice_interval_s: float, view: ViewFn,
                 send_to: SendFn) -> None:  # fmt: skip
        """Args:
        name: this node's name.
        notice_interval_s: the backstop pace of notices to everyone.
        view: the members this node knows.
        send_to: how a notice reaches a member.
        """
        self.name = name
        self.notice_interval_s = notice_interval_s
        self.notice_at = 0.0  # when everyone is told next
        self._repeats_left = 0  # fast repeats of a new controller's notice
        self._view = view
        self._send_to = send_to

    def elected(self) -> None:
        """A new lease: the next notices to everyone come fast."""
        self._repeats_left = _NOTICE_REPEATS

    def tell_everyone(self, now: float, notice: ControllerNotice) -> None:
        """Send `notice` to every live member, and set when to again."""
        self.tell(notice, now)  # (sets the slow pace when no repeat is left)
        if self._repeats_left > 0:
            self._repeats_left -= 1
            self.notice_at = now + _NOTICE_GAP_S

    def tell(self, notice: ControllerNotice, now: float) -> None:
        """Send `notice` to every live member (a renewal won: the lease it
        vouches for is longer now). Everyone was just told: the backstop
        waits a whole `notice_interval_s` again (it sent a redundant round,
        0.063 datagrams per agent per second at N = 20, bench/datagram_mix.py),
        unless a new controller's fast repeats are still due."""
        if self._repeats_left == 0:
            self.notice_at = now + self.notice_interval_s
        for m in self._view():
            if m.liveness is _LIVE and m.name != self.name:
                self._send_to(m.name, notice)


class KnownController:
    """The controller this member knows of (`known`), until `until`."""

    def __init__(self, name: str, config: LeaseConfig, out: Outbox, counters: ElectionCounters,
                 standing: Standing, liveness_of: LivenessFn | None, view: ElectionView,
                 decisions: Decisions, send_to: SendFn) -> None:  # fmt: skip
        """Args:
        name: this node's name.
        config: timing (`renew_interval_s`).
        out: the election's outbox (its `ControllerChanged` events).
        counters: the election's counters.
        standing: when this node stands (a new controller clears its leaver).
        liveness_of: one member's liveness, or None (see `view.LivenessFn`).
        view: what a notice is checked against (our configuration).
        decisions: where the role records what the node is to do.
        send_to: how a `NoticeQuery` reaches the controller.
        """
        self.name, self.config, self.out, self.counters = name, config, out, counters
        self.standing = standing
        self.known: tuple[str, int] | None = None  # (controller, epoch)
        self.until = 0.0  # when `known` is forgotten unless heard of again
        self.ask_at = float("inf")  # when to ask the controller for a fresh notice
        self._asks_left = 0
        self._send_to = send_to
        self._last_notice = (0, 0)  # (epoch, seq) of the newest notice accepted
        self.level = 0  # the feature level of the newest notice accepted (0: none yet)
        self._liveness_of = liveness_of
        self._view = view
        self._decide = decisions.append
        self._asked_voters: set[str] = set()  # asked for a notice since start (`ask_voters`)

    def on_notice(self, msg: ControllerNotice, now: float, adopted: bool = False) -> Adopt | None:
        """A controller's notice (see the module docstring). `Adopt`: its
        newer configuration is to be adopted first, then the notice handed
        in again (`adopted`). What it says of our own lease and grant, and
        knowing its holder, are decisions, in that order (`Superseded`,
        `Follow`, `Vouch`)."""
        voters = self._view.voters
        if not adopted and msg.config.supersedes(voters):
            return Adopt(msg.config)
        if not adopted and msg.config != voters:
            return None  # a notice from the lineage or configuration we left behind
        self._decide(SawEpoch(msg.epoch))
        if msg.holder == self.name:
            return None
        if self.known is not None and self.known[1] > msg.epoch:
            self.counters.stale_messages += 1
            return None
        if (msg.epoch, msg.seq) <= self._last_notice or self._gone(msg.holder):
            self.counters.stale_messages += 1
            return None
        self._last_notice = (msg.epoch, msg.seq)
        self.level = msg.level
        if not adopted:
            self._decide(Superseded(msg.epoch))  # (before `Follow`: stepping down clears it)
        self._decide(Follow(msg))
        if not adopted:  # an epoch of another lineage says nothing of ours
            self._decide(Vouch(msg.holder, msg.epoch, msg.seq))
        self._decide(Wake())
        return None

    def follow(self, msg: ControllerNotice, now: float) -> None:
        """Know the holder of `msg` as the controller, for as long as the
        lease it vouches for (a notice `on_notice` accepted)."""
        self.set((msg.holder, msg.epoch), msg.epoch)
        self.until = now + msg.remaining_ms / 1000  # what the notice vouches for, no more
        self.ask_at = now + self.config.renew_interval_s + _QUERY_AFTER_S
        self._asks_left = _QUERIES

    def ask(self, now: float) -> None:
        """Ask the controller for a fresh notice, if the next one is late."""
        known = self.known
        if known is None or known[0] == self.name or now < self.ask_at:
            return
        self.counters.notice_queries += 1
        self._send_to(known[0], NoticeQuery(known[1]))
        self._asks_left -= 1
        self.ask_at = now + _QUERY_AFTER_S if self._asks_left > 0 else float("inf")

    def _gone(self, holder: str) -> bool:
        """Whether the view reports `holder` dead or left."""
        liveness = None if self._liveness_of is None else self._liveness_of(holder)
        return liveness is not None and liveness is not _LIVE

    def set(self, known: tuple[str, int] | None, epoch: int) -> None:
        """Know `known` now (None: no controller), after `epoch`."""
        if known is not None:
            self.standing.released_by = ""  # a new controller: the last leaver is history
        if known != self.known:
            self.known = known
            self.out.events.append(ControllerChanged(known[0] if known else "", epoch))

    def view_changed(self) -> None:
        """Forget a controller the view reports dead or left; just started,
        ask the voters now live for a notice."""
        known = self.known
        if known is not None and known[0] != self.name and self._gone(known[0]):
            self.set(None, known[1])
        if self._last_notice == (0, 0) and self.known is None:
            self.ask_voters()

    def ask_voters(self) -> None:
        """Until the first notice is accepted, ask each voter of our
        configuration for one, once, when our view shows it live (module
        docstring): the controller answers with its notice at once."""
        voters, liveness_of = self._view.voters, self._liveness_of
        if voters is None or liveness_of is None:
            return
        asked = self._asked_voters
        for name in voters.voters:
            if name != self.name and name not in asked and liveness_of(name) is _LIVE:
                asked.add(name)
                self.counters.notice_queries += 1
                self._send_to(name, NoticeQuery(0))

    def expire(self, now: float) -> None:
        """Forget a controller not heard of in time (a follower only)."""
        if self.known is not None and now >= self.until:
            self.set(None, self.known[1])

    def released(self, holder: str, epoch: int) -> None:
        """`holder` released its lease of `epoch`: forget it if it is ours."""
        if self.known is not None and self.known[0] == holder:
            self.set(None, epoch)
