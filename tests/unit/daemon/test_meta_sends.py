"""How the agent sends the metadata log's messages (daemon/meta.py): split
to the MTU rather than on a new stream each, a follower's acknowledgements
merged per pass of the loop, its own messages delivered here."""

from __future__ import annotations

import asyncio
import random

from shoal.daemon.meta import LocalDelivery, MetaService, sends_for
from shoal.kernel import codec
from shoal.kernel.contract import Channel, Send
from shoal.metalog.core import MetaConfig, MetaLog
from shoal.metalog.messages import Append, AppendAck, Entry, Propose, ProposeResult
from shoal.metalog.state import MetaPut

MTU = 1400
LEADER = ("10.0.0.1", 7946)
ME = ("10.0.0.2", 7946)


def entries(n: int, value_bytes: int = 100, first: int = 1) -> tuple[Entry, ...]:
    return tuple(Entry(3, i, MetaPut(b"bench/k/%d" % i, b"v" * value_bytes, None), "a", i)
                 for i in range(first, first + n))  # fmt: skip


def follower() -> MetaLog:
    """A real follower's core: voters a, b, c; a leads epoch 3."""
    addrs = {"a": LEADER, "b": ME, "c": ("10.0.0.3", 7946)}
    return MetaLog("b", ME, MetaConfig(), random.Random(1), (), leading_epoch=lambda: None,
                   highest_epoch=lambda: 3, saw_epoch=lambda _: None,
                   voters=lambda: (("a", "b", "c"),), controller=lambda: ("a", 3),
                   addr_of=addrs.get)  # fmt: skip


def test_an_append_over_the_mtu_goes_as_consecutive_appends_a_follower_takes():
    big = Append(3, "a", 0, 0, entries(40), 0, 7)
    assert len(codec.encode_payload([big])) > 3 * MTU
    parts = sends_for(Send(LEADER, (big,)), MTU)
    assert len(parts) >= 4
    assert all(p.channel is Channel.PACKET and len(p.messages) == 1 for p in parts)
    assert all(len(codec.encode_payload(p.messages)) <= MTU for p in parts)
    appends = [p.messages[0] for p in parts]
    assert tuple(e for a in appends for e in a.entries) == big.entries
    meta = follower()
    for append in appends:
        meta.receive(append, LEADER, 1.0)
    out = meta.drain()
    assert meta.log.last_index == 40
    acks = [m for s in out.all_sends() for m in s.messages]
    assert acks and all(type(a) is AppendAck and a.ok and a.read_seq == 7 for a in acks)
    assert max(a.match_index for a in acks) == 40


def test_what_fits_is_sent_as_it_is_and_one_large_value_goes_on_a_stream():
    small = Send(LEADER, (Append(3, "a", 0, 0, entries(3), 0, 0),))
    assert sends_for(small, MTU) == [small]
    huge = Send(LEADER, (Propose("b", 9, MetaPut(b"k", b"x" * 20_000, None), 3),))
    assert sends_for(huge, MTU) == [Send(LEADER, huge.messages, Channel.STREAM)]
    one_entry = Send(LEADER, (Append(3, "a", 0, 0, entries(1, 20_000), 0, 0),))
    assert [s.channel for s in sends_for(one_entry, MTU)] == [Channel.STREAM]


def test_many_answers_to_one_origin_are_split_into_datagrams_that_fit():
    answers = tuple(ProposeResult(2**40 + i, 1, 10_000 + i) for i in range(128))
    parts = sends_for(Send(ME, answers), MTU)
    assert len(parts) > 1
    assert all(p.channel is Channel.PACKET for p in parts)
    assert all(len(codec.encode_payload(p.messages)) <= MTU for p in parts)
    assert tuple(m for p in parts for m in p.messages) == answers


def test_a_followers_acks_to_one_leader_after_the_first_of_a_pass_leave_as_one():
    async def run() -> tuple[list[Send], list[tuple[list[object], tuple[str, int]]]]:
        loop = asyncio.get_running_loop()
        sent: list[Send] = []
        here: list[tuple[list[object], tuple[str, int]]] = []
        local = LocalDelivery(loop, ME, lambda msgs, sender: here.append((msgs, sender)))
        first = AppendAck(3, "b", True, 6, 4)
        for match, seq in ((6, 4), (10, 4), (18, 4), (15, 5)):
            local.route(Send(LEADER, (AppendAck(3, "b", True, match, seq),)), sent.append, MTU)
        refusal = AppendAck(3, "b", False, 2, 5)
        local.route(Send(LEADER, (refusal,)), sent.append, MTU)
        local.route(Send(ME, (AppendAck(3, "b", True, 1, 0),)), sent.append, MTU)
        # The first leaves at once (a lone append waits for nothing), a refusal too.
        assert sent == [Send(LEADER, (first,)), Send(LEADER, (refusal,))]
        assert not here
        await asyncio.sleep(0)  # the end of the pass
        return sent, here

    sent, here = asyncio.run(run())
    assert sent[2:] == [Send(LEADER, (AppendAck(3, "b", True, 18, 5),))]
    assert here == [([AppendAck(3, "b", True, 1, 0)], ME)]


class _Node:
    """What MetaService asks of the node: ids for proposals."""

    def __init__(self) -> None:
        self.proposed: list[object] = []

    def meta_propose(self, op: object, now: float) -> int:
        self.proposed.append(op)
        return len(self.proposed)


def test_the_first_write_of_a_pass_flushes_at_once_and_the_rest_together():
    async def run() -> list[int]:
        loop = asyncio.get_running_loop()
        flushes: list[int] = []
        node = _Node()
        service = MetaService(loop, lambda: node, lambda: flushes.append(len(node.proposed)),
                              0.0)  # type: ignore[arg-type, return-value]  # fmt: skip
        service.wait_s = 0.05
        writes = [service.submit(MetaPut(b"k%d" % i, b"v", None)) for i in range(32)]
        assert flushes == [1]  # the first at once: a lone client waits for nothing
        await asyncio.sleep(0)
        assert flushes == [1, 32]  # the 31 after it in one flush, at the pass's end
        service.submit(MetaPut(b"later", b"v", None))
        assert flushes == [1, 32, 33]
        done = await asyncio.gather(*writes)
        assert done == [None] * 32  # never answered: unknown once the wait is over
        return flushes

    assert asyncio.run(run()) == [1, 32, 33]
