"""The metadata log waits for the cluster's feature level (node/composition.py).

A cluster with one agent of 0.2.0 (feature level 1) must keep working: no
node leads the log, appends nothing, sends none of the log's messages
(tags 70-75), no lease request carrying a log position (tag 28/29) and
no voter ids (tags 80-83, configurations with ids),
and a write or a read asked meanwhile is answered "not applied". Once
every member supports the log, the controller leads it.
"""

from __future__ import annotations

from typing import Any

from shoal.election.messages import LeaseRequest, PreVote
from shoal.kernel.versions import META_LOG_FEATURE, THIS_BUILD, Versions
from shoal.membership.member import NodeIdentity
from shoal.membership.profiles import PROFILES
from shoal.metalog.core import MetaConfig, ProposalDone, ReadDone
from shoal.metalog.messages import OUTCOME_NOT_APPLIED, MetaMessage
from shoal.metalog.state import MetaPut
from shoal.node.features import FeatureLevelChanged
from shoal.sim.cluster import SimCluster
from shoal.sim.scenarios import form_cluster

# What 0.2.0 announces: every protocol at version 1, feature level 1.
RELEASE_0_2_0 = Versions((1, 1), (1, 1), (1, 1), (1, 1), 1)
_LOG_MESSAGES = MetaMessage.__args__  # type: ignore[attr-defined]


def _has_ids(m: Any) -> bool:
    """Voter identities (issue 37): tags 80-83, or a configuration of four items."""
    config = getattr(m, "config", None)
    return bool(getattr(m, "candidate_id", b"") or getattr(m, "voter_id", b"")
                or (config is not None and config.ids))  # fmt: skip


class _Wire:
    """Everything sent that an agent of 0.2.0 could not read, and the outcomes."""

    def __init__(self, cluster: SimCluster) -> None:
        self.unreadable: list[Any] = []
        self.events: list[Any] = []
        self.levels: list[tuple[int, int]] = []
        cluster.send_hooks.append(self.on_send)
        cluster.observers.append(self)

    def on_send(self, src: int, to: Any, messages: tuple[Any, ...], channel: Any) -> None:
        for m in messages:
            if (
                isinstance(m, _LOG_MESSAGES)
                or (isinstance(m, LeaseRequest | PreVote) and (m.log_epoch or m.log_index))
                or _has_ids(m)
            ):
                self.unreadable.append(m)

    def on_event(self, now: float, node: int, event: Any) -> None:
        if isinstance(event, ProposalDone | ReadDone):
            self.events.append(event)
        elif isinstance(event, FeatureLevelChanged):
            self.levels.append((node, event.level))


def _cluster(old_node: bool) -> tuple[SimCluster, _Wire]:
    cluster = SimCluster(3, 7, PROFILES["lan"], meta=MetaConfig())
    if old_node:
        old = cluster.idents[2]
        cluster.idents[2] = NodeIdentity(old.name, old.node_id, old.addr, old.tags, RELEASE_0_2_0)
    wire = _Wire(cluster)
    form_cluster(cluster)
    cluster.run_until(15.0)
    return cluster, wire


def _controller(cluster: SimCluster) -> int:
    found = [i for i, n in enumerate(cluster.nodes) if n is not None and n.election.is_controller]
    assert len(found) == 1, "one controller"
    return found[0]


def test_a_member_of_0_2_0_keeps_the_log_off() -> None:
    """With a 0.2.0 member, the controller leads no log and the wire carries
    nothing that member cannot read; writes and reads are not applied."""
    cluster, wire = _cluster(old_node=True)
    c = _controller(cluster)
    for node in cluster.nodes:
        assert node is not None and node.meta is not None
        assert node.feature_level == 1
        assert node.meta.epoch is None and node.meta.log.last_index == 0
    assert wire.unreadable == []
    asker = cluster.nodes[(c + 1) % 3]
    assert asker is not None
    now = cluster.now
    pid = asker.meta_propose(MetaPut(b"k", b"v"), now)
    rid = asker.meta_read(b"k", now)
    cluster._flush((c + 1) % 3)  # noqa: SLF001 - hand the outcomes to the observers
    cluster.run_until(cluster.now + 1.0)
    assert ProposalDone(pid, OUTCOME_NOT_APPLIED, 0) in wire.events
    assert ReadDone(rid, False, None, 0, 0) in wire.events
    assert wire.unreadable == []


def test_the_log_runs_once_every_member_supports_it() -> None:
    """Every member of this build: the controller leads the log (its no-op
    appended everywhere) once the level is the log's."""
    assert THIS_BUILD.features >= META_LOG_FEATURE
    cluster, wire = _cluster(old_node=False)
    c = _controller(cluster)
    leader = cluster.nodes[c]
    assert leader is not None and leader.meta is not None
    assert leader.feature_level >= META_LOG_FEATURE
    assert leader.meta.epoch is not None
    assert all(n is not None and n.meta is not None and n.meta.log.last_index >= 1
               for n in cluster.nodes)  # fmt: skip
    assert wire.unreadable  # the log's messages are on the wire now


def test_a_successor_controller_keeps_the_level_and_the_log_on() -> None:
    """The controller crashes: its successor announces the level it knew from
    its first notice, so no member's level falls and the log stays on."""
    cluster, wire = _cluster(old_node=False)
    c = _controller(cluster)
    assert all(level == META_LOG_FEATURE for _, level in wire.levels)
    cluster.crash(c, cluster.now + 0.1)
    cluster.run_until(cluster.now + 10.0)
    successor = _controller(cluster)
    assert successor != c
    assert all(level == META_LOG_FEATURE for _, level in wire.levels), wire.levels
    node = cluster.nodes[successor]
    assert node is not None and node.meta is not None and node.meta.epoch is not None
