"""A status snapshot of one node, for readers (raft's `status.go`).

The API, metrics and the systemd STATUS line read a `NodeStatus` built by
`status(node)`, not the cores' tables: a reader cannot mutate the protocol
state, and the cores can change their insides without breaking the readers.
The snapshot is frozen and holds copies (member views are frozen already);
building it walks the member table once. `summary(node)` is the cheap part,
for a line written after every event.
"""

from __future__ import annotations

import msgspec

from shoal.kernel.versions import cluster_speaks
from shoal.membership.member import MemberState, MemberView
from shoal.node.composition import ShoalNode


class NodeSummary(msgspec.Struct, frozen=True):
    """Counts and the controller, without walking the members."""

    live_peers: int  # alive or suspect, not counting this node
    known: int  # every member in the view, this node included
    controller: str | None  # the controller this node knows of
    epoch: int | None  # its epoch


class NodeStatus(msgspec.Struct, frozen=True):
    """What one node knows and counts, at one moment."""

    me: MemberView  # this node's own row
    members: tuple[MemberView, ...]  # every member, this node included, in table order
    live_peers: int
    leaving: bool
    health_score: int  # Lifeguard local health multiplier (0 is healthy)
    controller: str | None
    epoch: int | None
    is_controller: bool
    lease_end_at: float  # while controller: when the lease ends (the node's `now`)
    clock_offset_ms: int | None  # this node's clock minus its peers', once measured
    voters: tuple[str, ...]  # the voter configuration, sorted names ...
    voters_version: int  # ... and its version (0: none formed yet)
    records: int  # replicated records held, tombstones too
    counters: dict[str, int]  # every core's counters, prefixed by core
    feature_level: int = 0  # the cluster's, as the controller announced it (0: not yet)
    held_back_by: tuple[str, ...] = ()  # live members below the highest supported level
    speaks: tuple[int, ...] = ()  # per protocol (kernel/versions.PROTOCOLS): what all live speak
    voter_ids: tuple[bytes, ...] = ()  # each voter's data directory id, as `voters` (b"": none)

    def voter_role(self, member: MemberView) -> str:
        """`voter`, `non-voter`, or `replaced`: the configuration names this
        member's name with another data directory's id (it came back with a
        new data directory; its old identity is being removed)."""
        if member.name not in self.voters:
            return "non-voter"
        known = self.voter_ids[self.voters.index(member.name)] if self.voter_ids else b""
        return "replaced" if known and known != member.node_id else "voter"


def summary(node: ShoalNode) -> NodeSummary:
    """The counts and the controller of `node` (no member walk)."""
    table = node.swim.table
    known = node.election.known
    return NodeSummary(len(table.live), len(table), known[0] if known else None,
                       known[1] if known else None)  # fmt: skip


def status(node: ShoalNode, now: float = 0.0) -> NodeStatus:
    """A frozen snapshot of `node` for readers, at the node's `now`."""
    swim, election = node.swim, node.election
    known, voters = election.known, election.voters
    lease_epoch = election.lease_epoch
    if lease_epoch is not None:
        # While this node holds a lease it reports that lease's epoch, never a
        # successor's it may have heard of: `is_self` with an epoch is a
        # fencing token, and two claimants must never share one (issue 28).
        known = (swim.table.me.name, lease_epoch)
    members = tuple(node.members())
    return NodeStatus(
        me=swim.table.me.view(),
        members=members,
        live_peers=len(swim.table.live),
        leaving=swim.leaving,
        health_score=swim.health.score,
        controller=known[0] if known else None,
        epoch=known[1] if known else None,
        is_controller=election.is_controller,
        lease_end_at=election.lease_end_at,
        clock_offset_ms=node.clock_offset_ms(now),
        voters=voters.voters if voters else (),
        voters_version=voters.version if voters else 0,
        voter_ids=voters.ids if voters else (),
        records=node.sync.replica.tree.count,
        counters=node.counters(),
        feature_level=node.feature_level,
        held_back_by=tuple(node.held_back_by()),
        speaks=cluster_speaks(
            swim.ident.versions,
            (m.versions for m in members if m.state in (MemberState.ALIVE, MemberState.SUSPECT)),
        ),
    )
