"""Invariant checkers (safety) and convergence predicates (liveness).

Safety checkers watch every event as it happens and record violations; a
test asserts there are none. Liveness predicates are asked between slices of
virtual time ("has the cluster converged yet?").
"""

from __future__ import annotations

from typing import Any

from shoal.membership.events import MemberDied
from shoal.membership.member import MemberState, MemberView
from shoal.sim.cluster import SimCluster


class IncarnationMonotonic:
    """No observer ever sees a member's incarnation go down (same node id)."""

    def __init__(self) -> None:
        # Observer -> node id -> highest incarnation seen: nested, no key
        # tuple to build and hash per event (a million at 1,000 nodes).
        self._seen: dict[int, dict[bytes, int]] = {}
        self.violations: list[str] = []

    def on_event(self, now: float, node: int, event: Any) -> None:
        member = getattr(event, "member", None)
        if not isinstance(member, MemberView):
            return
        seen = self._seen.get(node)
        if seen is None:
            seen = self._seen[node] = {}
        last = seen.get(member.node_id, -1)
        if member.incarnation < last:
            self.violations.append(
                f"t={now:.3f} node {node} saw {member.name} go from {last} to {member.incarnation}"
            )
        elif member.incarnation > last:
            seen[member.node_id] = member.incarnation


class FalsePositives:
    """Every declaration that a running node is dead."""

    def __init__(self, cluster: SimCluster) -> None:
        self.cluster = cluster
        self._index = {ident.name: i for i, ident in enumerate(cluster.idents)}
        self.events: list[tuple[float, int, str]] = []

    def on_event(self, now: float, node: int, event: Any) -> None:
        if isinstance(event, MemberDied):
            subject = self._index.get(event.member.name)
            if subject is not None and self.cluster.nodes[subject] is not None:
                self.events.append((now, node, event.member.name))

    @property
    def subjects(self) -> set[str]:
        """Live nodes that were ever declared dead by someone."""
        return {name for _, _, name in self.events}


def converged(cluster: SimCluster) -> bool:
    """Every node due to start has, and every running node sees exactly the
    running nodes as alive."""
    if cluster.pending_boots:
        return False
    live = cluster.live_hosts()
    n = len(live)
    nodes = [cluster.nodes[i] for i in live]
    for node in nodes:
        assert node is not None
        if node.peers_up_count() != n - 1:
            return False
    names = {cluster.idents[i].name for i in live}
    for node in nodes:
        assert node is not None
        for name in node.peers_up():
            if name not in names or node.state_of(name) is not MemberState.ALIVE:
                return False
    return True


def sees_dead(cluster: SimCluster, subject: int) -> list[int]:
    """Running nodes that do not (yet) consider `subject` dead or gone."""
    name = cluster.idents[subject].name
    waiting = []
    for i in cluster.live_hosts():
        node = cluster.nodes[i]
        assert node is not None
        if node.state_of(name) in (MemberState.ALIVE, MemberState.SUSPECT):
            waiting.append(i)
    return waiting
