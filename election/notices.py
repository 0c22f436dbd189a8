"""The controller's notices: how every member learns who the controller is.

Theory of operation. Notices are not acknowledged. A new controller tells
every live member at once and `_NOTICE_REPEATS` more times, `_NOTICE_GAP_S`
apart, then every `notice_interval_s`. Between those, a member it has not
told in this lease (one that joined, came back from dead, or was on the
other side of a partition) is told at the next renewal, when the view has
changed (`Notices.view_changed`).

The other side is `KnownController`: the controller a member knows of,
`known` = (name, epoch), and until when. A notice of our configuration (or
a newer one, adopted first) sets it, unless it is older than the one known;
it holds for the lease the notice reports plus `lease_s`, and at least
`notice_interval_s + lease_s` (until the next notice is surely due). A
renewal granted by this member extends it; it is forgotten when that time
runs out, when the view reports the controller dead or left, or when the
controller releases its lease. Every change is a `ControllerChanged` event.

Copies (the network's duplicates, or a replayer's captures) change nothing:
a notice that is not newer, by (epoch, seq), than the last one accepted
extends nothing, and a notice naming a holder this member's view reports
dead or left is ignored, so a dead controller is never named again by its
own old notices.
"""

from __future__ import annotations

from typing import Protocol

from shoal.election.campaign import SendFn
from shoal.election.config import LeaseConfig
from shoal.election.events import ControllerChanged, ElectionCounters
from shoal.election.messages import ControllerNotice
from shoal.election.ranking import Standing
from shoal.election.view import Liveness, LivenessFn, ViewFn
from shoal.election.voters import VoterConfig
from shoal.kernel.contract import Address
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
_LIVE = Liveness.LIVE


class Notices:
    """Who has been told, and when to tell everyone again."""

    def __init__(self, name: str, notice_interval_s: float, view: ViewFn,
                 send_to: SendFn) -> None:  # fmt: skip
        """Args:
        name: this node's name.
        notice_interval_s: the slow pace of notices to everyone.
        view: the members this node knows.
        send_to: how a notice reaches a member.
        """
        self.name = name
        self.notice_interval_s = notice_interval_s
        self.notice_at = 0.0  # when everyone is told next
        self._repeats_left = 0  # fast repeats of a new controller's notice
        # Live members sent a notice in this lease (see `tell`), and whether
        # the view changed since it looked.
        self._told: set[str] = set()
        self.dirty = False
        self._view = view
        self._send_to = send_to

    def elected(self) -> None:
        """A new lease: the next notices to everyone come fast."""
        self._repeats_left = _NOTICE_REPEATS

    def view_changed(self) -> None:
        """Someone may not have been told."""
        self.dirty = True

    def tell_everyone(self, now: float, notice: ControllerNotice) -> None:
        """Send `notice` to every live member, and set when to again."""
        if self._repeats_left > 0:
            self._repeats_left -= 1
            self.notice_at = now + _NOTICE_GAP_S
        else:
            self.notice_at = now + self.notice_interval_s
        self.tell(notice, everyone=True)

    def tell(self, notice: ControllerNotice, everyone: bool) -> None:
        """Send `notice` to every live member, or (not `everyone`) only to
        those not told in this lease."""
        self.dirty = False
        told, live = self._told, set()
        for m in self._view():
            if m.liveness is _LIVE and m.name != self.name:
                live.add(m.name)
                if everyone or m.name not in told:
                    self._send_to(m.name, notice)
        self._told = live  # a member that dies and comes back is told again


class NoticeHost(Protocol):
    """What receiving a notice asks of the rest of the node (`LeaseElection`)."""

    voters: VoterConfig | None  # the configuration this node has adopted

    def adopt(self, config: VoterConfig, now: float) -> None:
        """Adopt a newer configuration (written before any answer leaves)."""

    def saw_epoch(self, epoch: int) -> None:
        """`epoch` exists: campaign above it."""

    def wake(self, now: float) -> None:
        """Evaluate again at `now`."""


class KnownController:
    """The controller this member knows of (`known`), until `until`."""

    def __init__(self, name: str, config: LeaseConfig, out: Outbox, counters: ElectionCounters,
                 standing: Standing, liveness_of: LivenessFn | None,
                 host: NoticeHost) -> None:  # fmt: skip
        """Args:
        name: this node's name.
        config: timing (`lease_s`, `notice_interval_s`, `voter_grant_s`).
        out: the election's outbox (its `ControllerChanged` events).
        counters: the election's counters.
        standing: when this node stands (a new controller clears its leaver).
        liveness_of: one member's liveness, or None (see `view.LivenessFn`).
        host: the rest of the node (see `NoticeHost`).
        """
        self.name, self.config, self.out, self.counters = name, config, out, counters
        self.standing = standing
        self.known: tuple[str, int] | None = None  # (controller, epoch)
        self.until = 0.0  # when `known` is forgotten unless heard of again
        self._last_notice = (0, 0)  # (epoch, seq) of the newest notice accepted
        self._liveness_of = liveness_of
        self._host = host

    def on_notice(self, msg: ControllerNotice, sender: Address, now: float) -> None:
        """A controller's notice (see the module docstring)."""
        host = self._host
        if msg.config.supersedes(host.voters):
            host.adopt(msg.config, now)
        elif msg.config != host.voters:
            return  # a notice from the lineage or configuration we left behind
        host.saw_epoch(msg.epoch)
        if msg.holder == self.name:
            return
        if self.known is not None and self.known[1] > msg.epoch:
            self.counters.stale_messages += 1
            return
        if (msg.epoch, msg.seq) <= self._last_notice or self._gone(msg.holder):
            self.counters.stale_messages += 1
            return
        self._last_notice = (msg.epoch, msg.seq)
        until = now + msg.remaining_ms / 1000 + self.config.lease_s
        self.set((msg.holder, msg.epoch), msg.epoch)
        self.until = max(until, now + self.config.notice_interval_s + self.config.lease_s)
        host.wake(now)

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
        """Forget a controller the view reports dead or left."""
        known = self.known
        if known is not None and known[0] != self.name and self._gone(known[0]):
            self.set(None, known[1])

    def expire(self, now: float) -> None:
        """Forget a controller not heard of in time (a follower only)."""
        if self.known is not None and now >= self.until:
            self.set(None, self.known[1])

    def released(self, holder: str, epoch: int) -> None:
        """`holder` released its lease of `epoch`: forget it if it is ours."""
        if self.known is not None and self.known[0] == holder:
            self.set(None, epoch)

    def renewed(self, holder: str, epoch: int, now: float) -> None:
        """The controller we know of renewed with us: keep knowing it."""
        if self.known == (holder, epoch):
            self.until = now + self.config.voter_grant_s
