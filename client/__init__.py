"""shoal.client: talk to a shoal agent from Python (docs/client.md).

    from shoal.client import Client
    with Client("127.0.0.1:7947") as c:
        for event in c.watch_members():
            print(event.name, event.status)

`Client` blocks (http.client); `AsyncClient` is for asyncio and is loaded
only when first named, so that `import shoal.client` stays as light as the
`shoal` command line needs it (the standard library and msgspec).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from shoal.client.errors import (
    BadRequest,
    Busy,
    Compacted,
    Conflict,
    Gone,
    IncompatibleAgent,
    NotApplied,
    NotFound,
    ShoalError,
    TooLarge,
    Unauthorized,
    Unavailable,
    Unknown,
)
from shoal.client.meta import AsyncMetaApi, MetaApi
from shoal.client.metatxn import Compare, TxnDelete, TxnGet, TxnItem, TxnPut, TxnResult
from shoal.client.metawatch import AsyncMetaWatch, MetaEvent, MetaListing, MetaWatch
from shoal.client.session import Session
from shoal.client.sync import Client, KvApi, Watch
from shoal.client.types import (
    Check,
    CheckListing,
    Controller,
    ControllerEvent,
    Event,
    EventSent,
    JoinResult,
    KeyValue,
    KvEvent,
    Member,
    MemberAnswer,
    MemberEvent,
    MetaValue,
    MetaWritten,
    QueryResult,
    SelfInfo,
    SessionInfo,
    UserEvent,
    Written,
)

if TYPE_CHECKING:
    from shoal.client.aio import AsyncClient, AsyncKvApi, AsyncWatch
    from shoal.client.aiosession import AsyncSession

__all__ = [
    "AsyncClient", "AsyncKvApi", "AsyncMetaApi", "AsyncMetaWatch", "AsyncSession", "AsyncWatch",
    "BadRequest", "Busy", "Check", "CheckListing", "Client", "Compacted", "Conflict", "Controller",
    "ControllerEvent", "Event", "EventSent", "Gone", "IncompatibleAgent", "JoinResult", "KeyValue",
    "KvApi", "KvEvent", "Member", "MemberAnswer", "MemberEvent", "MetaApi", "MetaEvent",
    "MetaListing", "MetaValue", "MetaWatch", "MetaWritten", "NotApplied", "NotFound",
    "QueryResult", "SelfInfo", "Session", "SessionInfo", "ShoalError", "TooLarge", "Unauthorized",
    "Unavailable", "Unknown", "UserEvent", "Watch", "Written",
    "Compare", "TxnDelete", "TxnGet", "TxnItem", "TxnPut", "TxnResult",
]  # fmt: skip

_ASYNC = ("AsyncClient", "AsyncKvApi", "AsyncWatch")


def __getattr__(name: str) -> Any:
    """Load the asyncio client on first use (it imports asyncio and httptools)."""
    if name in _ASYNC:
        from shoal.client import aio

        return getattr(aio, name)
    if name == "AsyncSession":
        from shoal.client import aiosession

        return aiosession.AsyncSession
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
