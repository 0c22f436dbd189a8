"""The persister: a Persist item's releases leave at once unless a sync is
pending, in which case they wait, in order, until that sync completes."""

from __future__ import annotations

import asyncio
from collections import Counter

from shoal.daemon.disk.persister import Persister
from shoal.election.events import PersistElection
from shoal.kernel.contract import Persist, PersistIncarnation, Send
from shoal.metalog.log import PersistLog
from shoal.metalog.messages import Entry
from shoal.metalog.state import NoOp


class FakeDataDir:
    def __init__(self) -> None:
        self.writes: list[tuple[str, object, bool]] = []

    def save_incarnation(self, incarnation: int) -> None:
        self.writes.append(("incarnation", incarnation, True))

    def save_election(self, granted_epoch: int, config: object, sync: bool = True) -> None:
        self.writes.append(("election", granted_epoch, sync))

    def save_log(self, write: PersistLog) -> None:
        self.writes.append(("log", write.from_index, False))


class FakeCommits:
    """One future per group: a new one once the pending one is done."""

    def __init__(self) -> None:
        self.pending: asyncio.Future[None] | None = None
        self.before_hand_over = None

    def waiter(self) -> asyncio.Future[None]:
        if self.pending is None or self.pending.done():
            self.pending = asyncio.get_running_loop().create_future()
        return self.pending

    def after_sync(self, fut, call) -> None:
        fut.add_done_callback(call)

    def hand_over(self) -> None:
        """The group goes to the sync thread: deferred writes go in first."""
        self.before_hand_over()


def send(n: int) -> Send:
    return Send(("10.0.0.1", 7946), (n,))


def make(sending: bool = True):
    sent: list[Send] = []
    disk, commits, counters = FakeDataDir(), FakeCommits(), Counter()
    persister = Persister(disk, commits, sent.append, lambda: sending, counters)  # type: ignore[arg-type]
    return persister, disk, commits, counters, sent


def test_releases_leave_at_once_without_a_pending_sync():
    """An incarnation is synced in place: what it releases goes out at once."""

    async def run():
        persister, disk, _, _, sent = make()
        persister.write([Persist(PersistIncarnation(4), (send(1), send(2))),
                         Persist(None, (send(3),))])  # fmt: skip
        assert disk.writes == [("incarnation", 4, True)]
        assert sent == [send(1), send(2), send(3)]

    asyncio.run(run())


def test_election_releases_wait_for_the_sync_in_order():
    """An election write is unsynced: its releases, and any after it, wait for the sync."""

    async def run():
        persister, disk, commits, _, sent = make()
        persister.write([Persist(PersistElection(7, None), (send(1),)),
                         Persist(None, (send(2),)),
                         Persist(PersistIncarnation(1), (send(3),))])  # fmt: skip
        assert disk.writes == [("election", 7, False), ("incarnation", 1, True)]
        assert sent == []
        commits.pending.set_result(None)
        await asyncio.sleep(0)
        assert sent == [send(1), send(2), send(3)]
        persister.write([Persist(None, (send(4),))])  # nothing pending any more
        assert sent[-1] == send(4)

    asyncio.run(run())


def test_a_later_write_moves_the_wait_to_the_later_sync():
    """Held sends wait for the latest election write's sync, not an earlier one."""

    async def run():
        persister, _, commits, _, sent = make()
        persister.write([Persist(PersistElection(1, None), (send(1),))])
        first = commits.pending
        first.set_result(None)  # done before the callback ran: a new group starts
        persister.write([Persist(PersistElection(2, None), (send(2),))])
        await asyncio.sleep(0)
        assert sent == []
        commits.pending.set_result(None)
        await asyncio.sleep(0)
        assert sent == [send(1), send(2)]

    asyncio.run(run())


def test_a_failed_sync_drops_and_counts_the_held_sends():
    """A promise that could not be made durable is not sent."""

    async def run():
        persister, _, commits, counters, sent = make()
        persister.write([Persist(PersistElection(3, None), (send(1), send(2)))])
        commits.pending.set_exception(OSError("disk gone"))
        await asyncio.sleep(0)
        assert sent == [] and counters["election_sends_dropped"] == 2

    asyncio.run(run())


def test_nothing_held_is_sent_once_the_agent_closes():
    """After the sockets close, a completed sync sends nothing."""

    async def run():
        persister, _, commits, _, sent = make(sending=False)
        persister.write([Persist(PersistElection(3, None), (send(1),))])
        commits.pending.set_result(None)
        await asyncio.sleep(0)
        assert sent == []

    asyncio.run(run())


def test_a_log_acknowledgement_waits_for_the_sync_of_its_entries():
    """The metadata log's entries are written unsynced; the acknowledgement
    they release (and a barrier after them) leaves only once the sync is done."""

    async def run():
        persister, disk, commits, _, sent = make()
        persister.write([Persist(PersistLog(1, (Entry(1, 1, NoOp()),)), (send(1),)),
                         Persist(None, (send(2),))])  # fmt: skip
        assert disk.writes == [] and sent == []  # written when the group is handed over
        commits.hand_over()
        assert disk.writes == [("log", 1, False)] and sent == []
        commits.pending.set_result(None)
        await asyncio.sleep(0)
        assert sent == [send(1), send(2)]

    asyncio.run(run())


def test_log_writes_stay_in_order_with_other_writes():
    """A write other than the log's does the log's staged ones first."""

    async def run():
        persister, disk, commits, _, sent = make()
        persister.write([Persist(PersistLog(1, (Entry(1, 1, NoOp()),)), ()),
                         Persist(PersistElection(2, None), (send(1),)),
                         Persist(PersistLog(2, (Entry(1, 2, NoOp()),)), ())])  # fmt: skip
        assert disk.writes == [("log", 1, False), ("election", 2, False)]
        commits.hand_over()
        assert disk.writes[-1] == ("log", 2, False) and sent == []

    asyncio.run(run())
