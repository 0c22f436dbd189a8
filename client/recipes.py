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

from collections.abc import Iterator

from shoal.client.errors import NotFound
from shoal.client.metatxn import Compare, TxnDelete, TxnPut
from shoal.client.metawatch import MetaEvent
from shoal.client.session import Session
from shoal.client.sync import Client


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
        """Take the lock if nobody holds it; whether it is held here now."""
        took = self.client.meta.txn([Compare.absent(self.key)],
                                    [TxnPut(self.key, self.value, self.session.id)])  # fmt: skip
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
            watch = self.client.meta.watch(self.key, from_revision=held + 1)
            try:
                for event in watch:
                    if event.type == "delete" and event.key == self.key:
                        break
            finally:
                watch.close()
        return self.fence

    def _holder_revision(self) -> int:
        try:
            return self.client.meta.get(self.key).mod_revision
        except NotFound:
            return 0

    def guard(self) -> Compare:
        """The compare a protected write carries: the lock is still the one
        taken here (its create revision is our fence)."""
        return Compare(self.key, "create_revision", "=", self.fence)

    def held(self) -> bool:
        """Whether the lock is still ours, as the controller says now."""
        try:
            return self.client.meta.get(self.key).create_revision == self.fence > 0
        except NotFound:
            return False

    def release(self) -> None:
        """Give the lock up (only if it is still ours)."""
        if self.fence:
            self.client.meta.txn([self.guard()], [TxnDelete(self.key)])
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
        try:
            return self.client.meta.get(self.key).value.decode()
        except NotFound:
            return None

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
        listing = self.client.meta.list(self.prefix)
        return {v.key[len(self.prefix) :]: v.value.decode() for v in listing.items}

    def watch(self, from_revision: int | None = None) -> Iterator[MetaEvent]:
        """Each registration and each end (a delete) from now on."""
        return self.client.meta.watch(self.prefix, from_revision)
