"""A drain's proposals and answers to one peer, merged into one send
(metalog/batching.py); what else it sends is left as it is."""

from __future__ import annotations

from shoal.kernel.contract import Output, Persist, Send
from shoal.metalog.batching import MAX_MERGED, merged
from shoal.metalog.messages import Append, AppendAck, Propose, ProposeResult, ReadRequest
from shoal.metalog.state import MetaPut

A, B = ("10.0.0.1", 7946), ("10.0.0.2", 7946)


def test_answers_and_proposals_merge_per_peer_and_kind_in_order():
    r = [ProposeResult(i, 1, 100 + i) for i in range(4)]
    p = Propose("c", 7, MetaPut(b"k", b"v", None), 2)
    q = ReadRequest("c", 8, b"k")
    append = Append(2, "c", 0, 0, (), 0, 0)
    sends = (Send(A, (r[0],)), Send(B, (r[1],)), Send(A, (append,)), Send(A, (r[2],)),
             Send(A, (p,)), Send(B, (r[3],)), Send(A, (q,)))  # fmt: skip
    persist = (Persist(None, (Send(A, (AppendAck(2, "c", True, 3),)),)),)
    out = merged(Output(persist, sends, ("event",)))
    assert out.send == (Send(A, (r[0], r[2])), Send(B, (r[1], r[3])), Send(A, (append,)),
                        Send(A, (p,)), Send(A, (q,)))  # fmt: skip
    assert out.persist == persist and out.events == ("event",)


def test_a_merged_send_holds_at_most_max_merged_messages():
    sends = tuple(Send(A, (ProposeResult(i, 1, i),)) for i in range(MAX_MERGED * 2 + 1))
    out = merged(Output((), sends, ()))
    assert [len(s.messages) for s in out.send] == [MAX_MERGED, MAX_MERGED, 1]
    assert [m for s in out.send for m in s.messages] == [s.messages[0] for s in sends]


def test_nothing_to_merge_is_the_same_output():
    out = Output((), (Send(A, (ProposeResult(1, 1, 1),)), Send(B, (ProposeResult(2, 1, 2),))), ())
    assert merged(out) is out
