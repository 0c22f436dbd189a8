"""Streams: the TCP side of the gossip port, and key commands.

State transfers (push-pull, anti-entropy, key commands) travel as one
framed request on a short TCP connection, with at most one framed answer.
An inbound stream's writer is kept while its request is handled, so that a
core's answer to that peer goes back on the same connection. An outbound
stream is one task; a failure is told to the cores (`stream_failed`).

A `KeyCommand` never reaches the cores: it is applied here, and only when
it arrived sealed (never plaintext, even while a migration accepts
plaintext gossip). A `QueryRequest` is answered here too (`answer_query`,
daemon/network/queries.py), sealed only when this agent has a keyring.
An outbound stream is bound to its receiver's run (`FirstContact.bound`);
an answer on an inbound stream to the run of the request it answers.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any

from shoal.daemon.network.first_contact import FirstContact
from shoal.daemon.network.transport import read_frame
from shoal.daemon.network.wire import Received, Wire
from shoal.kernel import codec
from shoal.kernel.contract import Address, Send
from shoal.kernel.sealing import UNBOUND, Hello, KeyCommand, KeyReply, Welcome
from shoal.services.queries import QueryReply, QueryRequest

Receive = Callable[[list[Any], Address], None]
# Never the first frame of an inbound stream: answers, and first contact
# (a datagram's business).
_NOT_ON_STREAMS = {KeyReply, QueryReply, Hello, Welcome}
Dropped = Callable[[str, Address, str], None]


class Streams:
    """Inbound and outbound streams of one agent."""

    def __init__(self, wire: Wire, contact: FirstContact, timeout_s: float,
                 counters: Counter[str], receive: Receive, failed: Callable[[Address], None],
                 apply_key: Callable[[KeyCommand], KeyReply],
                 dropped: Dropped) -> None:  # fmt: skip
        """Args:
        wire: encodes and decodes frames.
        contact: binds an outbound stream to its receiver.
        timeout_s: connect and read timeout (`swim.stream_timeout_s`).
        counters: the agent's counters.
        receive: hands decoded messages from a peer to the node (and flushes).
        failed: tells the node that a stream to a peer failed (and flushes).
        apply_key: applies a key command here (`KeyService.apply`).
        dropped: counts and logs a rejected frame.
        """
        self._wire = wire
        self._contact = contact
        self._timeout_s = timeout_s
        self._counters = counters
        self._receive = receive
        self._failed = failed
        self._apply_key = apply_key
        self._dropped = dropped
        # An inbound stream's writer, and the binding of the request's sender.
        self._inbound: dict[Address, tuple[asyncio.StreamWriter, bytes]] = {}
        # Answers a query (QueryService.answer), set by the agent.
        self.answer_query: Callable[[QueryRequest], Awaitable[QueryReply]] | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    async def accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Serve one inbound stream (the TCP listener's callback)."""
        peer_info = writer.get_extra_info("peername")
        peer: Address = (str(peer_info[0]), int(peer_info[1]))
        self._counters["streams_in"] += 1
        try:
            body = await read_frame(reader, self._timeout_s)
            if body is not None:
                received = self._wire.decode(body)
                messages = received.messages
                to = self._answer_to(received)
                if any(type(m) in _NOT_ON_STREAMS for m in messages):
                    self._dropped("unexpected", peer, "a reply or first contact on a stream")
                    return
                if any(isinstance(m, KeyCommand) for m in messages):
                    self._on_key_command(received.sealed, messages, writer, peer, to)
                    await writer.drain()
                    return
                if any(isinstance(m, QueryRequest) for m in messages):
                    await self._on_query(received.sealed, messages, writer, peer, to)
                    return
                self._inbound[peer] = (writer, to)
                self._receive(messages, peer)
                await writer.drain()
        except codec.DecodeError as exc:
            self._dropped(exc.reason, peer, str(exc))
        except (TimeoutError, OSError, asyncio.IncompleteReadError):
            self._counters["stream_errors"] += 1
        finally:
            self._inbound.pop(peer, None)
            writer.close()

    def send(self, send: Send) -> None:
        """Send on the peer's open inbound stream, or open one."""
        inbound = self._inbound.get(send.to)
        if inbound is not None:
            writer, to = inbound
            writer.write(self._wire.frame(send.messages, to))
            return
        task = asyncio.get_running_loop().create_task(self._stream_out(send))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def close(self) -> None:
        """Cancel the outbound streams still running."""
        for task in self._tasks:
            task.cancel()

    def _answer_to(self, received: Received) -> bytes:
        envelope = received.envelope
        if envelope is None:
            return UNBOUND
        found = self._wire.sessions.binding_of(envelope.sender)
        return UNBOUND if found is None else found

    def _on_key_command(self, sealed: bool, messages: list[Any], writer: asyncio.StreamWriter,
                        peer: Address, to: bytes) -> None:  # fmt: skip
        # Only a member holding a key may change keyrings: never plaintext,
        # even while a migration accepts plaintext gossip.
        if not sealed or len(messages) != 1:
            self._dropped("key_command_refused", peer, "plaintext or mixed key command")
            return
        self._counters["key_commands"] += 1
        writer.write(self._wire.frame([self._apply_key(messages[0])], to))

    async def _on_query(self, sealed: bool, messages: list[Any], writer: asyncio.StreamWriter,
                        peer: Address, to: bytes) -> None:  # fmt: skip
        # A query runs a handler: with a keyring, only for a member holding a key.
        if len(messages) != 1 or self.answer_query is None or (
                self._wire.keyring is not None and not sealed):  # fmt: skip
            self._dropped("query_refused", peer, "plaintext, mixed or unexpected query")
            return
        self._counters["queries_answered"] += 1
        reply = await self.answer_query(messages[0])
        writer.write(self._wire.frame([reply], to))
        await writer.drain()

    async def _stream_out(self, send: Send) -> None:
        timeout_s = self._timeout_s
        expects_reply = any(getattr(m, "expects_reply", False) for m in send.messages)
        self._counters["streams_out"] += 1
        try:
            to = await self._contact.bound(send.to, timeout_s)
            async with asyncio.timeout(timeout_s):
                reader, writer = await asyncio.open_connection(*send.to)
            try:
                writer.write(self._wire.frame(send.messages, to))
                await writer.drain()
                if expects_reply:
                    body = await read_frame(reader, timeout_s)
                    if body is None:
                        raise ConnectionResetError("closed without a reply")
                    messages = self._wire.decode(body).messages
                    self._receive(messages, send.to)
            finally:
                writer.close()
        except (TimeoutError, OSError, asyncio.IncompleteReadError, codec.DecodeError):
            self._counters["stream_errors"] += 1
            self._failed(send.to)
