#!/usr/bin/env python3
"""How long taking a metadata-log snapshot stalls the agent's event loop (issue 37).

One process, real parts: a follower's `MetaLog` core holding --keys keys
of --value-bytes (started from a snapshot of them, as an agent resumes,
then --snapshot-every - 1 puts appended and committed: none of it
timed), a real data
directory (RocksDB), the agent's `Persister` and group commit, on an
asyncio loop where a ticker asks to run every millisecond and records how
late each run is (the loop's stall: what SWIM probes, elections and the
API would wait). Then one more entry is appended and committed, which
makes the snapshot due, and the run ends once the snapshot is durable.
Three ways, each in its own run:

  old      what the code did before: in the core, on the loop, one msgpack
           call over the sorted keys, CPython's own sha256; then the
           persister wrote it as one CBOR value in RocksDB (these steps
           copied from the earlier code, called in a row on the loop).
  inline   today's steps (pieces, OpenSSL's sha256, 1 MiB pieces in
           RocksDB), all on the loop: what the pieces alone save.
  thread   as the agent does it: the core hands a view to the snapshot
           thread (daemon/disk/snapshots.py) and is told when it is stored.

For each: the longest stall (ms), the 99th percentile of the ticker's
lateness, the time until the snapshot is durable, the longest stall of
an idle loop just before (the machine's own noise: other processes), and
the longest garbage collection in the run (any thread's holds the GIL).

    .venv/bin/python bench/meta_snapshot.py [--keys 10000 100000] [--value-bytes 1024]
        [--modes old inline thread] [--snapshot-every 10000] [--repeat 3]

Figures (2026-11-28, 2-core VM shared with other jobs, load 9; medians of 3):

        keys    mode  max stall ms  p99 late ms  durable s  idle max ms  gc max ms
       10000     old         171.4        171.4       0.32         12.5        2.0
       10000  inline         208.1        208.1       0.22          7.5        0.0
       10000  thread          39.9         15.0       0.16         11.8        0.0
      100000     old        1611.7        975.2       2.64         13.0      147.9
      100000  inline        1934.2       1816.0       1.97          4.3        0.0
      100000  thread          90.8         51.6       1.57          4.2        0.0

What is left of the stall with the thread: the view's copy of the key
table (3 ms at 100,000 keys), freeing the previous snapshot's bytes on the
loop (15-20 ms for 100 MB), and the GIL: the thread's C calls (a piece of
128 rows encoded, 256 KiB written) each hold it for a few milliseconds,
longer when the VM's other processes take the core it runs on. Done
"inline", the pieces cost more than the one call did (a merge of sorted
runs in Python, many small writes): they are worth it only on the thread.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import random
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT.parent))

import cbor2  # noqa: E402
import msgspec  # noqa: E402

from shoal.daemon.disk.commit import GroupCommit  # noqa: E402
from shoal.daemon.disk.datadir import DataDir  # noqa: E402
from shoal.daemon.disk.persister import Persister  # noqa: E402
from shoal.daemon.disk.snapshots import SnapshotTaker  # noqa: E402
from shoal.kernel.hashes import sha256 as builtin_sha256  # noqa: E402
from shoal.metalog.core import MetaConfig, MetaLog  # noqa: E402
from shoal.metalog.messages import Append, Entry  # noqa: E402
from shoal.metalog.snapshot import (  # noqa: E402
    PersistSnapshot,
    Snapshot,
    TakeSnapshot,
    encode_view,
    take,
)
from shoal.metalog.state import MetaPut, MetaState  # noqa: E402

LEADER = ("10.0.0.1", 7946)


def follower(keys: int, value_bytes: int, every: int) -> MetaLog:
    """A follower restarted from a snapshot of `keys` keys at index `keys`
    (as an agent resumes), `snapshot_every` = `every`."""
    state = MetaState()
    for e in entries(1, keys, value_bytes, keys):
        state.apply(e.index, e.op, e.origin, e.pid)
    config = MetaConfig(snapshot_every=every, keep_entries=1_000)
    return MetaLog("bench", ("10.0.0.2", 7946), config, random.Random(1), (),
                   leading_epoch=lambda: None, highest_epoch=lambda: 1,
                   saw_epoch=lambda e: None, voters=lambda: (("a", "bench", "c"),),
                   controller=lambda: None, addr_of=lambda n: None,
                   snapshot=take(state, 1))  # fmt: skip


def entries(first: int, n: int, value_bytes: int, keys: int) -> tuple[Entry, ...]:
    """`n` puts of `value_bytes` from index `first`, over `keys` keys."""
    rng = random.Random(first)
    return tuple(Entry(1, i, MetaPut(b"key/%08d" % (i * 7919 % keys),
                                     rng.randbytes(value_bytes)), "a", i)
                 for i in range(first, first + n))  # fmt: skip


def old_take(view: TakeSnapshot) -> Snapshot:
    """The earlier `encode_state` and `digest`: one msgpack call, CPython's sha256."""
    keys = [[k, s.value, s.create_revision, s.mod_revision, s.version]
            for k, s in sorted(view.keys.items())]  # fmt: skip
    seen = [[origin, list(pids)] for origin, pids in view.seen]
    data = msgspec.msgpack.encode([1, keys, seen])
    return Snapshot(view.index, view.epoch, data, builtin_sha256(data).digest())


def old_save(data: DataDir, write: PersistSnapshot) -> None:
    """The earlier `save_snapshot`: the whole snapshot as one CBOR value."""
    s = write.snapshot
    end = b"meta/log/" + (write.drop_through + 1).to_bytes(8, "big")
    data.engine.local_batch([(b"meta/snapshot", cbor2.dumps([s.index, s.epoch, s.data, s.digest]))],
                            [], ((b"meta/log/", end),))  # fmt: skip


class GcPauses:
    """The longest garbage collection while on (any thread: each holds the GIL)."""

    def __init__(self) -> None:
        self.on, self.longest, self._at = False, 0.0, 0.0
        gc.callbacks.append(self._callback)

    def _callback(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._at = time.perf_counter()
        elif self.on:
            self.longest = max(self.longest, time.perf_counter() - self._at)


GC = GcPauses()


async def ticker(lateness: list[float], stop: asyncio.Event) -> None:
    loop = asyncio.get_running_loop()
    while not stop.is_set():
        due = loop.time() + 0.001
        await asyncio.sleep(0.001)
        lateness.append(loop.time() - due)


async def one_run(mode: str, keys: int, value_bytes: int, every: int,
                  root: Path) -> tuple[float, float, float, float, float]:  # fmt: skip
    """The longest stall, the p99 lateness (ms), the time until durable
    (s), the longest stall in the 0.3 s before (ms: the machine's own
    noise), the longest garbage collection meanwhile (ms)."""
    loop = asyncio.get_running_loop()
    data = DataDir(root, 4, "bench")
    commits = GroupCommit(loop, data.engine.sync)
    meta = follower(keys, value_bytes, every)
    durable: asyncio.Future[None] = loop.create_future()

    def flush() -> None:
        while out := meta.drain():
            persister.write(out.persist)
            if any(type(i.write) is PersistSnapshot for i in out.persist):
                commits.waiter().add_done_callback(
                    lambda _: durable.done() or durable.set_result(None)
                )

    def taken(snapshot: Snapshot | None) -> None:
        meta.snapshot_taken(snapshot, loop.time())
        flush()

    def take_inline(view: TakeSnapshot) -> None:
        snapshot = old_take(view) if mode == "old" else encode_view(view)
        if mode != "old":
            data.stage_snapshot(snapshot)
        loop.call_soon(taken, snapshot)

    taker = SnapshotTaker(loop, data.stage_snapshot, taken)
    take = taker.take if mode == "thread" else take_inline
    persister = Persister(data, commits, lambda s: None, lambda: True, Counter(),
                          take_snapshot=take)  # fmt: skip
    if mode == "old":
        data.save_snapshot = lambda write: old_save(data, write)  # type: ignore[method-assign]
    # `every` - 1 entries after the snapshot, committed: the next one makes one due.
    meta.receive(Append(1, "a", keys, 1, entries(keys + 1, every - 1, value_bytes, keys),
                        keys + every - 1), LEADER, 0.0)  # fmt: skip
    flush()
    await commits.wait()
    gc.collect()
    lateness: list[float] = []
    stop = asyncio.Event()
    tick = asyncio.create_task(ticker(lateness, stop))
    await asyncio.sleep(0.3)  # the ticker's baseline
    baseline = 1000 * max(lateness)
    lateness.clear()
    GC.on, GC.longest = True, 0.0
    started = time.monotonic()
    last = keys + every
    meta.receive(Append(1, "a", last - 1, 1, entries(last, 1, value_bytes, keys), last), LEADER,
                 loop.time())  # fmt: skip
    flush()
    await asyncio.wait_for(durable, 600)
    took = time.monotonic() - started
    GC.on = False
    await asyncio.sleep(0.1)
    stop.set()
    await tick
    taker.stop()
    await commits.close()
    data.close()
    lateness.sort()
    return (1000 * lateness[-1], 1000 * lateness[int(len(lateness) * 0.99)], took, baseline,
            1000 * GC.longest)  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--keys", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--value-bytes", type=int, default=1024)
    parser.add_argument(
        "--snapshot-every",
        type=int,
        default=10_000,
        help="[meta] snapshot_every: the entries the log holds, compacted at once",
    )
    parser.add_argument("--repeat", type=int, default=3, help="runs per row; the median is shown")
    parser.add_argument("--modes", nargs="+", default=["old", "inline", "thread"],
                        choices=["old", "inline", "thread"])  # fmt: skip
    args = parser.parse_args()
    print(f"cpus {os.cpu_count()}, load {os.getloadavg()[0]:.1f}; values of {args.value_bytes} B")
    print(
        f"medians of {args.repeat} runs (a first run of 1,000 keys, not shown, warms up);"
        f" snapshot_every {args.snapshot_every}"
    )
    print(f"{'keys':>8} {'mode':>7} {'max stall ms':>13} {'p99 late ms':>12} {'durable s':>10}"
          f" {'idle max ms':>12} {'gc max ms':>10}")  # fmt: skip
    run(args.modes[0], 1000, args.value_bytes, 100)
    for keys in args.keys:
        for mode in args.modes:
            rows = [run(mode, keys, args.value_bytes, args.snapshot_every)
                    for _ in range(args.repeat)]  # fmt: skip
            worst, p99, took, idle, gcs = (sorted(r[i] for r in rows)[len(rows) // 2]
                                           for i in range(5))  # fmt: skip
            print(f"{keys:>8} {mode:>7} {worst:>13.1f} {p99:>12.1f} {took:>10.2f} {idle:>12.1f}"
                  f" {gcs:>10.1f}", flush=True)  # fmt: skip


def run(mode: str, keys: int, value_bytes: int,
        every: int) -> tuple[float, float, float, float, float]:  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="shoal-snapbench-", dir="/var/tmp") as tmp:
        return asyncio.run(one_run(mode, keys, value_bytes, every, Path(tmp)))


if __name__ == "__main__":
    main()
