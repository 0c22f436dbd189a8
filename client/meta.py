"""`client.meta`: the metadata log (docs/metadata.md), for `Client` and
`AsyncClient` alike.

Every write is told one of four outcomes: committed (`MetaWritten`, with
its revision); refused by its `cas` (`Conflict`, `.current` the key's mod
revision); not applied (`NotApplied`: safe to retry); or unknown
(`Unknown`: it may have been committed; read it back or retry with `cas`).
"""

from __future__ import annotations

from collections.abc import Sequence

from shoal.client import calls
from shoal.client.metatxn import Compare, TxnOp, TxnResult, txn_call
from shoal.client.metawatch import (
    AsyncMetaClient,
    AsyncMetaWatch,
    MetaClient,
    MetaCursor,
    MetaListing,
    MetaWatch,
    list_steps,
)
from shoal.client.types import MetaValue, MetaWritten


class MetaApi:
    """`Client.meta`: writes a majority made durable, compare-and-set, and
    reads that see every acknowledged write."""

    def __init__(self, client: MetaClient) -> None:
        self._client = client

    def get(self, key: str, stale: bool = False) -> MetaValue:
        """The key, read through the controller (linearizable); with
        `stale`, from the agent's own applied state (fast, maybe behind).

        Raises:
            NotFound: no such key. NotApplied: no controller could serve
                the read now (safe to retry).
        """
        return self._client.run(calls.one(calls.meta_get(key, stale)))

    def put(self, key: str, value: bytes | str, cas: int | None = None,
            session: str | None = None) -> MetaWritten:  # fmt: skip
        """Write `value` (text as UTF-8); returns once committed.

        Args:
            cas: write only if the key's mod revision is `cas` (0: only if
                the key is absent).
            session: the id of a session (`Client.session()`): the key is
                deleted when the session ends (docs/client.md, "Sessions").

        Raises:
            Conflict: `cas` did not match (`.current`). NotApplied: not
                appended, retry. Unknown: may have been committed.
                NotFound: `session` has ended; nothing was written.
        """
        return self._client.run(calls.one(calls.meta_put(key, value, cas, session)))

    def delete(self, key: str, cas: int | None = None) -> MetaWritten:
        """Delete the key (committed as `put` is); `cas` as for `put`."""
        return self._client.run(calls.one(calls.meta_delete(key, cas)))

    # -- transactions (client/metatxn.py) ----------------------------------------

    def txn(self, compare: Sequence[Compare] = (), success: Sequence[TxnOp] = (),
            failure: Sequence[TxnOp] = ()) -> TxnResult:  # fmt: skip
        """Run `success` if every compare holds, else `failure`, atomically
        at one revision (at most 64 compares and operations together).

        Raises:
            NotApplied: not appended, retry. Unknown: may have been
                committed. BadRequest, TooLarge: the agent refused it as given.
        """
        return self._client.run(calls.one(txn_call(compare, success, failure)))

    # -- listing and watching (client/metawatch.py) ----------------------------------

    def list(self, prefix: str = "", stale: bool = False) -> MetaListing:
        """Every key under `prefix`, page after page, each page read
        linearizably (or, with `stale`, from the agent's applied state).

        Raises:
            NotApplied: no controller could serve a page now (safe to retry).
        """
        return self._client.run(list_steps(prefix, stale))

    def watch(self, prefix: str = "", from_revision: int | None = None) -> MetaWatch:
        """Every committed change to a key under `prefix` from `from_revision`
        on (None: from now), in revision order, each once, resuming by
        itself across dropped connections and the agent's restarts.

        Raises:
            Compacted: `from_revision` (or where it resumes) is no longer
                kept (`.revision`): list again, watch from its revision + 1.
        """
        return MetaWatch(self._client, MetaCursor(prefix, from_revision))


class AsyncMetaApi:
    """`AsyncClient.meta`: `MetaApi` for asyncio."""

    def __init__(self, client: AsyncMetaClient) -> None:
        self._client = client

    async def get(self, key: str, stale: bool = False) -> MetaValue:
        """See `MetaApi.get`."""
        return await self._client.run(calls.one(calls.meta_get(key, stale)))

    async def put(self, key: str, value: bytes | str, cas: int | None = None,
                  session: str | None = None) -> MetaWritten:  # fmt: skip
        """See `MetaApi.put`."""
        return await self._client.run(calls.one(calls.meta_put(key, value, cas, session)))

    async def delete(self, key: str, cas: int | None = None) -> MetaWritten:
        """See `MetaApi.delete`."""
        return await self._client.run(calls.one(calls.meta_delete(key, cas)))

    # -- transactions (client/metatxn.py) ----------------------------------------

    async def txn(self, compare: Sequence[Compare] = (), success: Sequence[TxnOp] = (),
                  failure: Sequence[TxnOp] = ()) -> TxnResult:  # fmt: skip
        """See `MetaApi.txn`."""
        return await self._client.run(calls.one(txn_call(compare, success, failure)))

    # -- listing and watching (client/metawatch.py) ----------------------------------

    async def list(self, prefix: str = "", stale: bool = False) -> MetaListing:
        """See `MetaApi.list`."""
        return await self._client.run(list_steps(prefix, stale))

    def watch(self, prefix: str = "", from_revision: int | None = None) -> AsyncMetaWatch:
        """See `MetaApi.watch`; an async iterator (`async with` opens and closes it)."""
        return AsyncMetaWatch(self._client, MetaCursor(prefix, from_revision))
