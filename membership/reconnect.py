"""Reconnects: members recently declared dead are tried again, fast (ours).

Theory of operation. A member declared dead is no longer probed, and a node
that holds us dead no longer probes us: once both sides of a cut have given
each other up, nothing crosses it after it heals but Serf's reconnect, one
push-pull with one random dead member every `reconnect_interval_s` (30 s),
and the heal waits for that timer's phase (issue 42: 21.9 s once, 6 real
agents; ~27 s in 4 of 12 simulated seeds). Here each member declared dead
(not one that left) is tried again with a `Ping` of its own:

- for `reconnect_fast_s` (60 s) after its death, at most one such ping per
  probe interval, round robin over the recently dead (and the suspects,
  below), slower in proportion above `_PACE_MEMBERS` live members, except
  while we hold suspicions of our own: a cut of up to a minute is noticed
  within about a probe interval of its heal;
- then with a backoff that doubles from 2 s up to `reconnect_interval_s`
  (2, 4, 8, 16 s), after which only Serf's reconnect tries it;
- a death again (after it was heard alive) starts again from the first.

Whoever answers has been heard again: the member pinged, holding us dead,
syncs with us at once (exchange.py, a stranger sync), and its ack (it may
hold us alive) makes us push-pull with it (`Exchange.reconnect_acked`).
Either exchange carries the news that each side declared the other dead,
each refutes, and the refutations spread on both sides by gossip. The first
answer across a healed cut is also a sign that the others behind it are
back: every other recently dead member, and every suspect, gets a ping at
once (at most `_HEARD_BURST_MAX`, once per probe interval, the suspects
first); so does a ping from a member we suspect, its refutation, and a
dead member's return. The time of the last such sign is `heard_at`, set
also by any other datagram from a member we hold lost (the node tells us
whom it heard from, `SwimNode.heard_from`: the election's datagrams and
the sync's cross a healed cut too): claims.py holds a suspicion that runs
out just after it (`SuspicionTimer.hold`).

At 60 members (issue 42) the heal's tail was a suspicion that only one
member held, or held at an incarnation the suspect had already outbid: no
gossip reaches the suspect, so only our own pings tell it, and they came
at the slowed pace (3.75 s at 60), once per turn of a round robin over
every lost member. Hence the pace of a probe interval while any suspicion
of our own is queued, and suspects in the burst.

Cost, per observer: at most one ping per probe interval however many are
dead or suspect, while any death is younger than `reconnect_fast_s` or any
suspicion runs, plus four per dead member after that, plus one burst of at
most `_HEARD_BURST_MAX` per probe interval while lost members are heard.
Per dead member, at most `reconnect_fast_s / probe_interval_s + 4` (64 on
the LAN profile) from each observer's round robin, fewer when several are
dead at once, plus one per burst (a burst needs a lost member heard
from: a heal, or a false suspicion refuted). A crashed agent's host answers
each with ICMP port unreachable (ignored for a dead member); a ping that
reaches another node now at that address names the member it is for, and
is dropped there.
"""

from __future__ import annotations

import math
import random
from collections import deque
from collections.abc import Callable
from typing import Any, Final

from shoal.kernel.contract import Address
from shoal.kernel.deadlines import Deadlines
from shoal.membership.counters import SwimCounters
from shoal.membership.member import LocalState
from shoal.membership.messages import Ping, Suspect
from shoal.membership.profiles import SwimConfig
from shoal.membership.table import DEAD, SUSPECT, MemberTable

# Sequence numbers of reconnect pings: below the prober's (probing.py,
# COORD_SEQ_MIN), so an ack is never mistaken for one of a probe round.
_SEQ_FIRST: Final = 1
_SEQ_END: Final = 2**31
# The first gap of the backoff once the fast period is over.
_LADDER_FIRST_S: Final = 2.0
# Pings sent at once when a dead member is heard again (see the docstring).
_HEARD_BURST_MAX: Final = 16
# Above this many live members, each observer's pace slows in proportion,
# so the whole cluster sends about this many per probe interval (see the
# module docstring).
_PACE_MEMBERS: Final = 16
# A suspicion raised by others is pinged only once it is this many probe
# intervals old: a false one (loss) is refuted well within that, and one
# that lasts longer was raised in a cut, or its refutation passed us by.
_OTHERS_SUSPICION_ROUNDS: Final = 2

SendPacket = Callable[[Address, list[Any]], None]


class Reconnects:
    """Which lost members (suspected by us, or recently dead) to ping, and when."""

    def __init__(
        self,
        local: LocalState,
        table: MemberTable,
        config: SwimConfig,
        rng: random.Random,
        deadlines: Deadlines,
        send_packet: SendPacket,
        counters: SwimCounters,
    ) -> None:
        """Share the node's state with the reconnect role.

        Args:
            local: this node's identity and leaving flag.
            table: the view: who is suspect or dead, since when, and where.
            config: probe interval, fast period and reconnect interval.
            rng: the node's only source of randomness (the first ping's phase).
            deadlines: the node's deadline heap.
            send_packet: sends one datagram.
            counters: the node's counters.
        """
        self._local = local
        self._table = table
        self._config = config
        self._rng = rng
        self._deadlines = deadlines
        self._send_packet = send_packet
        self._counters = counters
        # Round robin of (name, since, suspect): `since` is when it died,
        # or for a suspicion when it may first be pinged; stale entries are
        # dropped at their turn.
        self._fast: deque[tuple[str, float, bool]] = deque()
        self._suspected: set[str] = set()  # names queued as suspicions
        self._own: set[str] = set()  # those of them that our own probes raised
        self._armed = False
        self._due_at = 0.0  # when the armed retry is due
        self._generation = 0  # of the armed retry; an earlier one supersedes it
        self._pings: dict[int, str] = {}  # seq -> member, sent this probe interval
        self._seq = _SEQ_FIRST - 1
        self._burst_after = 0.0
        # When a lost member was last heard from: a cut may have healed then
        # (claims.py holds the verdicts on suspicions raised before it).
        self.heard_at = -math.inf

    def died(self, name: str, now: float) -> None:
        """Member `name` was declared dead at `now`: try it again soon."""
        self._queue(name, now, False, now)

    def suspected(self, name: str, ours: bool, now: float) -> None:
        """`name` is suspect (`ours`: our own probe of it failed): while it
        stays suspect, ping it with the suspicion (the buddy system,
        repeated), so that a cut that heals before the suspicion ends
        reaches the suspect within a probe interval, not whenever the round
        robin of probes comes to it; one raised by others, only once it has
        lasted `_OTHERS_SUSPICION_ROUNDS` probe intervals."""
        if ours:
            self._own.add(name)
        if name not in self._suspected:
            self._suspected.add(name)
            wait_s = 0.0 if ours else _OTHERS_SUSPICION_ROUNDS * self._config.probe_interval_s
            self._queue(name, now + wait_s, True, now)
        elif ours and self._armed:
            self._arm(now)  # at our own pace now, maybe sooner

    def _queue(self, name: str, since: float, suspect: bool, now: float) -> None:
        self._fast.append((name, since, suspect))
        if not self._armed or (suspect and since <= now):
            self._arm(now)  # an own suspicion quickens the pace

    def _arm(self, now: float) -> None:
        """Arm the next retry at a random phase of the pace (observers that
        learn of a death together do not all ping at the same instants),
        unless one is armed that is due sooner."""
        at = now + self._rng.uniform(0.5, 1.0) * self._pace_s()
        if self._armed and self._due_at <= at:
            return
        self._armed = True
        self._due_at = at
        self._generation += 1
        self._deadlines.push(at, self._due_retry, self._generation)

    def _pace_s(self) -> float:
        """Between two pings of the round robin: a probe interval, longer
        in proportion above `_PACE_MEMBERS` live members, except while we
        hold suspicions of our own: a suspect that only we suspect (a short
        cut, or the one probe that crossed it) hears from nobody else, and
        at 60 members it waited 3.75 s for its turn."""
        scale = self._table.num_live() / _PACE_MEMBERS
        if self._own or scale <= 1.0:
            return self._config.probe_interval_s
        return self._config.probe_interval_s * scale

    def pinged_by_suspect(self, name: str, now: float) -> None:
        """Suspect `name` pinged us (for how long it was suspect, probing
        does not know): the burst, not a sign for the holds."""
        self.heard(name, now, now)

    def answered(self, seq: int) -> str | None:
        """The member an ack with `seq` answers for, if it is one of ours."""
        return self._pings.pop(seq, None)

    def heard(self, name: str, now: float, lost_since: float = -math.inf) -> None:
        """Lost member `name` (dead, or suspect since `lost_since`) was
        heard from by membership (a refutation, a ping, an answer): a cut
        may have just healed, so ping the other lost members at once, the
        suspects with their suspicion (at most `_HEARD_BURST_MAX`, once per
        probe interval), and note the sign (`sign`). The suspects go
        first: a suspicion left unrefuted ends in a death (claims.py holds
        it only briefly), a dead member that is back rejoins anyway. At 60
        agents, a suspicion that came after the heal, behind twenty of the
        dead in the round robin, was told to its suspect 5.1 s after the
        heal."""
        self.sign(now, lost_since)
        if now < self._burst_after or self._local.leaving:
            return
        self._burst_after = now + self._config.probe_interval_s
        lost = [(not suspect, other) for other, since, suspect in self._fast
                if other != name and self._lost(other, since, suspect)]  # fmt: skip
        lost.sort(key=lambda entry: entry[0])  # stable: suspects first, each in turn
        for _, other in lost[:_HEARD_BURST_MAX]:
            self.ping(other)

    def sign(self, now: float, lost_since: float) -> None:
        """A member lost since `lost_since` was heard from at `now`: a sign
        of a heal for the holds (`heard_at`) only when it was lost for
        `_OTHERS_SUSPICION_ROUNDS` probe intervals or more: a false
        suspicion from loss is refuted sooner, and holding verdicts after
        each of those slowed the detection of crashes (100 nodes, 10 %
        loss: by 0.27 s in the median). Any other datagram from a lost
        member (`SwimNode.heard_from`) is a sign and no more: a burst on
        each of those too (or a ping to the member, which syncs with us
        and merges our stale view) crowded the refutations out of gossip
        at the heal (60 agents, 20 cut off for 30 s: 4.1 s to all see all,
        0.5 s without)."""
        if now - lost_since >= _OTHERS_SUSPICION_ROUNDS * self._config.probe_interval_s:
            self.heard_at = now

    def _lost(self, name: str, since: float, suspect: bool) -> bool:
        """Whether a round-robin entry is still lost (a suspect is pinged
        in a burst however young its suspicion: one raised in a cut that
        just healed is not refuted by gossip alone within seconds)."""
        if not suspect:
            return self._still_dead(name, since)
        m = self._table.get(name)
        return m is not None and m.state is SUSPECT

    def _still_dead(self, name: str, died_at: float) -> bool:
        m = self._table.get(name)
        return m is not None and m.state is DEAD and self._table.down_at(name) == died_at

    def ping(self, name: str) -> None:
        """Ping lost member `name` now, with our suspicion if it is suspect."""
        self._seq += 1
        if self._seq >= _SEQ_END:
            self._seq = _SEQ_FIRST
        self._pings[self._seq] = name
        self._counters.reconnect_pings += 1
        m = self._table.get(name)
        assert m is not None
        me = self._local.ident.name
        msgs: list[Any] = [Ping(self._seq, name, me)]
        if m.state is SUSPECT:
            msgs.append(Suspect(m.incarnation, name, me))
        self._send_packet(m.ident.addr, msgs)

    def _next(self, now: float) -> str | None:
        """The next member in turn still lost, its entry requeued."""
        fast = self._fast
        for _ in range(len(fast)):
            name, since, suspect = fast.popleft()
            if suspect:
                m = self._table.get(name)
                if m is None or m.state is not SUSPECT:
                    self._suspected.discard(name)
                    self._own.discard(name)
                    continue
                if now < since:  # not yet: keep its place
                    fast.append((name, since, suspect))
                    continue
            elif not self._still_dead(name, since):
                continue  # heard again, or dead again since (queued anew)
            elif now - since >= self._config.reconnect_fast_s:
                self._deadlines.push(now + _LADDER_FIRST_S, self._due_ladder,
                                     (name, since, _LADDER_FIRST_S))  # fmt: skip
                continue
            fast.append((name, since, suspect))
            return name
        return None

    def _due_retry(self, generation: int, now: float) -> None:
        """One ping, to the next lost member in turn."""
        if generation != self._generation:
            return  # superseded by one armed sooner
        self._pings.clear()  # acks later than a probe interval are not awaited
        name = self._next(now)
        if name is not None and not self._local.leaving:
            self.ping(name)
        self._armed = bool(self._fast)
        if self._armed:
            self._due_at = now + self._pace_s()
            self._generation += 1
            self._deadlines.push(self._due_at, self._due_retry, self._generation)

    def _due_ladder(self, arg: tuple[str, float, float], now: float) -> None:
        name, died_at, gap_s = arg
        if not self._still_dead(name, died_at):
            return
        if not self._local.leaving:
            self.ping(name)
        gap_s *= 2
        if gap_s < self._config.reconnect_interval_s:
            self._deadlines.push(now + gap_s, self._due_ladder, (name, died_at, gap_s))
