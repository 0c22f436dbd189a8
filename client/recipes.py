"""Recipes on sessions in the metadata log (docs/client.md, "Recipes").

Each is a few transactions on `Client.meta` with a `Session`; none needs
anything the agent does not already offer, and each is what kazoo's
recipes and etcd's `concurrency` package give their users:

- `Lock`: a key created only if absent, owned by the holder's session. Its
  *fence* is the key's create revision: a number that only grows from one
  holder to the next. A holder that was paused past its TTL (a GC pause, a
  SIGSTOP) has lost the lock without knowing; it must make each protected
  write a transaction that compares the lock's create revision with its
  fence (`Lock.guard()`), so that the store refuses it once someone else
  holds the lock (the Jepsen etcd analysis: a lock is safe only if the
  store checks the fence; etcd's election recipe uses the same revision).
- `Election`: a `Lock` whose value is the candidate's name: the holder is
  the leader, the fence its term; `leader()` says who it is.
- `Registry`: each member's address under a prefix, owned by its session,
  gone at once when the session ends (closed, expired, or its process
  killed: within its TTL); `members()` lists them, `watch()` follows them.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import TypeVar

from shoal.client.errors import Compacted, NotFound, Unavailable, Unknown
from shoal.client.metatxn import Compare, TxnDelete, TxnPut, TxnResult
from shoal.client.metawatch import MetaEvent
from shoal.client.session import Session
from shoal.client.sync import Client
from shoal.client.types import MetaValue

T = TypeVar("T")

# How long a recipe retries a call nobody served (Unavailable, NotApplied
# among them: no controller, or one not yet confirmed, or an agent that has
# not yet applied as far as a watch asks; nothing was done, so it is safe).
RETRY_S = 15.0


def _retried(call: Callable[[], T]) -> T:
    """`call()`, tried again while it raises Unavailable, for up to RETRY_S."""
    deadline, pause = time.monotonic() + RETRY_S, 0.05
    while True:
        try:
            return call()
        except Unavailable:
            if time.monotonic() + pause > deadline:
                raise
            time.sleep(pause)
            pause = min(pause * 2, 0.5)


def _get(client: Client, key: str) -> MetaValue | None:
    """`key` read linearizably (None: absent), retried while not served."""

    def read() -> MetaValue | None:
        try:
            return client.meta.get(key)
        except NotFound:
            return None

    return _retried(read)


class Lock:
    """A lock named `key`, held through `session` (module docstring).

    Attributes:
        fence: the lock's create revision while held here (0: not held).
    """

    def __init__(self, client: Client, key: str, session: Session, value: str = "") -> None:
        self.client, self.key, self.session = client, key, session
        self.value = value or session.id
        self.fence = 0

    def try_acquire(self) -> bool:
        """Take the lock if nobody holds it; whether it is held here now.
        An unknown outcome (Unknown) is settled by reading the key back: it
        is ours if it holds our value under our session."""
        put = TxnPut(self.key, self.value, self.session.id)

        def take() -> TxnResult:
            return self.client.meta.txn([Compare.absent(self.key)], [put])

        try:
            took = _retried(take)
        except Unknown:
            held = _get(self.client, self.key)
            ours = held is not None and held.session == self.session.id
            self.fence = held.create_revision if held is not None and ours else 0
            return ours
        if took.succeeded:
            self.fence = took.revision
        return took.succeeded

    def acquire(self) -> int:
        """Wait until the lock is taken here; its fence. Waits on a watch of
        the key for its deletion, not by polling."""
        while not self.try_acquire():
            held = self._holder_revision()
            if held == 0:
                continue  # released in between: try again at once
            try:  # from just after the holder's write: its delete is not missed
                watch = _retried(lambda: self.client.meta.watch(self.key, held + 1))
            except Compacted:
                continue  # the agent keeps no history from there: try again at once
            try:
                for event in watch:
                    if event.type == "delete" and event.key == self.key:
                        break
            finally:
                watch.close()
        return self.fence

    def _holder_revision(self) -> int:
        held = _get(self.client, self.key)
        return 0 if held is None else held.mod_revision

    def guard(self) -> Compare:
        """The compare a protected write carries: the lock is still the one
        taken here (its create revision is our fence)."""
        return Compare(self.key, "create_revision", "=", self.fence)

    def held(self) -> bool:
        """Whether the lock is still ours, as the controller says now."""
        held = _get(self.client, self.key)
        return held is not None and held.create_revision == self.fence > 0

    def release(self) -> None:
        """Give the lock up (only if it is still ours)."""
        if self.fence:
            guard = self.guard()
            _retried(lambda: self.client.meta.txn([guard], [TxnDelete(self.key)]))
            self.fence = 0


class Election:
    """Campaign for leadership of `key` as `name` through `session`."""

    def __init__(self, client: Client, key: str, session: Session, name: str) -> None:
        self._lock = Lock(client, key, session, name)
        self.client, self.key = client, key

    def campaign(self) -> int:
        """Wait until this candidate leads; its term (the fence)."""
        return self._lock.acquire()

    @property
    def term(self) -> int:
        """The fence while leading here (0: not leading)."""
        return self._lock.fence

    def guard(self) -> Compare:
        """The compare a leader's write carries (see `Lock.guard`)."""
        return self._lock.guard()

    def leader(self) -> str | None:
        """Who leads now (None: nobody)."""
        held = _get(self.client, self.key)
        return None if held is None else held.value.decode()

    def resign(self) -> None:
        """Stop leading (the next candidate takes over at once)."""
        self._lock.release()


class Registry:
    """Members of a service under `prefix`, each owned by its session."""

    def __init__(self, client: Client, prefix: str) -> None:
        self.client = client
        self.prefix = prefix if prefix.endswith("/") else prefix + "/"

    def register(self, session: Session, name: str, address: str) -> int:
        """Register `name` at `address` until `session` ends; its revision."""
        return session.meta_put(self.prefix + name, address).revision

    def members(self) -> dict[str, str]:
        """Every registered member and its address, read linearizably."""
        listing = _retried(lambda: self.client.meta.list(self.prefix))
        return {v.key[len(self.prefix) :]: v.value.decode() for v in listing.items}

    def watch(self, from_revision: int | None = None) -> Iterator[MetaEvent]:
        """Each registration and each end (a delete) from now on."""
        return self.client.meta.watch(self.prefix, from_revision)
