"""The metadata log in the agent: the API's writes and reads, and their answers.

A write or a read asked through the API becomes one `ShoalNode.meta_propose`
or `meta_read` call, which returns an id; the node's `ProposalDone` or
`ReadDone` event with that id (from a flush, maybe much later, maybe at
once) completes the caller's future. A caller waits a bounded time
(`[meta] answer_timeout_s` and a margin): a write handed to the controller
and not answered by then has an *unknown* outcome, and is told so.

Messages the log sends to this agent's own address (the controller's own
durable answer to itself) are delivered here, in the next pass of the
loop, not through the socket (`LocalDelivery`). The log sends datagrams;
what does not fit the MTU is split into datagrams that do (an `Append`
into consecutive appends), and only a single message larger than the MTU
(a large value, a snapshot's chunk) goes on a stream instead
(`sends_for`), and what arrives on a stream is answered at the sender's
gossip address, found by the name the message carries (`reply_to`): a
stream's source port is not one anybody listens on.

docs/metadata.md says what each outcome means to a user.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import msgspec

from shoal.daemon.metawatch import MetaWatches
from shoal.kernel import codec
from shoal.kernel.contract import Address, Channel, Send
from shoal.metalog.core import ProposalDone, ReadDone
from shoal.metalog.events import KeepaliveDone
from shoal.metalog.messages import (
    Append,
    AppendAck,
    Keepalive,
    Propose,
    ProposeResult,
    ReadRequest,
    ReadResult,
)
from shoal.metalog.snapshot import SnapshotChunk, TakeSnapshot, view_of
from shoal.metalog.state import KeyState, MetaOp
from shoal.node.composition import ShoalNode

# What a caller waits beyond the log's own answer timeout: the origin's
# timeout answers first, as unknown, when the controller is silent.
_MARGIN_S = 1.0


class MetaService:
    """Futures for the API's metadata writes and reads, by id."""

    def __init__(self, loop: asyncio.AbstractEventLoop, node: Callable[[], ShoalNode],
                 flush: Callable[[], None], timeout_s: float,
                 hand_over: Callable[[], None] = lambda: None) -> None:  # fmt: skip
        """Args:
        loop: the agent's loop.
        node: the node (built after this service's owner starts).
        flush: the agent's flush (drains the node, sends, publishes).
        timeout_s: the log's answer timeout (`[meta] answer_timeout_s`).
        hand_over: starts the sync of the writes made so far
            (`GroupCommit.hand_over_now`).
        """
        self._hand_over = hand_over
        self._loop = loop
        self._node = node
        self._flush = flush
        self.wait_s = timeout_s + _MARGIN_S
        # Each write's future and the timer that gives up on it, by id.
        self._writes: dict[int, tuple[asyncio.Future[ProposalDone | None],
                                      asyncio.TimerHandle]] = {}  # fmt: skip
        self._reads: dict[int, asyncio.Future[ReadDone]] = {}
        self._renewals: dict[int, tuple[asyncio.Future[KeepaliveDone | None],
                                        asyncio.TimerHandle]] = {}  # fmt: skip
        # Readers waiting for this agent to apply up to a revision.
        self._applying: list[tuple[int, asyncio.Future[None]]] = []
        self._flush_due = False  # a flush is scheduled for this pass's end
        self._flush_more = False  # and it has something to do
        # -- watches (daemon/metawatch.py): fed the key changes after each flush.
        self.watches = MetaWatches()

    def submit(self, op: MetaOp) -> asyncio.Future[ProposalDone | None]:
        """Write `op` through the controller, at once (in the caller's pass
        of the loop); the future holds its outcome, or None when no answer
        came in time (unknown: it may yet commit). Never cancel it."""
        fut: asyncio.Future[ProposalDone | None] = self._loop.create_future()
        pid = self._node().meta_propose(op, self._loop.time())
        self._writes[pid] = (fut, self._loop.call_later(self.wait_s, self._give_up, pid))
        self.flush_soon()  # the outcome may be known at once (not applied)
        return fut

    async def propose(self, op: MetaOp) -> ProposalDone | None:
        """Write `op` through the controller; its outcome, or None when no
        answer came in time (unknown: it may yet commit)."""
        return await self.submit(op)

    def flush_soon(self) -> None:
        """Flush now if no flush is pending, and once more at the end of
        this pass of the loop for what comes after in the same pass: the
        first request or message of a pass waits for nothing (a lone client
        gets the latency of a flush each), and those after it (32 clients'
        requests, or acknowledgements, arrive together) leave as one append
        per voter, one write, and one datagram of proposals to the
        controller, where a flush each sent one of each per request. With
        the merging of metalog/batching.py and of `_hold_ack`: 2.73
        datagrams into the controller per write under 32 clients before,
        0.36-0.43 after, and 311 µs of its CPU per write before, 106-115
        after (docs/performance.md, "The metadata log").

        That first flush's writes go to the sync thread as soon as it has
        sent, not at the end of the pass (`GroupCommit.hand_over_now`): a
        lone put's appends leave first, then the controller's sync starts,
        and a follower's sync starts without waiting for the next pass."""
        if self._flush_due:
            self._flush_more = True
            return
        self._flush_due, self._flush_more = True, False
        self._loop.call_soon(self._flush_now)
        self._flush()
        self._hand_over()  # its sends are out: its writes' sync starts now

    def flush_later(self, messages: list[Any]) -> bool:
        """Whether `messages`, just received, are all the log's: then they
        are flushed by `flush_soon` (at once when no flush is pending, else
        with the others that arrived in this pass of the loop, at its end),
        so that acknowledgements and proposals arriving together are
        answered by one append per voter and one write, not one each."""
        meta = self._node().meta
        assert meta is not None
        handled = meta.handlers
        if not all(type(m) in handled for m in messages):
            return False
        self.flush_soon()
        return True

    def _give_up(self, pid: int) -> None:
        """No answer in time: the outcome is unknown (None)."""
        fut, _ = self._writes.pop(pid)
        if not fut.done():
            fut.set_result(None)

    def _flush_now(self) -> None:
        self._flush_due = False
        if self._flush_more:
            self._flush()

    async def read(self, key: bytes) -> ReadDone | None:
        """Read `key` linearizably through the controller; None when no
        answer came in time. Once served, wait (within the same bound) for
        this agent to have applied as far, so that the key's whole state
        can be answered from here (`stale`): any state at or after the
        controller's read revision is one the read may return."""
        fut: asyncio.Future[ReadDone] = self._loop.create_future()
        started = self._loop.time()
        rid = self._node().meta_read(key, started)
        self._reads[rid] = fut
        self.flush_soon()
        try:
            done = await asyncio.wait_for(asyncio.shield(fut), self.wait_s)
        except TimeoutError:
            return None
        finally:
            self._reads.pop(rid, None)
        if done.ok and self.stale(key)[1] < done.revision:
            applied: asyncio.Future[None] = self._loop.create_future()
            self._applying.append((done.revision, applied))
            left = max(0.0, started + self.wait_s - self._loop.time())
            try:
                await asyncio.wait_for(asyncio.shield(applied), left)
            except TimeoutError:  # answered from the controller's values alone
                self._applying = [w for w in self._applying if w[1] is not applied]
        return done

    async def until_applied(self, revision: int) -> bool:
        """Wait (within the answer bound) until this agent has applied the
        log up to `revision`; whether it has."""
        meta = self._node().meta
        assert meta is not None
        if meta.state.revision >= revision:
            return True
        applied: asyncio.Future[None] = self._loop.create_future()
        self._applying.append((revision, applied))
        try:
            await asyncio.wait_for(asyncio.shield(applied), self.wait_s)
        except TimeoutError:
            self._applying = [w for w in self._applying if w[1] is not applied]
            return False
        return True

    def submit_keepalive(self, ids: tuple[bytes, ...]) -> asyncio.Future[KeepaliveDone | None]:
        """Renew sessions `ids` at the controller (metalog/sessionclock.py),
        at once (in the caller's pass of the loop); the future holds the
        answer, or None when none came in time. Never cancel it
        (daemon/renewals.py batches the API's renewals into these)."""
        fut: asyncio.Future[KeepaliveDone | None] = self._loop.create_future()
        rid = self._node().meta_keepalive(ids, self._loop.time())
        self._renewals[rid] = (fut, self._loop.call_later(self.wait_s, self._no_renewal, rid))
        self.flush_soon()
        return fut

    def _no_renewal(self, rid: int) -> None:
        """No answer to renewal `rid` in time: None."""
        fut, _ = self._renewals.pop(rid)
        if not fut.done():
            fut.set_result(None)

    def note_applied(self) -> None:
        """After a flush: feed the watches; wake the readers this agent has
        applied far enough for."""
        meta = self._node().meta
        assert meta is not None
        self.watches.feed(meta.state, meta.log.held_from())
        if not self._applying:
            return
        revision = meta.state.revision
        waiting = []
        for until, fut in self._applying:
            if until <= revision:
                if not fut.done():
                    fut.set_result(None)
            elif not fut.done():
                waiting.append((until, fut))
        self._applying = waiting

    def stale(self, key: bytes) -> tuple[KeyState | None, int]:
        """`key` as this agent has applied it, and the revision applied."""
        meta = self._node().meta
        assert meta is not None
        return meta.state.get(key), meta.state.revision

    def applied_keys(self) -> tuple[dict[bytes, KeyState], int]:
        """Every key as this agent has applied it (not to be changed), and
        the revision applied: what a listing pages through."""
        meta = self._node().meta
        assert meta is not None
        return meta.state.keys, meta.state.revision

    def backup_view(self) -> tuple[TakeSnapshot, Any]:
        """A copy of the state as applied here (with its revision's epoch)
        and the voter configuration (a `VoterConfig` or None): what a
        backup holds (daemon/api/snapshot.py)."""
        node = self._node()
        meta = node.meta
        assert meta is not None
        state = meta.state
        epoch = meta.log.epoch_at(state.revision) or 0
        return view_of(state, state.revision, epoch), node.election.voters

    def done(self, event: ProposalDone | ReadDone | KeepaliveDone) -> None:
        """An outcome from the node: complete its caller's future."""
        fut: Any
        if isinstance(event, KeepaliveDone | ProposalDone):
            timed = (self._renewals.pop(event.rid, None) if isinstance(event, KeepaliveDone)
                     else self._writes.pop(event.pid, None))  # fmt: skip
            if timed is None:
                return
            timed[1].cancel()
            fut = timed[0]
        else:
            fut = self._reads.get(event.rid)
        if fut is not None and not fut.done():
            fut.set_result(event)


class LocalDelivery:
    """Sends addressed to this agent itself, delivered in the loop's next
    pass (after the flush that made them), in order; and a follower's
    acknowledgements to one leader, merged per pass of the loop."""

    def __init__(self, loop: asyncio.AbstractEventLoop, me: Address,
                 receive: Callable[[list[Any], Address], None]) -> None:  # fmt: skip
        self._loop = loop
        self.me = me
        self._receive = receive
        self._queued: list[Send] = []
        # Acknowledgements held until the end of this pass, by (leader, epoch).
        self._acks: dict[tuple[Address, int], AppendAck] = {}
        self._acking = False  # an ack left in this pass: the next ones are held
        self._net_send: Callable[[Send], None] | None = None

    def route(self, send: Send, net_send: Callable[[Send], None], mtu_bytes: int) -> None:
        """Deliver `send` here when it is addressed to `me`; hold an
        acknowledgement to merge it; else send it, split to the MTU."""
        if send.to == self.me:
            if not self._queued:
                self._loop.call_soon(self._deliver)
            self._queued.append(send)
        elif not self._hold_ack(send, net_send):
            for part in sends_for(send, mtu_bytes):
                net_send(part)

    def _hold_ack(self, send: Send, net_send: Callable[[Send], None]) -> bool:
        """Whether a successful `AppendAck` is held, to be merged with the
        others to the same leader in this pass of the loop: the first of a
        pass leaves at once (a lone append is answered without waiting), the
        ones after it leave as one at the end of the pass, saying the
        highest index held durably and the highest read round heard (each
        of which one of them said). One sync covers every append that
        arrived meanwhile (an append split to the MTU comes in parts), and
        acknowledging each was one datagram each for the controller to take
        (docs/performance.md, "The metadata log")."""
        if len(send.messages) != 1 or send.channel is not Channel.PACKET:
            return False
        ack = send.messages[0]
        if type(ack) is not AppendAck or not ack.ok:
            return False
        if not self._acking:  # the first of this pass: at once
            self._acking = True
            self._net_send = net_send
            self._loop.call_soon(self._send_acks)
            return False
        key = (send.to, ack.epoch)
        held = self._acks.get(key)
        self._acks[key] = ack if held is None else AppendAck(
            ack.epoch, ack.follower, True, max(ack.match_index, held.match_index),
            max(ack.read_seq, held.read_seq))  # fmt: skip
        return True

    def _send_acks(self) -> None:
        acks, self._acks, self._acking = self._acks, {}, False
        assert self._net_send is not None
        for (to, _), ack in acks.items():
            self._net_send(Send(to, (ack,)))

    def _deliver(self) -> None:
        queued, self._queued = self._queued, []
        for send in queued:
            self._receive(list(send.messages), self.me)


def sends_for(send: Send, mtu_bytes: int) -> list[Send]:
    """`send` as datagrams of at most `mtu_bytes` each: one that does not
    fit is split (its messages in parts, an `Append`'s entries in
    consecutive appends, as the leader's pipelining sends them anyway); a
    single message that cannot be split and does not fit goes on a stream.

    Streams were the way for anything over the MTU, but each is a new TCP
    connection (daemon/network/streams.py): under 32 clients the controller
    opened 0.19 per write (an append of nine 100-byte entries is over the
    MTU), 10-16 % of its py-spy samples; split, 1,682 to 1,972 puts/s in
    the same profile run (docs/performance.md, "The metadata log")."""
    messages = send.messages
    if send.channel is not Channel.PACKET or not (
        _heavy(messages[0]) if len(messages) == 1 else any(type(m) in _SIZED for m in messages)
    ):
        return [send]
    if len(codec.encode_payload(messages)) <= mtu_bytes:
        return [send]
    if len(messages) > 1:
        half = len(messages) // 2
        return (sends_for(Send(send.to, messages[:half]), mtu_bytes)
                + sends_for(Send(send.to, messages[half:]), mtu_bytes))  # fmt: skip
    msg = messages[0]
    if type(msg) is not Append or len(msg.entries) < 2:
        return [Send(send.to, messages, Channel.STREAM)]
    half = len(msg.entries) // 2
    last = msg.entries[half - 1]
    first = msgspec.structs.replace(msg, entries=msg.entries[:half])
    rest = msgspec.structs.replace(msg, prev_index=last.index, prev_epoch=last.epoch,
                                   entries=msg.entries[half:])  # fmt: skip
    return sends_for(Send(send.to, (first,)), mtu_bytes) + sends_for(Send(send.to, (rest,)),
                                                                      mtu_bytes)  # fmt: skip


# The log's messages that may come many to a send (metalog/batching.py).
_SIZED = frozenset((Append, Propose, ProposeResult, ReadRequest, ReadResult, SnapshotChunk))


def _heavy(m: Any) -> bool:
    """Whether message `m` may not fit a datagram (it carries entries or a value)."""
    kind = type(m)
    return ((kind is Append and bool(m.entries)) or kind is Propose
            or (kind is ReadResult and m.value is not None)
            or (kind is ProposeResult and m.txn is not None) or kind is SnapshotChunk)  # fmt: skip


def reply_to(node: ShoalNode, messages: list[Any], sender: Address) -> Address:
    """Where the answers to `messages` go: the gossip address of the member
    that a log request names (its leader or origin), else `sender`."""
    first = messages[0] if messages else None
    kind = type(first)
    if kind is Append or kind is SnapshotChunk:
        name = first.leader  # type: ignore[union-attr]
    elif kind is Propose or kind is ReadRequest or kind is Keepalive:
        name = first.origin  # type: ignore[union-attr]
    else:
        return sender
    ident = node.identity_of(name)
    return sender if ident is None else ident.addr
