"""A wrong wall clock on one node (issue 28): it is measured and named, its
writes are refused, and no acknowledged write is lost to it. The simulator
gives each node a clock (sim/clock.py); the cores are the daemon's."""

from __future__ import annotations

import pytest

from shoal.kernel.errors import WriteRefused
from shoal.membership.member import MemberState
from shoal.membership.profiles import PROFILES
from shoal.sim.clock import NodeClock
from shoal.sim.cluster import SimCluster
from shoal.sim.scenarios import form_cluster, run_until_converged


def writer(cluster: SimCluster, acked: list, refused: list):
    """A client writing through node `i` at `at`: acknowledged or refused."""

    def write(i: int, key: bytes, value: bytes, at: float) -> None:
        def command(node, now):
            try:
                node.write(key, value, now)
            except WriteRefused as exc:
                refused.append((i, key, value, str(exc)))
                return
            acked.append((cluster.now, i, key, value))

        cluster.at(at, lambda: cluster._command(i, command))

    return write


def values_everywhere(cluster: SimCluster, key: bytes) -> set:
    return {(r.value if (r := cluster.nodes[i].read(key)) else None) for i in cluster.live_hosts()}


@pytest.mark.parametrize("skew_s", [70.0, -70.0, 600.0])
def test_a_node_with_a_wrong_clock_is_measured_refuses_writes_and_loses_none(skew_s):
    """Node 1's wall clock is `skew_s` off. Within seconds every node knows
    its own offset (node 1: the skew, the others: about 0); node 1 refuses
    writes with the offset in the reason; writes through the others are
    acknowledged and, last acknowledged last, end up on every replica,
    node 1's included."""
    clocks = [NodeClock(), NodeClock(offset_s=skew_s), NodeClock()]
    cluster = SimCluster(3, 5, PROFILES["lan"], clocks=clocks)
    form_cluster(cluster)
    assert run_until_converged(cluster, 30.0) is not None
    cluster.run_until(cluster.now + 5.0)
    now = cluster.now
    offsets = [cluster.nodes[i].clock_offset_ms(clocks[i].local(now)) for i in range(3)]
    assert abs(offsets[1] - skew_s * 1000) < 50 and abs(offsets[0]) < 50 and abs(offsets[2]) < 50
    acked, refused = [], []
    write = writer(cluster, acked, refused)
    write(1, b"k", b"from-skewed", now + 0.1)
    write(0, b"k", b"W2", now + 0.5)
    write(2, b"k", b"W3", now + 1.0)
    cluster.run_until(now + 8.0)
    assert [r[:3] for r in refused] == [(1, b"k", b"from-skewed")]
    assert "from its peers'" in refused[0][3]
    assert [a[3] for a in acked] == [b"W2", b"W3"]
    assert values_everywhere(cluster, b"k") == {b"W3"}


def test_a_write_acked_after_a_refused_newer_version_is_never_lost():
    """Before node 1's offset is measured (right after its start) it
    acknowledges W1, stamped 70 s ahead. Node 0 refuses W1; a write there
    to the same key is then refused (it would lose to W1 later) until W1 is
    taken in, after which node 0's write is acknowledged and wins everywhere."""
    clocks = [NodeClock(), NodeClock(offset_s=70.0), NodeClock()]
    cluster = SimCluster(3, 7, PROFILES["lan"], clocks=clocks)
    cluster.start(0, 0.0, [])
    cluster.start(2, 0.2, [0])
    assert run_until_converged_among(cluster, [0, 2], 10.0)
    acked, refused = [], []
    write = writer(cluster, acked, refused)
    t0 = cluster.now
    cluster.start(1, t0, [0])
    write(1, b"k", b"W1", t0 + 0.01)  # node 1 knows no offset yet: acknowledged
    for step in range(40):
        write(0, b"k", b"W2-%d" % step, t0 + 1.0 + step)
    cluster.run_until(t0 + 45.0)
    assert acked[0][3] == b"W1"
    assert any(r[0] == 0 and "ahead of this agent's clock" in r[3] for r in refused)
    last = acked[-1]
    assert last[1] == 0  # node 0's writes were acknowledged again in the end
    assert values_everywhere(cluster, b"k") == {last[3]}


def run_until_converged_among(cluster: SimCluster, hosts: list[int], deadline_s: float) -> bool:
    while cluster.now < deadline_s:
        cluster.run_until(cluster.now + 0.1)
        if all(cluster.nodes[i].state_of(cluster.idents[j].name) is MemberState.ALIVE
               for i in hosts for j in hosts if j != i):  # fmt: skip
            return True
    return False
