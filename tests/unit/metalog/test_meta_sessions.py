"""Sessions in the metadata log (metalog/state.py, metalog/sessionclock.py):
what an application sees of its session and its keys, on the state machine,
on the wire, and on a one-voter leader whose clock the test moves."""

from __future__ import annotations

import random

import pytest

from shoal.kernel import codec
from shoal.kernel.codec import DecodeError
from shoal.metalog.core import MetaConfig, MetaLog
from shoal.metalog.events import KeepaliveDone, ProposalDone, SessionEnded
from shoal.metalog.messages import (
    MAX_KEEPALIVE_IDS,
    OUTCOME_COMMITTED,
    OUTCOME_NO_SESSION,
    Keepalive,
    KeepaliveResult,
    Propose,
    keepalive_ids_fitting,
)
from shoal.metalog.snapshot import Snapshot, digest, restore, take
from shoal.metalog.state import (
    END_CLOSED,
    END_EXPIRED,
    Applied,
    MetaDelete,
    MetaPut,
    MetaState,
    MetaTxn,
    NoSession,
    SessionEnd,
    SessionOpen,
)

S1, S2 = b"\x01" * 16, b"\x02" * 16
ME = ("10.0.0.1", 7946)


def _opened() -> MetaState:
    state = MetaState()
    state.apply(1, SessionOpen(S1, 5000, "broker-1", "node-a", ("web",)))
    state.apply(2, MetaPut(b"brokers/1", b"10.0.0.5:9092", None, S1))
    state.apply(3, MetaPut(b"config", b"x"))
    return state


def test_a_sessions_end_deletes_its_keys_at_one_revision_and_nothing_else():
    state = _opened()
    state.changes = []
    assert state.apply(4, MetaPut(b"brokers/1b", b"y", None, S1)) == Applied(4)
    assert state.apply(5, SessionEnd(S1, END_EXPIRED)) == Applied(5)
    assert sorted(state.keys) == [b"config"] and not state.sessions
    assert state.changes[-2:] == [(5, b"brokers/1", None), (5, b"brokers/1b", None)]
    assert state.apply(6, SessionEnd(S1)) == NoSession(S1)  # ended once only


def test_a_write_under_a_session_that_is_not_open_changes_nothing():
    state = _opened()
    before = dict(state.keys)
    assert state.apply(4, MetaPut(b"brokers/2", b"v", None, S2)) == NoSession(S2)
    txn = MetaTxn((), (MetaPut(b"a", b"1"), MetaPut(b"b", b"2", None, S2)))
    assert state.apply(5, txn) == NoSession(S2)
    assert state.keys == before


def test_a_write_without_the_session_takes_the_key_from_it_as_etcd_does():
    state = _opened()
    state.apply(4, MetaPut(b"brokers/1", b"kept", None, b""))
    state.apply(5, SessionEnd(S1, END_CLOSED))
    assert state.get(b"brokers/1").value == b"kept" and state.get(b"brokers/1").session == b""
    state.apply(6, SessionOpen(S2, 5000))
    state.apply(7, MetaPut(b"k", b"v", None, S2))
    state.apply(8, MetaDelete(b"k"))
    assert S2 not in state.owned


def test_a_snapshot_carries_the_sessions_and_who_owns_each_key():
    state = _opened()
    back = restore(take(state, 1))
    assert back.sessions == state.sessions and back.keys == state.keys
    assert back.owned == {S1: {b"brokers/1"}}
    back.apply(4, SessionEnd(S1))
    assert sorted(back.keys) == [b"config"]


def test_a_snapshot_of_the_format_before_sessions_is_still_read():
    import msgspec

    data = msgspec.msgpack.encode([1, [[b"k", b"v", 1, 1, 1]], [["a", [7]]]])
    back = restore(Snapshot(1, 1, data, digest(data)))
    assert back.get(b"k").value == b"v" and back.sessions == {}


def test_session_ops_and_renewals_cross_the_wire_and_bad_ids_are_refused():
    for msg in (
        Propose("node-a", 1, SessionOpen(S1, 10_000, "w", "node-a", ("c",)), 3),
        Propose("node-a", 2, SessionEnd(S1, END_EXPIRED), 3),
        Propose("node-a", 3, MetaPut(b"k", b"v", 0, S1), 3),
        Propose("node-a", 4, MetaTxn((), (MetaPut(b"k", b"v", None, S1),)), 3),
        Keepalive("node-a", 9, (S1, S2)),
        KeepaliveResult(9, True, (S2,)),
    ):
        assert codec.decode_payload(codec.encode_payload([msg])) == [msg]
    for bad in (Keepalive("node-a", 9, (b"\x01" * 15,)), Propose("n", 1, SessionOpen(S1, 0), 3),
                Propose("n", 1, SessionEnd(S1, 7), 3)):  # fmt: skip
        with pytest.raises(DecodeError):
            codec.decode_payload(codec.encode_payload([bad]))


class OneVoter:
    """A one-voter leader of epoch `epoch`; its own durable acks fed back."""

    def __init__(self, epoch: int = 1, log: MetaLog | None = None) -> None:
        self.leading: int | None = epoch
        self.log = log or MetaLog("node-a", ME, MetaConfig(), random.Random(1), (),
                                  leading_epoch=lambda: self.leading,
                                  highest_epoch=lambda: self.leading or 0,
                                  saw_epoch=lambda e: None, voters=lambda: (("node-a",),),
                                  controller=lambda: None, addr_of=lambda n: None)  # fmt: skip
        self.events: list[object] = []

    def run(self, now: float) -> None:
        self.log.tick(now)
        for _ in range(5):
            out = self.log.drain()
            self.events += out.events
            for item in out.persist:
                for release in item.releases:
                    for msg in release.messages:
                        self.log.receive(msg, ME, now)

    def done(self, kind: type) -> list:
        return [e for e in self.events if isinstance(e, kind)]


def test_a_renewed_session_lives_and_a_silent_one_is_ended_with_its_keys():
    node = OneVoter()
    node.run(0.0)
    node.log.propose(SessionOpen(S1, 2000), 0.0)
    node.log.propose(SessionOpen(S2, 2000), 0.0)
    node.run(0.0)
    node.log.propose(MetaPut(b"lock", b"me", 0, S2), 0.1)
    node.run(0.1)
    assert [d.outcome for d in node.done(ProposalDone)] == [OUTCOME_COMMITTED] * 3
    for t in (1.0, 2.0, 3.0):  # S1 renewed each second, S2 never
        node.log.keepalive((S1,), t)
        node.run(t)
    assert node.done(KeepaliveDone)[-1] == KeepaliveDone(node.done(KeepaliveDone)[-1].rid, True)
    assert [e.id for e in node.done(SessionEnded)] == [S2]
    assert node.log.state.get(b"lock") is None and S1 in node.log.state.sessions
    node.log.keepalive((S1, S2), 3.5)
    node.run(3.5)
    assert node.done(KeepaliveDone)[-1].ended == (S2,)
    node.run(5.4)
    assert len(node.done(SessionEnded)) == 1  # renewed at 3.5: lives until 5.5
    node.run(5.6)
    assert [e.id for e in node.done(SessionEnded)] == [S2, S1]
    node.log.propose(MetaPut(b"late", b"x", None, S1), 5.7)
    node.run(5.7)
    assert node.done(ProposalDone)[-1].outcome == OUTCOME_NO_SESSION
    assert node.log.state.get(b"late") is None


def test_a_new_controller_gives_every_session_a_full_ttl_from_its_start():
    node = OneVoter(epoch=1)
    node.run(0.0)
    node.log.propose(SessionOpen(S1, 2000), 0.0)
    node.run(0.0)
    node.leading = None  # the lease is lost at 0.5 s: no renewal reaches anyone
    node.run(0.5)
    node.leading = 2  # leads again (a new epoch) at 1.9 s
    node.run(1.9)
    node.run(3.8)  # 3.8 s after the last renewal, but 1.9 s into epoch 2
    assert not node.done(SessionEnded) and S1 in node.log.state.sessions
    node.run(3.95)
    assert [e.id for e in node.done(SessionEnded)] == [S1]


def test_a_renewal_is_not_served_before_the_new_controller_has_committed():
    node = OneVoter()
    node.log.tick(0.0)  # leading, its no-op not yet durable
    node.log.keepalive((S1,), 0.0)
    assert [e for e in node.log.drain().events if isinstance(e, KeepaliveDone)][0].ok is False


def test_a_controller_whose_lease_has_ended_serves_no_renewal():
    """Regression (found by the session swarm, sim/sessioncheck.py): a
    controller woken from a pause past its lease answers the renewals
    queued while it slept before its election's timers have told the log
    it no longer leads; a successor counts none of them, so the session
    could expire while its client believed it renewed. Past its lease's
    end (on its own clock) it refuses them: not served."""
    node = OneVoter()
    lease_end = [10.0]
    node.log.lease_end = lambda: lease_end[0]
    node.run(0.0)
    node.log.propose(SessionOpen(S1, 2000), 0.0)
    node.run(0.0)
    node.log.receive(Keepalive("node-b", 7, (S1,)), ("10.0.0.2", 7946), 9.9)
    node.log.receive(Keepalive("node-b", 8, (S1,)), ("10.0.0.2", 7946), 10.0)
    sent = [m for s in node.log.drain().send for m in s.messages if isinstance(m, KeepaliveResult)]
    assert sent == [KeepaliveResult(7, True), KeepaliveResult(8, False)]
    node.log.keepalive((S1,), 10.5)  # its own client's, too
    assert node.done(KeepaliveDone) == [] and node.log.epoch == 1  # still believes it leads
    assert [e.ok for e in node.log.drain().events if isinstance(e, KeepaliveDone)] == [False]
    lease_end[0] = 12.0  # the lease renewed meanwhile: served again
    node.log.keepalive((S1,), 11.0)
    assert [e.ok for e in node.log.drain().events if isinstance(e, KeepaliveDone)] == [True]


@pytest.mark.parametrize("origin", ["a", "n" * 128])
@pytest.mark.parametrize("mtu_bytes", [452, 1340, 8940])
def test_the_ids_an_agent_batches_into_a_keepalive_fit_a_datagram(origin, mtu_bytes):
    """The renewals an agent sends together (daemon/renewals.py) fill a
    datagram and do not overflow it, at the smallest MTU a profile allows
    and beyond (within the codec's cap); the answer with every id ended fits too."""
    per = keepalive_ids_fitting(origin, mtu_bytes)
    ids = tuple(bytes([i % 256, i // 256]) * 8 for i in range(per + 1))
    fits = len(codec.encode_payload((Keepalive(origin, 2**64 - 1, ids[:per]),)))
    over = len(codec.encode_payload((Keepalive(origin, 2**64 - 1, ids),)))
    assert fits <= mtu_bytes and (over > mtu_bytes or per == MAX_KEEPALIVE_IDS)
    answer = codec.encode_payload((KeepaliveResult(2**64 - 1, True, ids[:per]),))
    assert len(answer) <= mtu_bytes
    assert codec.decode_payload(answer) == [KeepaliveResult(2**64 - 1, True, ids[:per])]
