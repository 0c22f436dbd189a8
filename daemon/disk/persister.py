"""The persister: writes the cores' `Persist` items and releases their sends.

So the election's state is not fsynced in the loop: a grant must be durable
before it is sent, and an fsync can take hundreds of milliseconds on a busy
disk, long enough for every peer to suspect us. The state is written
unsynced, the group-commit thread syncs it, and meanwhile the sends that the
election's `Persist` items release wait (in order) while SWIM's go out at
once: which sends wait is in the core's output, not chosen here by message
type (kernel/contract.py). The incarnation, persisted once per refutation,
is still synced in place. The metadata log's entries (`PersistLog`) are
written as election state is, and the answers that confirm them wait the
same way (a follower's acknowledgement, the controller's own). A snapshot
the log takes (`TakeSnapshot`) is no write yet: it goes to the snapshot
thread (daemon/disk/snapshots.py), and its `PersistSnapshot` comes later.

The metadata log's writes (`PersistLog`) are not done at once but when the
group commit hands its group to the sync thread, at the start of the next
pass of the loop, in order (any other write does them first): the sync that
makes them durable covers them all the same, and the controller's appends,
sent in the same flush, leave before its own write rather than after it
(Raft lets the leader write its log in parallel with replicating it).

The rule, exactly: an item's write is done (a log write: staged, as said),
then its `releases` are sent at
once unless a sync is pending, in which case they are held, in order, until
that sync completes. A later election write moves the pending sync to a
later one; the held sends wait for the latest. A failed sync drops them.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable, Iterable

import structlog

from shoal.daemon.disk.commit import GroupCommit
from shoal.daemon.disk.datadir import DataDir
from shoal.election.events import PersistElection
from shoal.kernel.contract import Persist, PersistIncarnation, Send
from shoal.metalog.log import PersistLog
from shoal.metalog.snapshot import PersistSnapshot, TakeSnapshot

log = structlog.get_logger("shoal")


class Persister:
    """Writes `Persist` items to the data directory; releases their sends."""

    def __init__(self, data_dir: DataDir, commits: GroupCommit, send: Callable[[Send], None],
                 sending: Callable[[], bool], counters: Counter[str],
                 other: Callable[[object], None] | None = None,
                 take_snapshot: Callable[[TakeSnapshot], None] | None = None) -> None:  # fmt: skip
        """Args:
        data_dir: where the writes go.
        commits: the group commit whose syncs make unsynced writes durable.
        send: sends one released `Send`.
        sending: False once the agent is shutting down (held sends are then
            not sent).
        counters: the agent's counters (`election_sends_dropped`).
        other: writes any other write (the user-event ledger's).
        take_snapshot: encodes and stores a snapshot off the loop
            (`SnapshotTaker.take`), with the metadata log on.
        """
        self._take_snapshot = take_snapshot
        self._data_dir = data_dir
        self._commits = commits
        self._send = send
        self._sending = sending
        self._counters = counters
        self._other = other
        # Sends waiting for their state to be durable, and the sync they wait for.
        self._held: list[Send] = []
        self._held_for: asyncio.Future[None] | None = None
        # The log's writes not done yet, in order (`_write_logs`).
        self._logs: list[PersistLog] = []
        commits.before_hand_over = self._write_logs

    def write(self, persist: Iterable[Persist]) -> None:
        """Write each item, then send (or hold) what it releases."""
        for item in persist:
            write = item.write
            if self._logs and write is not None and not isinstance(write, PersistLog):
                self._write_logs()  # the log's first, in order
            if isinstance(write, PersistLog):  # the metadata log, as election state
                self._logs.append(write)  # written at the hand-over (module docstring)
                self._hold_for_sync()
            elif isinstance(write, PersistIncarnation):
                self._data_dir.save_incarnation(write.incarnation)  # synced in place
            elif isinstance(write, PersistElection):
                self._data_dir.save_election(write.granted_epoch, write.config, sync=False)
                self._hold_for_sync()
            elif isinstance(write, PersistSnapshot):  # and its snapshots
                self._data_dir.save_snapshot(write)
                self._hold_for_sync()
            elif isinstance(write, TakeSnapshot):
                assert self._take_snapshot is not None, "a snapshot with nobody to take it"
                self._take_snapshot(write)
            elif write is not None and self._other is not None:
                self._other(write)
            if item.releases:
                if self._held_for is not None:
                    self._held.extend(item.releases)  # after the pending sync, in order
                else:
                    for send in item.releases:
                        self._send(send)

    def _write_logs(self) -> None:
        """Do the log's writes staged so far, in order (before the group
        commit hands over the group they wait with, or before another write)."""
        logs, self._logs = self._logs, []
        for write in logs:
            self._data_dir.save_log(write)

    def _hold_for_sync(self) -> None:
        """Hold released sends until the sync of what was just written:
        released in the pass of the loop that learns the sync ended
        (`GroupCommit.after_sync`), not a pass later."""
        fut = self._commits.waiter()
        if fut is not self._held_for:
            self._held_for = fut
            self._commits.after_sync(fut, self._release)

    def _release(self, fut: asyncio.Future[None]) -> None:
        if fut is not self._held_for:
            return  # a later write waits for a later sync
        held, self._held, self._held_for = self._held, [], None
        if fut.cancelled() or fut.exception() is not None:
            self._counters["election_sends_dropped"] += len(held)
            log.error("election state could not be made durable: its messages are not sent",
                      messages=len(held))  # fmt: skip
            return
        if not self._sending():
            return  # shutting down
        for send in held:
            self._send(send)
