"""Who should stand, and who should vote: the candidates, ranked.

A member is *eligible* unless its `controller_eligible` tag says no (or,
with `healthy_only`, its health tag says critical); only eligible live
members are candidates and voters. Candidates rank by the
`controller_priority` tag (higher first), then by name, so every node that
sees the same view ranks them the same way without talking. Rank *k* among
the voters waits `k * rank_backoff_s` before standing (`Standing`), so the
best candidate usually wins without a duel.

The controller uses the same ranking to grow the voter set (best-ranked
live non-voter first) and to hand over under `preempt`. `Standing` decides
when this node stands: what blocks it, then its rank's wait.

**Bootstrap**: with no configuration, the best-ranked eligible member
proposes one (`Ranking.first_config`) once it sees `bootstrap_expect`
eligible members and its view has been still for `bootstrap_settle_s`.
"""

from __future__ import annotations

import functools
import random
from collections.abc import Callable, Collection, Mapping

from shoal.election.config import ELIGIBLE_TAG, HEALTH_TAG, PRIORITY_TAG
from shoal.election.view import Liveness, ViewFn
from shoal.election.voter import Grant
from shoal.election.voters import VoterConfig
from shoal.kernel.contract import Tags

_LIVE = Liveness.LIVE
_LEFT = Liveness.LEFT


# Tags are hashable tuples shared by every row of one member, and a cluster
# has few distinct tag sets: parse each once, not once per member per scan.
@functools.lru_cache(maxsize=4096)
def eligible(tags: Tags, healthy_only: bool = False) -> bool:
    """Whether a member with `tags` may be a voter and controller."""
    values = dict(tags)
    if healthy_only and values.get(HEALTH_TAG) == "critical":
        return False
    return values.get(ELIGIBLE_TAG, "true").lower() not in ("false", "0", "no")


def rank_key(name: str, tags: Tags) -> tuple[int, str]:
    """Sort key of candidates: higher priority tag first, then name."""
    return (-_priority(tags), name)


@functools.lru_cache(maxsize=4096)
def _priority(tags: Tags) -> int:
    try:
        return int(dict(tags).get(PRIORITY_TAG, "0"))
    except ValueError:
        return 0


class Ranking:
    """The candidates of one node's view, as that node ranks them."""

    def __init__(self, name: str, view: ViewFn, healthy_only: bool = False) -> None:
        """Args:
        name: this node's name.
        view: the members this node knows (see `view.ViewFn`).
        healthy_only: a member whose health tag is critical is not eligible.
        """
        self.name = name
        self._view = view
        self._healthy = healthy_only

    def candidates(self) -> list[str]:
        """Live eligible members (this node included), best-ranked first."""
        ranked = [(rank_key(m.name, m.tags), m.name) for m in self._view()
                  if m.liveness is _LIVE and eligible(m.tags, self._healthy)]  # fmt: skip
        return [name for _, name in sorted(ranked)]

    def candidates_if_first(self) -> list[str]:
        """`candidates()` if this node ranks first among them, else [].

        Every node without a configuration asks this on each view change;
        the scan stops at the first better-ranked live member, so a formed
        cluster of N asks in about N·ln N steps, not N².
        """
        view, me = self._view, self.name
        mine = next((rank_key(m.name, m.tags) for m in view()
                     if m.name == me and m.liveness is _LIVE and eligible(m.tags, self._healthy)),
                    None)  # fmt: skip
        if mine is None:
            return []
        for m in view():
            if m.liveness is _LIVE and eligible(m.tags, self._healthy) and \
                    rank_key(m.name, m.tags) < mine:  # fmt: skip
                return []
        return self.candidates()

    def first_config(self, expect: int, max_voters: int,
                     rng: random.Random) -> VoterConfig | None:  # fmt: skip
        """The first configuration, of the best `max_voters` candidates, if
        this node ranks first and sees `expect` of them; else None."""
        members = self.candidates_if_first()
        if len(members) < expect:
            return None
        chosen = tuple(sorted(members[:max_voters]))
        return VoterConfig(rng.randbytes(8), 1, chosen)

    def self_eligible(self) -> bool:
        """Whether this node's own tags let it stand (whatever its liveness)."""
        return any(m.name == self.name and eligible(m.tags, self._healthy) for m in self._view())

    def ranks_above_me(self, candidate: str) -> bool:
        """Whether `candidate` is a live eligible member ranked above this node."""
        if candidate == self.name:
            return False
        ranked = self.candidates()
        if candidate not in ranked or self.name not in ranked:
            return False
        return ranked.index(candidate) < ranked.index(self.name)

    def my_rank(self, voters: VoterConfig, gone: set[str]) -> int:
        """This node's place among the candidate voters, leaving out `gone`
        (a holder whose grant ran out or was released: it is not standing);
        the count of them when this node is not one."""
        ranked = [n for n in self.candidates() if n in voters.voters and n not in gone]
        return ranked.index(self.name) if self.name in ranked else len(ranked)

    def best_voter(self, voters: VoterConfig) -> str | None:
        """The best-ranked candidate among `voters`, if any."""
        return next((n for n in self.candidates() if n in voters.voters), None)

    def left_voters(self, voters: VoterConfig) -> list[str]:
        """The voters of `voters` that this node's view shows left."""
        return [m.name for m in self._view() if m.liveness is _LEFT and m.name in voters.voters]

    def next_config(self, voters: VoterConfig, settled: bool, max_voters: int,
                    ids: Mapping[str, bytes] | None = None,
                    ready: Callable[[str], bool] | None = None,
                    kept: Collection[str] = ()) -> VoterConfig | None:  # fmt: skip
        """One voter change the controller should make now, if any.

        A voter that left is removed, unless `kept` names it (it left within
        `left_voter_grace_s`: controller.py, "Voters that left"); one
        missing from the view (reaped) only once the controller is
        `settled`, so that a fresh controller whose view is still filling up
        does not remove voters it has not heard of yet. With `ids` (the cluster reads voter ids:
        voters.py, "Identity"), the voters' ids not yet known are filled in
        next, from the view, `ids` first (name -> the id a voter answered
        with). Then the best-ranked live non-voter is added, up to
        `max_voters`, with its id when `ids` is given (and only once
        `ready` says so, when given).
        """
        rows = {m.name: m for m in self._view()}
        for name in voters.voters:
            gone = name not in rows and settled
            left = name in rows and rows[name].liveness is _LEFT and name not in kept
            if name != self.name and (left or gone):
                return voters.without_voter(name)
        if ids is None:
            known: dict[str, bytes] = {}
        else:
            known = {n: m.node_id for n, m in rows.items() if m.liveness is _LIVE and m.node_id}
            known.update(ids)
            filled = voters.with_ids(known)
            if filled is not None:
                return filled
        if len(voters.voters) < max_voters:
            for name in self.candidates():
                if name not in voters.voters and (ready is None or ready(name)):
                    return voters.with_voter(name, known.get(name, b""))
        return None


class Standing:
    """When this node stands: once nothing blocks it, after its rank's wait."""

    def __init__(self, ranking: Ranking, rank_backoff_s: float, rng: random.Random) -> None:
        """Args:
        ranking: this node's ranking of the candidates.
        rank_backoff_s: the wait per rank.
        rng: the election's randomness (a jitter of up to 10 ms).
        """
        self.ranking = ranking
        self.rank_backoff_s = rank_backoff_s
        self.rng = rng
        self.blocked_until = 0.0  # no standing before this (back-off, a better candidate)
        self.stand_at: float | None = None  # when this node stands, once decided
        self.released_by = ""  # the last holder that released: not a candidate

    def block(self, until: float) -> None:
        """Do not stand before `until`."""
        self.blocked_until = max(self.blocked_until, until)

    def due(self, now: float, voters: VoterConfig, grant: Grant | None,
            known: tuple[str, int] | None, known_until: float) -> bool:  # fmt: skip
        """Whether this node should stand now, with `grant` the one its voter
        holds and `known` the controller it knows of (until `known_until`).

        A grant to another binds until it ends; with no grant, a controller
        this node knows of blocks until it is no longer known. Then rank k
        among the voters waits k * `rank_backoff_s`, leaving out the holder
        whose grant ran out without renewal, or who released it: it is gone
        or leaving.
        """
        me = self.ranking.name
        if me not in voters.voters or not self.ranking.self_eligible():
            self.stand_at = None
            return False
        blocked = self.blocked_until
        if grant is not None and grant.holder != me:
            blocked = max(blocked, grant.until_at)  # our own grant is the real bound
        elif grant is None and known is not None and known[0] != me:
            blocked = max(blocked, known_until)
        if blocked > now:
            self.stand_at = None
            return False
        if self.stand_at is None:
            gone = {self.released_by, grant.holder if grant is not None else ""}
            rank = self.ranking.my_rank(voters, gone)
            delay = rank * self.rank_backoff_s + self.rng.uniform(0, 0.01)
            self.stand_at = max(now, blocked) + delay
        if now >= self.stand_at:
            self.stand_at = None
            return True
        return False
