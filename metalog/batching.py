"""Many small messages of the metadata log to one peer, as one send.

Under load a drain holds many proposals forwarded to the controller, or
many answers to one origin (a commit answers every proposal it covers at
once): one `Send` each was one datagram each, sealed, sent and received,
and on the receiving side one pass of the node and one flush each. Merged,
a drain's proposals to the controller are as few datagrams as the MTU
allows (daemon/meta.py `sends_for` splits them), and so are its answers
to each origin (docs/performance.md, "The metadata log").

Only sends whose messages are all of one of the kinds below are merged, and
only with sends of the same kind to the same peer: the receiver answers
what arrives on a stream at the address its first message names (daemon/
meta.py `reply_to`), and every message of these kinds from one node names
that node. Order per peer and kind is kept. Pure.
"""

from __future__ import annotations

from typing import Any

from shoal.kernel.contract import Address, Channel, Output, Send
from shoal.metalog.messages import Propose, ProposeResult, ReadRequest, ReadResult

_MERGED = (Propose, ProposeResult, ReadRequest, ReadResult)
# At most this many messages in one send (the codec takes 256 a datagram or frame).
MAX_MERGED = 128


def merged(out: Output) -> Output:
    """`out`, its sends of the kinds above merged per (peer, kind)."""
    sends = out.send
    if len(sends) < 2:
        return out
    # Each send kept as it is, or a group: its peer and the messages merged.
    kept: list[Send | tuple[Address, list[Any]]] = []
    groups: dict[tuple[Address, type], list[Any]] = {}
    for send in sends:
        kind = _kind(send)
        if kind is None:
            kept.append(send)
            continue
        group = groups.get((send.to, kind))
        if group is None or len(group) + len(send.messages) > MAX_MERGED:
            group = groups[(send.to, kind)] = list(send.messages)
            kept.append((send.to, group))
        else:
            group.extend(send.messages)
    if len(kept) == len(sends):
        return out
    return Output(out.persist, tuple(s if isinstance(s, Send) else Send(s[0], tuple(s[1]))
                                     for s in kept), out.events)  # fmt: skip


def _kind(send: Send) -> type | None:
    """The one mergeable kind of `send`'s messages (None: not all one such)."""
    if send.channel is not Channel.PACKET or not send.messages:
        return None
    kind = type(send.messages[0])
    if kind not in _MERGED or any(type(m) is not kind for m in send.messages):
        return None
    return kind
