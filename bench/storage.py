#!/usr/bin/env python3
"""The replicated store against sqlite3, in the same run on the same disk.

Sections (all on by default; pick with --only):

  engine   single puts, synced and unsynced; batches of 100 (one sync per
           batch); gets. shoal's RocksDB engine vs sqlite3 in WAL mode
           (synchronous=FULL for synced, OFF for unsynced), one writer.
  commit   32 concurrent writers in one process on the engine with group
           commit (each write waits until durable), against 32 threads each
           committing to sqlite3 (WAL, synchronous=FULL): the storage layers
           alone, like for like.
  api      32 concurrent writers, each a keep-alive HTTP connection doing
           PUT after PUT to a real agent (its own process, loopback), each
           PUT acknowledged only once durable (group commit); and one
           writer's PUT latency. The load comes from `wrk` (C; `apt-get
           install wrk`) when installed, else from a Python client, which
           then shares the machine's second core. Against 32 threads each
           committing to sqlite3 (WAL, synchronous=FULL), and one sqlite
           writer's commit latency.
  sync     anti-entropy between two replicas of 10^4, 10^5 and 10^6 keys
           (16-byte keys, 100-byte values) differing in 0.1 % of the keys:
           bytes on the wire (every message through the real codec) and
           seconds, next to the size of a full copy.

    .venv/bin/python bench/storage.py [--only engine api sync] [--seconds 5]
        [--sizes 10000 100000 1000000] [--fsync-delay-us 1000]
        [--against /path/to/other/tree --rounds 3]

The api rows give the agent's CPU per write (user + system of all its
threads, from /proc: what the figure is when the machine is shared), the
disk's flush cost measured just before the run (one fdatasync of a small
append, median) and the load average. --against runs another tree's agent
(its own .venv) in turn with this one, in the same run.

--fsync-delay-us N runs everything under bench/slowsync.c, an LD_PRELOAD
shim that adds N µs to every fsync and fdatasync of shoal and of sqlite:
this VM flushes in ~130 µs, a consumer NVMe drive in 1-5 ms, a hard disk in
5-10 ms, and group commit is built for the disks where the flush dominates.

The machine's figures go in the issue notes; on this 2-core VM the load
generator and the agent each have one core.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import re
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from shoal.kernel import codec  # noqa: E402
from shoal.storage.antientropy import AntiEntropy  # noqa: E402
from shoal.storage.config import SyncConfig  # noqa: E402
from shoal.storage.engine import Engine  # noqa: E402
from shoal.storage.messages import RecordPush  # noqa: E402
from shoal.storage.store import MemoryStore, Replica  # noqa: E402

WALL = 1_800_000_000_000
DELAY_ENV = "SHOAL_FSYNC_DELAY_US"  # read by bench/slowsync.c
VALUE = b"v" * 100


def rate(n: int, seconds: float) -> str:
    return f"{n / seconds:>10,.0f}/s"


# -- engine ----------------------------------------------------------------------


def sqlite_db(path: Path, synchronous: str) -> sqlite3.Connection:
    db = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=30)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute(f"PRAGMA synchronous={synchronous}")
    db.execute("CREATE TABLE IF NOT EXISTS kv (k BLOB PRIMARY KEY, v BLOB)")
    return db


def bench_engine(root: Path, n: int) -> None:
    print(f"\n== engine: {n:,} single puts / 100-record batches / gets, 100-byte values, "
          "one writer")  # fmt: skip
    engine = Engine(root / "rocks", 4)
    rep = Replica(engine.records, b"\x01" * 16, 60_000, 86_400_000)
    rows = []

    def timed(label: str, fn, count: int) -> float:
        t0 = time.perf_counter()
        fn()
        dt = time.perf_counter() - t0
        rows.append((label, count, dt))
        return dt

    def rocks_single(sync: bool, tag: str) -> None:
        for i in range(n):
            rep.write(b"%s/%08d" % (tag.encode(), i), VALUE, WALL)
            if sync:
                engine.sync()

    def rocks_batched() -> None:
        for b in range(0, n, 100):
            rep.merge([rec for rec in (_rec(b"b/%08d" % i) for i in range(b, b + 100))], WALL)
            engine.sync()

    def rocks_gets() -> None:
        for i in range(n):
            rep.get(b"s/%08d" % i)

    timed("shoal put, synced", lambda: rocks_single(True, "s"), n)
    timed("shoal put, unsynced", lambda: rocks_single(False, "u"), n)
    timed("shoal put, batch of 100, synced", rocks_batched, n)
    timed("shoal get", rocks_gets, n)
    engine.close()

    full = sqlite_db(root / "full.db", "FULL")
    off = sqlite_db(root / "off.db", "OFF")

    def sql_single(db: sqlite3.Connection) -> None:
        for i in range(n):
            db.execute("INSERT OR REPLACE INTO kv VALUES (?, ?)", (b"s/%08d" % i, VALUE))

    def sql_batched() -> None:
        for b in range(0, n, 100):
            full.execute("BEGIN")
            full.executemany("INSERT OR REPLACE INTO kv VALUES (?, ?)",
                             [(b"b/%08d" % i, VALUE) for i in range(b, b + 100)])  # fmt: skip
            full.execute("COMMIT")

    def sql_gets() -> None:
        for i in range(n):
            full.execute("SELECT v FROM kv WHERE k = ?", (b"s/%08d" % i,)).fetchone()

    timed("sqlite put, synchronous=FULL", lambda: sql_single(full), n)
    timed("sqlite put, synchronous=OFF", lambda: sql_single(off), n)
    timed("sqlite put, batch of 100, FULL", sql_batched, n)
    timed("sqlite get", sql_gets, n)
    for label, count, dt in rows:
        print(f"  {label:<36} {rate(count, dt)}   {dt / count * 1e6:8.1f} us/op")
    pairs = [(0, 4), (1, 5), (2, 6), (3, 7)]
    for a, b in pairs:
        ratio = (rows[a][1] / rows[a][2]) / (rows[b][1] / rows[b][2])
        print(f"  ratio {rows[a][0]!r} / {rows[b][0]!r}: {ratio:.2f}x")


def _rec(key: bytes):
    from shoal.storage.records import Record

    return Record(key, VALUE, WALL << 16, b"\x02" * 16)


# -- commit --------------------------------------------------------------------------


def bench_commit(root: Path, seconds: float) -> None:
    from shoal.daemon.disk.commit import GroupCommit

    print(f"\n== commit: 32 concurrent writers, each write acknowledged once durable, "
          f"{seconds:.0f} s, no HTTP")  # fmt: skip
    engine = Engine(root / "commit", 4)
    rep = Replica(engine.records, b"\x01" * 16, 60_000, 86_400_000)
    lat: list[float] = []

    async def writer(commits: GroupCommit, w: int, until: float) -> int:
        n = 0
        while time.perf_counter() < until:
            t0 = time.perf_counter()
            rep.write(b"c/%d/%d" % (w, n), VALUE, WALL)
            await commits.wait()
            lat.append(time.perf_counter() - t0)
            n += 1
        return n

    async def main() -> tuple[int, int]:
        commits = GroupCommit(
            asyncio.get_running_loop(), engine.flush_log, engine.records.write_staged
        )  # the agent's wiring
        until = time.perf_counter() + seconds
        counts = await asyncio.gather(*(writer(commits, w, until) for w in range(32)))
        await commits.close()
        return sum(counts), commits.syncs

    import uvloop

    n, syncs = uvloop.run(main())
    engine.close()
    s32, slat = sqlite_load(root / "commit32.db", 32, seconds)
    print(f"  shoal engine + group commit   {rate(n, seconds)}  p50 {pct(lat, 0.5):.3f} ms, "
          f"{n / max(syncs, 1):.1f} writes per fsync")  # fmt: skip
    print(f"  sqlite WAL FULL, 32 threads   {rate(s32, seconds)}  p50 {pct(slat, 0.5):.3f} ms")
    print(f"  throughput ratio shoal / sqlite: {n / s32:.2f}x")


# -- api ---------------------------------------------------------------------------


WRK_SCRIPT = """
counter = 0
body = string.rep("v", 100)
request = function()
  counter = counter + 1
  return wrk.format("PUT", "/v1/kv/load/" .. counter, nil, body)
end
"""


def wrk_load(host: str, port: int, writers: int, seconds: float,
             root: Path) -> tuple[int, float, float]:  # fmt: skip
    """(requests, p50 ms, p99 ms) from wrk with `writers` connections."""
    script = root / "put.lua"
    script.write_text(WRK_SCRIPT)
    out = subprocess.run(["wrk", "-t1", f"-c{writers}", f"-d{seconds:.0f}s", "-s", str(script),
                          "--latency", f"http://{host}:{port}/"],
                         capture_output=True, text=True, check=True).stdout  # fmt: skip
    total = int(re.search(r"(\d+) requests in", out).group(1))
    assert "Non-2xx" not in out, out

    def ms(label: str) -> float:
        value, unit = re.search(rf"{label}\s+([\d.]+)(us|ms|s)", out).groups()
        return float(value) * {"us": 0.001, "ms": 1.0, "s": 1000.0}[unit]

    return total, ms("50%"), ms("99%")


async def http_writer(host: str, port: int, until: float, w: int, lat: list[float]) -> int:
    reader, writer = await asyncio.open_connection(host, port)
    count = 0
    pattern = re.compile(rb"content-length: (\d+)", re.I)
    while time.perf_counter() < until:
        req = (b"PUT /v1/kv/load/%d/%d HTTP/1.1\r\nhost: x\r\ncontent-length: %d\r\n\r\n"
               % (w, count, len(VALUE)) + VALUE)  # fmt: skip
        t0 = time.perf_counter()
        writer.write(req)
        head = await reader.readuntil(b"\r\n\r\n")
        match = pattern.search(head)
        assert match and head.startswith(b"HTTP/1.1 200"), head
        await reader.readexactly(int(match.group(1)))
        lat.append(time.perf_counter() - t0)
        count += 1
    writer.close()
    return count


def api_load(host: str, port: int, writers: int, seconds: float) -> tuple[int, list[float]]:
    import uvloop

    lat: list[float] = []

    async def main() -> int:
        until = time.perf_counter() + seconds
        counts = await asyncio.gather(*(http_writer(host, port, until, w, lat)
                                        for w in range(writers)))  # fmt: skip
        return sum(counts)

    return uvloop.run(main()), lat


def sqlite_load(path: Path, writers: int, seconds: float) -> tuple[int, list[float]]:
    lat: list[float] = []
    counts = [0] * writers
    until = time.perf_counter() + seconds

    def run(w: int) -> None:
        db = sqlite_db(path, "FULL")
        while time.perf_counter() < until:
            t0 = time.perf_counter()
            key = b"%d/%d" % (w, counts[w])
            db.execute("INSERT OR REPLACE INTO kv VALUES (?, ?)", (key, VALUE))
            lat.append(time.perf_counter() - t0)
            counts[w] += 1
        db.close()

    sqlite_db(path, "FULL").close()
    threads = [threading.Thread(target=run, args=(w,)) for w in range(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sum(counts), lat


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))] * 1000


def flush_cost_us(root: Path, n: int = 200) -> float:
    """What one 100-byte append and fdatasync costs on this disk now (median)."""
    path = root / "flush-probe"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    lat = []
    try:
        for _ in range(n):
            t0 = time.perf_counter()
            os.write(fd, VALUE)
            os.fdatasync(fd)
            lat.append(time.perf_counter() - t0)
    finally:
        os.close(fd)
        path.unlink()
    return sorted(lat)[n // 2] * 1e6


def _cpu_ticks(pid: int) -> int:
    """User + system clock ticks of every thread of process `pid` so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def agent_load(tree: Path, root: Path, writers: int,
               seconds: float) -> tuple[int, float, float, float]:  # fmt: skip
    """Start an agent of `tree` (its .venv's Python), load it with `writers`
    keep-alive PUT connections for `seconds`; (writes, p50 ms, p99 ms,
    agent CPU us per write: user + system, all its threads, from /proc)."""
    host, port = "127.0.0.71", 17947
    data = root / f"agent-{tree.name}-{writers}"
    shutil.rmtree(data, ignore_errors=True)
    python = tree / ".venv" / "bin" / "python"
    proc = subprocess.Popen(
        [str(python if python.exists() else sys.executable), "-m", "shoal.daemon.cli", "agent",
         "--node-name", "bench", "--bind", f"{host}:17946", "--api", f"{host}:{port}",
         "--data-dir", str(data), "--no-discovery", "--log-level", "error"],
        cwd=tree, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        _wait_api(host, port)
        api_load(host, port, 4, 1.0)  # warm up
        ticks = _cpu_ticks(proc.pid)
        if shutil.which("wrk") is not None:
            n, p50, p99 = wrk_load(host, port, writers, seconds, root)
        else:
            n, lat = api_load(host, port, writers, seconds)
            p50, p99 = pct(lat, 0.5), pct(lat, 0.99)
        cpu = (_cpu_ticks(proc.pid) - ticks) / os.sysconf("SC_CLK_TCK")
    finally:
        proc.terminate()
        proc.wait(30)
    return n, p50, p99, cpu / max(n, 1) * 1e6


def bench_api(root: Path, seconds: float, against: Path | None, rounds: int) -> None:
    here = Path(__file__).resolve().parents[1]
    trees = [here] + ([against] if against else [])
    print(f"\n== api: PUT through the HTTP API of one agent, {seconds:.0f} s per run, "
          "100-byte values, acknowledged once durable")  # fmt: skip
    use_wrk = shutil.which("wrk") is not None
    print(f"  load generator: {'wrk' if use_wrk else 'Python asyncio client (wrk not installed)'}"
          f"; trees: {', '.join(str(t) for t in trees)}; {rounds} round(s), in turn")  # fmt: skip
    print(f"  {'':<44} {'throughput':>12} {'p50 ms':>8} {'p99 ms':>8} {'us CPU':>7} "
          f"{'flush us':>8} {'load':>5}")  # fmt: skip
    results: dict[str, list[float]] = {}
    for r in range(rounds):
        for writers in (32, 1):
            for tree in trees:
                flush = flush_cost_us(root, 50)
                n, p50, p99, cpu = agent_load(tree, root, writers, seconds)
                label = f"shoal API {tree.name}, {writers} writer(s)"
                print(f"  {label:<44} {rate(n, seconds)} {p50:8.3f} {p99:8.3f} {cpu:7.1f} "
                      f"{flush:8.0f} {os.getloadavg()[0]:5.2f}", flush=True)  # fmt: skip
                results.setdefault(label, []).append(n)
                results.setdefault(label + " p50", []).append(p50)
            flush = flush_cost_us(root, 50)
            n, lat = sqlite_load(root / f"load{writers}-{r}.db", writers, seconds)
            label = f"sqlite WAL FULL, {writers} thread(s)"
            print(f"  {label:<44} {rate(n, seconds)} {pct(lat, 0.5):8.3f} {pct(lat, 0.99):8.3f} "
                  f"{'':>7} {flush:8.0f} {os.getloadavg()[0]:5.2f}", flush=True)  # fmt: skip
            results.setdefault(label, []).append(n)
            results.setdefault(label + " p50", []).append(pct(lat, 0.5))
    for tree in trees:
        shoal32 = results[f"shoal API {tree.name}, 32 writer(s)"]
        sql32 = results["sqlite WAL FULL, 32 thread(s)"]
        ratios = sorted(a / b for a, b in zip(shoal32, sql32, strict=True))
        p50s = sorted(a / b for a, b in zip(results[f"shoal API {tree.name}, 1 writer(s) p50"],
                                            results["sqlite WAL FULL, 1 thread(s) p50"],
                                            strict=True))  # fmt: skip
        print(f"  {tree.name}: 32-writer throughput / sqlite's, median of rounds: "
              f"{ratios[len(ratios) // 2]:.2f}x (target >= 3x); 1-writer p50 latency / "
              f"sqlite's: {p50s[len(p50s) // 2]:.2f}x")  # fmt: skip


def _wait_api(host: str, port: int) -> None:
    import urllib.request

    deadline = time.monotonic() + 30
    while True:
        try:
            urllib.request.urlopen(f"http://{host}:{port}/v1/self", timeout=1).read()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


# -- sync ----------------------------------------------------------------------------


def bench_sync(sizes: list[int]) -> None:
    print("\n== anti-entropy: two replicas differing in 0.1 % of keys (half newer on each side), "
          "16-byte keys, 100-byte values, tree depth 4, codec-encoded bytes")  # fmt: skip
    print(f"  {'keys':>10} {'differ':>7} {'bytes sent':>12} {'full copy':>12} {'share':>7} "
          f"{'seconds':>8} {'sessions':>8}")  # fmt: skip
    for n in sizes:
        cfg = SyncConfig()
        tag = codec.cluster_tag("bench")
        cores = {}
        for name, i in (("a", 1), ("b", 2)):
            rep = Replica(MemoryStore(cfg.tree_depth), bytes([i]) * 16, cfg.max_skew_ms, 10**9)
            cores[(name, 1)] = AntiEntropy(rep, cfg, random.Random(i), lambda r, k: [], WALL)
        a, b = cores[("a", 1)], cores[("b", 1)]
        rng = random.Random(n)
        for k in range(n):
            rec = a.replica.write(b"key/%012d" % k, rng.randbytes(100), WALL)
            b.replica.merge([rec], WALL)
        changed = rng.sample(range(n), n // 1000)
        for j, k in enumerate(changed):
            side = a if j % 2 else b
            side.replica.write(b"key/%012d" % k, rng.randbytes(100), WALL + 1)
        full = sum(len(codec.encode_frame([RecordPush(tuple(chunk))], tag))
                   for chunk in _chunks(list(a.replica.store.all()), 10_000))  # fmt: skip
        sent, sessions = 0, 0
        t0 = time.perf_counter()
        while a.replica.tree.node(0, 0) != b.replica.tree.node(0, 0):
            sessions += 1
            sent += _session(cores, tag)
        dt = time.perf_counter() - t0
        print(f"  {n:>10,} {len(changed):>7,} {sent:>12,} {full:>12,} {sent / full:>7.2%} "
              f"{dt:>8.3f} {sessions:>8}")  # fmt: skip


def _chunks(items: list, size: int):
    for i in range(0, len(items), size):
        yield items[i : i + size]


def _session(cores: dict, tag: bytes) -> int:
    a = cores[("a", 1)]
    a.sync_with(("b", 1), 0.0)
    queue = [(("a", 1), s) for s in a.drain().send]
    sent = 0
    while queue:
        sender, send = queue.pop(0)
        frame = codec.encode_frame(send.messages, tag)
        sent += len(frame)
        dst = cores[send.to]
        for msg in codec.decode_datagram(frame[4:], tag):
            dst.receive(msg, sender, 0.0)
        queue += [(send.to, s) for s in dst.drain().send]
    return sent


def _reexec_with_slow_sync(delay_us: int) -> None:
    """Run this benchmark again under the slowsync shim: the agent it starts
    and sqlite in this process inherit LD_PRELOAD, so both flush slower."""
    out = Path(tempfile.mkdtemp(prefix="shoal-slowsync-")) / "slowsync.so"
    source = Path(__file__).with_name("slowsync.c")
    subprocess.run(["cc", "-shared", "-fPIC", "-O2", "-o", str(out), str(source), "-ldl"],
                   check=True)  # fmt: skip
    preload = " ".join(filter(None, [str(out), os.environ.get("LD_PRELOAD")]))
    env = {**os.environ, DELAY_ENV: str(delay_us), "LD_PRELOAD": preload}
    os.execve(sys.executable, [sys.executable, *sys.argv], env)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--only", nargs="+", default=["engine", "commit", "api", "sync"])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--ops", type=int, default=20_000, help="operations per engine run")
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    parser.add_argument(
        "--against",
        type=Path,
        default=None,
        help="api: also run the agent of this tree (its .venv), in turn "
        "with this one, e.g. a git worktree of the previous commit",
    )
    parser.add_argument("--rounds", type=int, default=1, help="api: rounds of runs, in turn")
    parser.add_argument(
        "--fsync-delay-us",
        type=int,
        default=0,
        help="emulate a slower disk: every fsync and fdatasync of shoal and "
        "sqlite takes this much longer (bench/slowsync.c; needs cc)",
    )
    args = parser.parse_args()
    if args.fsync_delay_us and os.environ.get(DELAY_ENV) != str(args.fsync_delay_us):
        _reexec_with_slow_sync(args.fsync_delay_us)
    delay = os.environ.get(DELAY_ENV)
    disk = f"disk + {delay} us per flush (emulated)" if delay else "the disk as it is"
    print(f"shoal storage benchmark: {os.cpu_count()} cores, Python {sys.version.split()[0]}, "
          f"sqlite {sqlite3.sqlite_version}, fsync: {disk}")  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="shoal-bench-", dir="/var/tmp") as tmp:
        root = Path(tmp)
        if "engine" in args.only:
            bench_engine(root, args.ops)
        if "commit" in args.only:
            bench_commit(root, args.seconds)
        if "api" in args.only:
            bench_api(root, args.seconds, args.against, args.rounds)
    if "sync" in args.only:
        bench_sync(args.sizes)


if __name__ == "__main__":
    main()
