"""Query rounds (services/queries.py) in the simulator: under loss, with
members crashing mid-query, judged against what really happened.

Theory of operation. A cluster of real nodes forms under the simulator's
lossy network (sim/cluster.py); one member sends a query. Its round
(`QueryRound`, the agent's own) fixes the expected members from that
member's view, as the agent does. Each expected member is asked on a stream
and answers after its handler's run time: the exchange fails (as a stream
does when its link goes) with probability `stream_loss`, and a member that
crashes before its answer is due gives none. Some members crash mid-query,
at random times inside its timeout. The round ends when every expected
member has answered or at its deadline; its outcome is then read with the
states of the querying member's view, which SWIM keeps meanwhile.

What a user would notice is checked against the ground truth kept here
(`answered_by`, the members whose answer reached the querier): the outcome
names every expected member, calls exactly those `answered`, and names
everyone else as `silent`, `failed` or `left`. Every random choice comes
from `Random`s seeded from `seed`.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

from shoal.membership.profiles import PROFILES
from shoal.services.queries import QueryReply, QueryRequest, QueryRound
from shoal.sim.cluster import SimCluster
from shoal.sim.network import LinkProfile
from shoal.sim.scenarios import form_cluster, run_until_converged

QUERIER = 0


@dataclass(slots=True)
class QueryRun:
    """One query's outcome and what really happened."""

    outcome: dict[str, Any]
    expected: set[str]
    answered_by: set[str] = field(default_factory=set)  # answers that reached the querier
    crashed: dict[str, float] = field(default_factory=dict)  # member -> crash time, mid-query
    answers_sent: int = 0  # copies delivered to the round (duplicates included)
    started_at: float = 0.0

    def status(self, member: str) -> str:
        """The outcome's status for `member`."""
        return str(self.outcome["members"][member]["status"])


def query_run(seed: int, n: int = 16, crashes: int = 3, loss: float = 0.05,
              stream_loss: float = 0.05, timeout_s: float = 15.0, crash_within_s: float = 2.0,
              handler_mean_s: float = 1.0, duplicate: float = 0.0) -> QueryRun:  # fmt: skip
    """Form a cluster, send one query from member 0 with `crashes` members
    crashing within `crash_within_s` of it (handlers take
    `handler_mean_s` on average); the outcome and the ground truth."""
    cluster = SimCluster(n, seed, PROFILES["lan"], LinkProfile(loss=loss))
    form_cluster(cluster)
    assert run_until_converged(cluster, 60.0) is not None, "the cluster did not form"
    rng = random.Random(f"{seed}-query")
    node = cluster.nodes[QUERIER]
    assert node is not None
    now = cluster.now
    request = QueryRequest(rng.getrandbits(64), "ping", b"who is there", int(timeout_s * 1000))
    round_ = QueryRound(request, node.members(), None, {}, now)
    run = QueryRun({}, set(round_.expected), started_at=now)
    index = {ident.name: i for i, ident in enumerate(cluster.idents)}
    others = sorted(index[m] for m in round_.expected if index[m] != QUERIER)
    for i in rng.sample(others, min(crashes, len(others))):
        at = now + rng.uniform(0.0, min(crash_within_s, timeout_s))
        run.crashed[cluster.idents[i].name] = at
        cluster.crash(i, at)
    for member in sorted(round_.expected):
        due = now + rng.expovariate(1.0 / handler_mean_s)
        lost = rng.random() < stream_loss
        copies = 2 if rng.random() < duplicate else 1
        for _ in range(copies):
            cluster.at(due, _answer(cluster, round_, run, index[member], member, lost))
    cluster.run_until(round_.deadline_at, stop=lambda: round_.complete)
    states = {m.name: m.state for m in node.members()}
    run.outcome = round_.outcome(states, cluster.now)
    return run


def _answer(cluster: SimCluster, round_: QueryRound, run: QueryRun, i: int, member: str,
            lost: bool) -> Any:  # fmt: skip
    """The delivery of `member`'s answer, if it is still up and its stream held."""

    def deliver() -> None:
        if cluster.nodes[i] is None or lost or cluster.nodes[QUERIER] is None:
            return
        run.answered_by.add(member)
        run.answers_sent += 1
        round_.answered(member, QueryReply(round_.request.id, "answered", member.encode(), ""))

    return deliver
