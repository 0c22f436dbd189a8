"""The controller's notices: how every member learns who the controller is.

Theory of operation. Notices are not acknowledged. A new controller tells
every live member at once and `_NOTICE_REPEATS` more times, `_NOTICE_GAP_S`
apart, then every `notice_interval_s`. Between those, a member it has not
told in this lease (one that joined, came back from dead, or was on the
other side of a partition) is told at the next renewal, when the view has
changed (`Notices.view_changed`). Receiving a notice is `LeaseElection`'s.
"""

from __future__ import annotations

from shoal.election.campaign import SendFn
from shoal.election.messages import ControllerNotice
from shoal.election.view import Liveness, ViewFn

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
