"""One request and its one answer on a short stream: key commands
(network/keyops.py) and queries (network/queries.py) ask members this way."""

from __future__ import annotations

import asyncio
from typing import Any, TypeVar

from shoal.daemon.network.first_contact import FirstContact
from shoal.daemon.network.transport import read_frame
from shoal.daemon.network.wire import Wire
from shoal.kernel import codec

Answer = TypeVar("Answer")


class NoAnswer(Exception):
    """The member gave no usable answer; the message says why."""


async def ask(wire: Wire, contact: FirstContact, addr: tuple[str, int], request: Any,
              answer_type: type[Answer], timeout_s: float) -> Answer:  # fmt: skip
    """Send `request` on a new stream bound to the member at `addr` and
    return its answer.

    Raises:
        TimeoutError: no connection or no answer within `timeout_s`.
        NoAnswer: the connection failed, closed without an answer, or the
            answer was unreadable or of another type.
    """
    try:
        to = await contact.bound(addr, timeout_s)
        async with asyncio.timeout(timeout_s):
            reader, writer = await asyncio.open_connection(*addr)
        try:
            writer.write(wire.frame([request], to))
            await writer.drain()
            body = await read_frame(reader, timeout_s)
        finally:
            writer.close()
        if body is None:
            raise NoAnswer("closed without an answer")
        answer = wire.decode(body).messages
    except codec.DecodeError as exc:
        raise NoAnswer(f"unreadable answer ({exc.reason})") from None
    except (OSError, asyncio.IncompleteReadError) as exc:
        raise NoAnswer(f"no answer: {type(exc).__name__}") from None
    if len(answer) != 1 or not isinstance(answer[0], answer_type):
        raise NoAnswer("unexpected answer")
    return answer[0]
