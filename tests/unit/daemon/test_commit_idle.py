"""The group commit (daemon/disk/commit.py) with no sync running: a lone
write's sync starts at once, not at the end of the loop's pass."""

from __future__ import annotations

import asyncio
import threading

from shoal.daemon.disk.commit import GroupCommit


def test_a_lone_writes_sync_starts_while_the_loop_is_still_in_its_pass():
    started = threading.Event()
    synced: list[int] = []

    def sync() -> None:
        synced.append(len(synced))
        started.set()

    async def main() -> bool:
        commits = GroupCommit(asyncio.get_running_loop(), sync)
        first = commits.waiter()
        began = started.wait(10)  # blocking the loop: no next pass meanwhile
        second = commits.waiter()  # a sync runs: this one joins the next
        assert second is not first
        await asyncio.gather(first, second)
        await commits.close()
        return began

    assert asyncio.run(main())
    assert len(synced) == 2
