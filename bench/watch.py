#!/usr/bin/env python3
"""Watch latency (issue 21): shoal's /v1/watch against etcd and ZooKeeper, in the same run.

Sections, for each system in turn (one at a time, so they never share the CPU):

  local    a put, then the watch event for it on the same agent (etcd: the
           same member; ZooKeeper: the same server); sequential, one put at a
           time with a 10 ms gap, >= 500 puts: p50, p99. Target p99 <= 20 ms.
  fan-out  a put on one agent, the event on a watch on each of the N - 1
           other agents (N = 20 by default, on loopback); >= 100 puts, one
           every 100 ms: p50 and p99 of the time until the LAST of the N - 1
           watches saw it, and over every (put, watch) pair. etcd: 3 members,
           N - 1 `etcdctl watch` processes spread over the members, the put on
           member 0 through its HTTP/JSON gateway. ZooKeeper: 3 servers, N - 1
           processes each holding one kazoo DataWatch, spread over the
           servers, the put through kazoo on server 1. Ratios shoal/etcd and
           shoal/ZooKeeper.
  many     shoal only: --watches (1,000) watches open on one agent; ~20 local
           puts, 200 ms apart: how long until all of them have the event
           (p50 and max over the puts), and the agent's RSS added per watch
           (VmRSS before opening them and once all are open).

Every put writes the same key (etcd key, znode) with its sequence number as
the value. A watch that skips a version and shows a newer one has seen the
older one when it shows the newer (newest wins; ZooKeeper's DataWatch and an
anti-entropy session both deliver only the latest value): such pairs are
counted as "superseded" and timed at the newer value's arrival.

How the figures are taken: every time is CLOCK_MONOTONIC (time.monotonic(),
one clock for every process on the host). The put's time is taken just
before its request is written. shoal's watches are raw HTTP streams in this
process (asyncio, uvloop), stamped on arrival of the bytes. etcd's are
`etcdctl watch` processes (etcd's own gRPC client), stamped when their
output line reaches this process through a pipe; the gateway's /v3/watch
would be an HTTP stream like shoal's, but it is a proxy inside etcd that
re-dials etcd's gRPC server, a hop that etcd's clients do not take.
ZooKeeper's are kazoo processes that stamp the moment the DataWatch callback
runs (after kazoo's re-read of the znode, as a kazoo user sees it). Every
system keeps its data under /var/tmp, on the same disk, with its default
durability (shoal: fsync per write batch; etcd: WAL fsync; ZooKeeper:
forceSync=yes).

    apt-get install etcd-server etcd-client zookeeper; pip install kazoo
    .venv/bin/python bench/watch.py [--agents 20] [--puts 100] [--local-puts 500]
        [--watches 1000] [--skip-etcd] [--skip-zk] [--quick]
"""

from __future__ import annotations

import abc
import argparse
import asyncio
import base64
import json
import logging
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
KEY = "bench/watch"
SHOAL_NET, ETCD_NET, ZK_NET = "127.21.0", "127.21.1", "127.21.2"  # free of other benches/tests
DRAIN_S = 30.0  # how long after the last put a watch may still report it
ZNODE = "/bench-watch"
CLK_TCK = os.sysconf("SC_CLK_TCK")


class Skip(Exception):
    """A system that cannot run here (not installed, no /v1/watch)."""


# -- time-stamped arrivals ---------------------------------------------------------------


class Arrivals:
    """When each watch first saw each sequence number (or a newer one)."""

    def __init__(self, observers: list[str]) -> None:
        self.top = {o: -1 for o in observers}
        self.at: dict[str, dict[int, float]] = {o: {} for o in observers}
        self.direct: set[tuple[str, int]] = set()
        self.ended: set[str] = set()  # streams the server closed
        self._changed = asyncio.Event()

    def record(self, observer: str, seq: int, at: float) -> None:
        top = self.top[observer]
        if seq <= top:
            return
        for k in range(max(top + 1, seq - 10_000), seq + 1):
            self.at[observer][k] = at
        self.direct.add((observer, seq))
        self.top[observer] = seq
        self._changed.set()

    def end(self, observer: str) -> None:
        self.ended.add(observer)
        self._changed.set()

    def all_at_least(self, seq: int) -> bool:
        return min(self.top.values()) >= seq

    async def until(self, pred: Callable[[], bool], timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while not pred():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            self._changed.clear()
            try:
                await asyncio.wait_for(self._changed.wait(), remaining)
            except TimeoutError:
                return pred()
        return True


# -- HTTP, by hand -----------------------------------------------------------------------


async def read_response(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    head = await reader.readuntil(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    length = re.search(rb"\r\ncontent-length:\s*(\d+)", head, re.I)
    if length:
        return status, await reader.readexactly(int(length.group(1)))
    body = b""
    if re.search(rb"\r\ntransfer-encoding:\s*chunked", head, re.I):
        while size := int((await reader.readuntil(b"\r\n")).split(b";")[0], 16):
            body += (await reader.readexactly(size + 2))[:-2]
        await reader.readuntil(b"\r\n")
    return status, body


class HttpConnection:
    """One keep-alive HTTP/1.1 connection, one request at a time."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.streams: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None

    async def request(self, method: str, path: str, body: bytes = b"") -> tuple[int, bytes]:
        if self.streams is None:
            self.streams = await asyncio.open_connection(self.host, self.port)
        reader, writer = self.streams
        writer.write(f"{method} {path} HTTP/1.1\r\nhost: {self.host}\r\n"
                     f"content-length: {len(body)}\r\n\r\n".encode() + body)  # fmt: skip
        return await read_response(reader)

    def close(self) -> None:
        if self.streams is not None:
            self.streams[1].close()
            self.streams = None


async def get_json(host: str, port: int, path: str) -> Any:
    conn = HttpConnection(host, port)
    try:
        status, body = await asyncio.wait_for(conn.request("GET", path), 5.0)
    finally:
        conn.close()
    return json.loads(body) if status == 200 else None


class WatchStream(asyncio.Protocol):
    """A shoal `/v1/watch` stream read straight off the socket (chunked JSON
    lines), each line stamped on arrival; subclasses take the lines."""

    def __init__(self, host: str, query: str) -> None:
        self.host, self.query = host, query
        self.ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.transport: asyncio.Transport | None = None
        self._buf = b""
        self._head: bytes | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        transport.write(f"GET /v1/watch?{self.query} HTTP/1.1\r\n"  # type: ignore[attr-defined]
                        f"host: {self.host}\r\n\r\n".encode())  # fmt: skip

    def data_received(self, data: bytes) -> None:
        now = time.monotonic()
        self._buf += data
        if self._head is None:
            head, sep, rest = self._buf.partition(b"\r\n\r\n")
            if not sep:
                return
            self._head, self._buf = head, rest
            if not head.startswith(b"HTTP/1.1 200"):
                return  # the body (a JSON error) follows; connection_lost reports it
        *parts, self._buf = self._buf.split(b"\r\n")
        for part in parts:  # chunk sizes are hex, the JSON lines start with "{"
            if part.startswith(b"{"):
                event = json.loads(part)
                if event.get("type") == "hello" and not self.ready.done():
                    self.ready.set_result(None)
                else:
                    self.on_event(event, now)

    def on_event(self, event: dict[str, Any], now: float) -> None:
        """One line of the stream other than the opening `hello`."""

    def failure(self) -> str:
        """What the agent answered instead of a stream."""
        head = (self._head or b"no answer").split(b"\r\n")[0].decode(errors="replace")
        return f"/v1/watch: {head} {self._buf[:200]!r}"

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()


class StreamWatch(WatchStream):
    """One shoal /v1/watch stream: kv events for KEY, stamped on arrival."""

    def __init__(self, name: str, host: str, arrivals: Arrivals) -> None:
        super().__init__(host, f"topics=kv&prefix={KEY}")
        self.name, self.arrivals = name, arrivals

    def on_event(self, event: dict[str, Any], now: float) -> None:
        if event.get("topic") == "kv" and event.get("key") == KEY and "value" in event:
            self.arrivals.record(self.name, int(event["value"]), now)

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.ready.done():
            self.ready.set_exception(Skip(self.failure()))
        self.arrivals.end(self.name)


class ProcessWatch:
    """A watch held by a child process that prints one line per event."""

    def __init__(self, proc: asyncio.subprocess.Process, name: str, arrivals: Arrivals,
                 parse: Callable[[str, float], tuple[int, float] | None]) -> None:  # fmt: skip
        self.proc = proc
        self.task = asyncio.create_task(self._read(name, arrivals, parse))

    async def _read(self, name: str, arrivals: Arrivals,
                    parse: Callable[[str, float], tuple[int, float] | None]) -> None:  # fmt: skip
        assert self.proc.stdout is not None
        async for line in self.proc.stdout:
            got = parse(line.decode().strip(), time.monotonic())
            if got is not None:
                arrivals.record(name, *got)
        arrivals.end(name)

    async def close(self) -> None:
        if self.proc.returncode is None:
            self.proc.kill()
        await self.proc.wait()
        self.task.cancel()


# -- the systems -------------------------------------------------------------------------


class System(abc.ABC):
    """What a section needs: start, a watch on member `target`, a put on member 0."""

    name = ""
    members = 0
    seq = 0

    def __init__(self, root: Path) -> None:
        self.root = root
        self.servers: list[subprocess.Popen[bytes]] = []

    def next_seq(self) -> int:
        self.seq += 1
        return self.seq

    def spawn(self, name: str, args: list[str]) -> None:
        with open(self.root / f"{name}.log", "ab") as log:
            self.servers.append(subprocess.Popen(args, stdout=log, stderr=log,
                                                 stdin=subprocess.DEVNULL, cwd=ROOT))  # fmt: skip

    @abc.abstractmethod
    async def start(self) -> None:
        """Start the servers and return once each answers."""

    @abc.abstractmethod
    async def watch(self, target: int, name: str, arrivals: Arrivals) -> Any:
        """Open a watch on server `target` that notes each put's arrival."""

    @abc.abstractmethod
    async def put(self, seq: int) -> None:
        """Write value number `seq` under the watched key."""

    async def stop(self) -> None:
        for proc in self.servers:
            if proc.poll() is None:
                proc.kill()
            proc.wait()


class Shoal(System):
    name = "shoal"

    def __init__(self, root: Path, n: int) -> None:
        super().__init__(root)
        self.members = n
        self.ips = [f"{SHOAL_NET}.{i + 1}" for i in range(n)]
        self.writer = HttpConnection(self.ips[0], 7947)

    def launch(self, i: int) -> None:
        ip = self.ips[i]
        args = [sys.executable, "-m", "shoal.daemon.cli", "agent", "--node-name", f"w{i:03d}",
                "--bind", f"{ip}:7946", "--api", f"{ip}:7947", "--profile", "local",
                "--data-dir", str(self.root / f"w{i:03d}"), "--no-discovery",
                "--log-level", "warning"]  # fmt: skip
        self.spawn(f"w{i:03d}", args + (["--join", f"{self.ips[0]}:7946"] if i else []))

    async def start(self) -> None:
        self.launch(0)
        await poll(lambda: get_json(self.ips[0], 7947, "/v1/self"), 30, "the first agent's API")
        for i in range(1, self.members):
            self.launch(i)

        async def formed() -> bool:
            for ip in self.ips:
                seen = await get_json(ip, 7947, "/v1/members?status=alive")
                if seen is None or len(seen["members"]) < self.members:
                    return False
            return True

        await poll(formed, 30 + 3 * self.members, f"{self.members} agents seeing each other")

    async def watch(self, target: int, name: str, arrivals: Arrivals) -> StreamWatch:
        host = self.ips[target]
        loop = asyncio.get_running_loop()
        _, w = await loop.create_connection(lambda: StreamWatch(name, host, arrivals), host, 7947)
        await asyncio.wait_for(w.ready, 10)
        return w

    async def put(self, seq: int) -> None:
        status, body = await self.writer.request("PUT", f"/v1/kv/{KEY}", str(seq).encode())
        assert status == 200, body

    def cpu_s(self, i: int) -> float:
        fields = Path(f"/proc/{self.servers[i].pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / CLK_TCK

    def rss_kb(self, i: int) -> int:
        text = Path(f"/proc/{self.servers[i].pid}/status").read_text()
        return int(re.search(r"VmRSS:\s+(\d+) kB", text).group(1))  # type: ignore[union-attr]

    async def stop(self) -> None:
        self.writer.close()
        await super().stop()


class Etcd(System):
    name = "etcd"
    members = 3
    env = {**os.environ, "ETCDCTL_API": "3"}

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.ips = [f"{ETCD_NET}.{i + 1}" for i in range(3)]
        self.writer = HttpConnection(self.ips[0], 2379)

    async def start(self) -> None:
        if not shutil.which("etcd") or not shutil.which("etcdctl"):
            raise Skip("apt-get install etcd-server etcd-client")
        cluster = ",".join(f"e{i}=http://{ip}:2380" for i, ip in enumerate(self.ips))
        for i, ip in enumerate(self.ips):
            self.spawn(f"e{i}", ["etcd", "--name", f"e{i}", "--data-dir", str(self.root / f"e{i}"),
                                 "--listen-peer-urls", f"http://{ip}:2380",
                                 "--initial-advertise-peer-urls", f"http://{ip}:2380",
                                 "--listen-client-urls", f"http://{ip}:2379",
                                 "--advertise-client-urls", f"http://{ip}:2379",
                                 "--initial-cluster", cluster, "--initial-cluster-state", "new",
                                 "--initial-cluster-token", "shoal-bench-watch"])  # fmt: skip
        endpoints = ",".join(f"{ip}:2379" for ip in self.ips)

        async def healthy() -> bool:
            proc = await asyncio.create_subprocess_exec(
                "etcdctl", "--endpoints", endpoints, "endpoint", "health", env=self.env,
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
            return await proc.wait() == 0

        await poll(healthy, 30, "etcd healthy")

    async def watch(self, target: int, name: str, arrivals: Arrivals) -> ProcessWatch:
        proc = await asyncio.create_subprocess_exec(
            "etcdctl", "--endpoints", f"{self.ips[target]}:2379", "watch", KEY, env=self.env,
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)  # fmt: skip
        # Output: "PUT", the key, the value, one per line.
        return ProcessWatch(proc, name, arrivals, _etcdctl_value)

    async def put(self, seq: int) -> None:
        body = json.dumps({"key": base64.b64encode(KEY.encode()).decode(),
                           "value": base64.b64encode(str(seq).encode()).decode()})  # fmt: skip
        status, answer = await self.writer.request("POST", "/v3/kv/put", body.encode())
        assert status == 200, answer

    async def leader(self) -> int | None:
        """Which member leads (etcdctl endpoint status)."""
        proc = await asyncio.create_subprocess_exec(
            "etcdctl", "--endpoints", ",".join(f"{ip}:2379" for ip in self.ips), "endpoint",
            "status", "-w", "json", env=self.env, stdout=subprocess.PIPE)  # fmt: skip
        out, _ = await proc.communicate()
        for i, ep in enumerate(json.loads(out)):
            if ep["Status"]["header"]["member_id"] == ep["Status"]["leader"]:
                return i
        return None

    async def stop(self) -> None:
        self.writer.close()
        await super().stop()


ZK_WATCHER = """
import sys, time
from kazoo.client import KazooClient
zk = KazooClient(hosts=sys.argv[1], timeout=10.0)
zk.start(timeout=30)
def changed(data, stat):
    now = time.monotonic()
    if data is not None:
        sys.stdout.write(data.decode() + " " + repr(now) + "\\n")
        sys.stdout.flush()
zk.DataWatch(sys.argv[2], changed)
sys.stdin.read()
zk.stop()
"""


def _etcdctl_value(line: str, now: float) -> tuple[int, float] | None:
    return (int(line), now) if line.isdigit() else None


class ZooKeeper(System):
    name = "zk"
    members = 3
    jar = Path("/usr/share/java/zookeeper.jar")

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.ips = [f"{ZK_NET}.{i + 1}" for i in range(3)]
        self.client: Any = None

    async def start(self) -> None:
        if not self.jar.exists() or not shutil.which("java"):
            raise Skip("apt-get install zookeeper")
        try:
            from kazoo.client import KazooClient
        except ImportError:
            raise Skip("pip install kazoo (the bench extra)") from None
        logging.getLogger("kazoo").setLevel(logging.CRITICAL)  # refused connects while starting
        for i, ip in enumerate(self.ips):
            data = self.root / f"z{i}"
            data.mkdir()
            (data / "myid").write_text(str(i + 1))
            cfg = self.root / f"z{i}.cfg"
            cfg.write_text("\n".join([
                "tickTime=2000", "initLimit=10", "syncLimit=5", f"dataDir={data}",
                "clientPort=2181", f"clientPortAddress={ip}", "admin.enableServer=false",
                "4lw.commands.whitelist=srvr",
                *(f"server.{j + 1}={ipj}:2888:3888" for j, ipj in enumerate(self.ips)),
            ]) + "\n")  # fmt: skip
            main_class = "org.apache.zookeeper.server.quorum.QuorumPeerMain"
            classpath = f"/etc/zookeeper/conf:{self.jar}"
            self.spawn(f"z{i}", ["java", "-Xmx256m", f"-Dzookeeper.log.dir={self.root}",
                                 "-cp", classpath, main_class, str(cfg)])  # fmt: skip
        self.client = KazooClient(hosts=f"{self.ips[0]}:2181", timeout=10.0)

        async def connected() -> bool:
            try:
                await asyncio.to_thread(self.client.start, 3)
                return True
            except Exception:
                return False

        await poll(connected, 60, "ZooKeeper quorum")
        await asyncio.to_thread(self.client.ensure_path, ZNODE)
        await asyncio.to_thread(self.client.set, ZNODE, b"0")

    async def watch(self, target: int, name: str, arrivals: Arrivals) -> ProcessWatch:
        with open(self.root / "watchers.log", "ab") as log:
            proc = await asyncio.create_subprocess_exec(
                sys.executable, "-c", ZK_WATCHER, f"{self.ips[target]}:2181", ZNODE,
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log)  # fmt: skip

        def parse(line: str, now: float) -> tuple[int, float] | None:
            value, _, stamp = line.partition(" ")
            return (int(value), float(stamp)) if value.isdigit() else None

        return ProcessWatch(proc, name, arrivals, parse)

    async def put(self, seq: int) -> None:
        loop = asyncio.get_running_loop()
        done: asyncio.Future[None] = loop.create_future()
        result = self.client.set_async(ZNODE, str(seq).encode())
        result.rawlink(lambda _: loop.call_soon_threadsafe(done.set_result, None))
        await done
        result.get()  # raises what the set raised

    async def leader(self) -> int | None:
        """Which server leads (the srvr four-letter command)."""
        for i, ip in enumerate(self.ips):
            reader, writer = await asyncio.open_connection(ip, 2181)
            writer.write(b"srvr")
            answer = await reader.read()
            writer.close()
            if b"Mode: leader" in answer:
                return i
        return None

    async def stop(self) -> None:
        if self.client is not None:
            self.client.stop()
            self.client.close()
        await super().stop()


async def poll(check: Callable[[], Any], timeout_s: float, what: str) -> None:
    """Wait until the coroutine `check()` gives something true."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            if await check():
                return
        except (OSError, asyncio.IncompleteReadError, TimeoutError):
            pass
        if time.monotonic() > deadline:
            raise TimeoutError(f"bench: no {what} within {timeout_s:.0f} s")
        await asyncio.sleep(0.2)  # polling a starting system


# -- sections ----------------------------------------------------------------------------


async def open_watches(system: System, targets: list[int], arrivals: Arrivals,
                       names: list[str], parallel: int = 32) -> list[Any]:  # fmt: skip
    gate = asyncio.Semaphore(parallel)

    async def one(target: int, name: str) -> Any:
        async with gate:
            return await system.watch(target, name, arrivals)

    return list(await asyncio.gather(*(one(t, n) for t, n in zip(targets, names))))


async def close_watches(watches: list[Any]) -> None:
    for w in watches:
        closed = w.close()
        if closed is not None:
            await closed


async def warm_up(system: System, arrivals: Arrivals, spacing_s: float) -> None:
    """Put until every watch has seen a put, then until all have the latest."""
    first = system.seq + 1
    deadline = time.monotonic() + 60
    while True:
        seq = system.next_seq()
        await system.put(seq)
        if await arrivals.until(lambda: arrivals.all_at_least(first), spacing_s):
            break
        if time.monotonic() > deadline:
            raise TimeoutError(f"bench: {system.name} watches saw no put within 60 s")
    await arrivals.until(lambda: arrivals.all_at_least(seq), DRAIN_S)


async def run_local(system: System, puts: int, gap_s: float) -> dict[str, Any]:
    arrivals = Arrivals(["local"])
    watches = await open_watches(system, [0], arrivals, ["local"])
    lat: list[float] = []
    try:
        await warm_up(system, arrivals, 0.1)
        for _ in range(puts):
            seq = system.next_seq()
            put_at = time.monotonic()
            await system.put(seq)
            if await arrivals.until(lambda: arrivals.top["local"] >= seq, 5.0):
                lat.append(arrivals.at["local"][seq] - put_at)
            await asyncio.sleep(gap_s)
    finally:
        await close_watches(watches)
    return {"local_p50": pct(lat, 0.5), "local_p99": pct(lat, 0.99), "local_max": pct(lat, 1),
            "local_n": len(lat), "local_lost": puts - len(lat)}  # fmt: skip


async def timed_puts(system: System, arrivals: Arrivals, puts: int,
                     spacing_s: float) -> dict[int, float]:  # fmt: skip
    """`puts` puts, one every `spacing_s`; then wait for every watch to see the last."""
    put_at: dict[int, float] = {}
    start = time.monotonic()
    for i in range(puts):
        await asyncio.sleep(max(0.0, start + i * spacing_s - time.monotonic()))
        seq = system.next_seq()
        put_at[seq] = time.monotonic()
        await system.put(seq)
    await arrivals.until(lambda: arrivals.all_at_least(seq), DRAIN_S)
    return put_at


def spread(arrivals: Arrivals, put_at: dict[int, float]) -> dict[str, Any]:
    """Per put, the time until the last watch saw it; and every (put, watch) time."""
    last, each, missing, superseded = [], [], 0, 0
    per_watch: dict[str, list[float]] = {o: [] for o in arrivals.top}
    for seq, at in put_at.items():
        seen = [arrivals.at[o].get(seq) for o in arrivals.top]
        each += [s - at for s in seen if s is not None]
        for o, s in zip(arrivals.top, seen):
            if s is not None:
                per_watch[o].append(s - at)
        missing += sum(1 for s in seen if s is None)
        superseded += sum(1 for o in arrivals.top
                          if seq in arrivals.at[o] and (o, seq) not in arrivals.direct)  # fmt: skip
        if all(s is not None for s in seen):
            last.append(max(seen) - at)  # type: ignore[type-var]
    p50s = [v for d in per_watch.values() if (v := pct(d, 0.5)) is not None]
    p99s = [v for d in per_watch.values() if (v := pct(d, 0.99)) is not None]
    return {"last_p50": pct(last, 0.5), "last_p99": pct(last, 0.99), "last_max": pct(last, 1),
            "each_p50": pct(each, 0.5), "each_p99": pct(each, 0.99),
            "watch_p50_best": min(p50s, default=None), "watch_p50_worst": max(p50s, default=None),
            "watch_p99_best": min(p99s, default=None), "watch_p99_worst": max(p99s, default=None),
            "superseded": superseded, "missing": missing, "ended": len(arrivals.ended)}  # fmt: skip


async def run_fanout(system: System, watchers: int, puts: int, spacing_s: float) -> dict[str, Any]:
    names = [f"o{i}" for i in range(1, watchers + 1)]
    if isinstance(system, Shoal):
        targets = list(range(1, watchers + 1))  # every agent but the writer
    else:
        targets = [i % system.members for i in range(1, watchers + 1)]
    arrivals = Arrivals(names)
    watches = await open_watches(system, targets, arrivals, names)
    try:
        await warm_up(system, arrivals, spacing_s)
        return spread(arrivals, await timed_puts(system, arrivals, puts, spacing_s))
    finally:
        await close_watches(watches)


async def run_many(system: Shoal, watches_n: int, puts: int) -> dict[str, Any]:
    await asyncio.sleep(2.0)  # let the agent's memory settle after the fan-out
    rss_before = system.rss_kb(0)
    names = [f"m{i}" for i in range(watches_n)]
    arrivals = Arrivals(names)
    opened_at = time.monotonic()
    watches = await open_watches(system, [0] * watches_n, arrivals, names, parallel=64)
    open_s = time.monotonic() - opened_at
    try:
        await asyncio.sleep(1.0)
        rss_open = system.rss_kb(0)
        await warm_up(system, arrivals, 0.2)
        agent_cpu, own_cpu = system.cpu_s(0), time.process_time()
        out = spread(arrivals, await timed_puts(system, arrivals, puts, 0.2))
        agent_cpu, own_cpu = system.cpu_s(0) - agent_cpu, time.process_time() - own_cpu
        rss_after = system.rss_kb(0)
    finally:
        await close_watches(watches)
    return {"many_" + k: v for k, v in out.items()} | {
        "many_open_s": open_s, "rss_before_mb": rss_before / 1024, "rss_open_mb": rss_open / 1024,
        "rss_after_puts_mb": rss_after / 1024,
        "rss_per_watch_kb": (rss_open - rss_before) / watches_n,
        "agent_cpu_ms": agent_cpu / puts * 1000, "client_cpu_ms": own_cpu / puts * 1000,
    }  # fmt: skip


def pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000


# -- report ------------------------------------------------------------------------------

LOCAL_ROWS = [
    ("local_p50", "put -> event, p50 (ms)"),
    ("local_p99", "put -> event, p99 (ms; target <= 20)"),
    ("local_max", "put -> event, max (ms)"),
    ("local_lost", "puts with no event within 5 s"),
]
FANOUT_ROWS = [
    ("last_p50", "last of the watches, p50 (ms)"),
    ("last_p99", "last of the watches, p99 (ms)"),
    ("last_max", "last of the watches, max (ms)"),
    ("each_p50", "each (put, watch), p50 (ms)"),
    ("each_p99", "each (put, watch), p99 (ms)"),
    ("watch_p50_best", "per watch p50, best watch (ms)"),
    ("watch_p50_worst", "per watch p50, worst watch (ms)"),
    ("watch_p99_best", "per watch p99, best watch (ms)"),
    ("watch_p99_worst", "per watch p99, worst watch (ms)"),
    ("superseded", "(put, watch) seen only as a newer value"),
    ("missing", "(put, watch) never seen"),
    ("ended", "watches the server ended"),
]
MANY_ROWS = [
    ("many_open_s", "opening them all (s)"),
    ("many_last_p50", "put -> all watches have it, p50 (ms)"),
    ("many_last_max", "put -> all watches have it, max (ms)"),
    ("many_each_p50", "each (put, watch), p50 (ms)"),
    ("many_each_p99", "each (put, watch), p99 (ms)"),
    ("agent_cpu_ms", "agent CPU per put (ms)"),
    ("client_cpu_ms", "this process's CPU per put, reading them (ms)"),
    ("many_missing", "(put, watch) never seen"),
    ("many_ended", "watches the agent ended"),
    ("rss_before_mb", "agent RSS before (MB)"),
    ("rss_open_mb", "agent RSS with them open (MB)"),
    ("rss_after_puts_mb", "agent RSS after the puts (MB)"),
    ("rss_per_watch_kb", "RSS added per watch (KiB)"),
]


def fmt(v: object) -> str:
    if isinstance(v, float):
        return f"{v:.2f}" if v < 100 else f"{v:.0f}"
    return "-" if v is None else str(v)


def table(results: dict[str, dict[str, Any]], rows: list[tuple[str, str]]) -> None:
    peers = [p for p in ("etcd", "zk") if p in results]
    print(f"  {'figure':44} {'shoal':>8}" + "".join(f" {p:>8}" for p in peers)
          + "".join(f" {'shoal/' + p:>10}" for p in peers))  # fmt: skip
    for key, label in rows:
        s = results.get("shoal", {}).get(key)
        line = f"  {label:44} {fmt(s):>8}" + "".join(f" {fmt(results[p].get(key)):>8}"
                                                      for p in peers)  # fmt: skip
        for p in peers:
            f = results[p].get(key)
            ok = isinstance(s, float) and isinstance(f, float) and f > 0
            line += f" {(f'{s / f:.2f}' if ok else '-'):>10}"
        print(line)


def versions() -> str:
    def first_line(cmd: list[str]) -> str:
        try:
            out = subprocess.run(cmd, capture_output=True, text=True, timeout=10).stdout
        except OSError:
            return "not installed"
        return out.splitlines()[0] if out else "not installed"

    zk = first_line(["dpkg-query", "-W", "-f", "${Version}", "zookeeper"])
    try:
        import kazoo

        kz = kazoo.__version__
    except ImportError:
        kz = "not installed"
    return f"{first_line(['etcd', '--version'])}; ZooKeeper {zk}; kazoo {kz}"


def report(results: dict[str, dict[str, Any]], args: argparse.Namespace, notes: list[str]) -> None:
    n = args.agents
    print(f"\nconfiguration: {os.cpu_count()} cores, Python {sys.version.split()[0]}, "
          f"load average at start {args.loadavg}; {versions()}; shoal: {n} agents, profile "
          f"local, no discovery; etcd: 3 members, ZooKeeper: 3 servers (tickTime 2000 ms); "
          f"all on loopback, data on /var/tmp")  # fmt: skip
    for note in notes:
        print(f"  note: {note}")
    print(f"\n== local: put, then the event on a watch on the same agent/member/server; "
          f"{args.local_puts} puts, one at a time, {args.local_gap_ms:.0f} ms apart")  # fmt: skip
    table(results, LOCAL_ROWS)
    print(f"\n== fan-out: put on one, event on a watch on each of {n - 1} others "
          f"(shoal: {n} agents; etcd/ZooKeeper: {n - 1} watchers over 3 members); "
          f"{args.puts} puts, one every {args.spacing_ms:.0f} ms")  # fmt: skip
    table(results, FANOUT_ROWS)
    if "shoal" in results and "rss_per_watch_kb" in results["shoal"]:
        print(f"\n== many: {args.watches} watches on one shoal agent, {args.watch_puts} local "
              "puts 200 ms apart")  # fmt: skip
        for key, label in MANY_ROWS:
            print(f"  {label:44} {fmt(results['shoal'].get(key)):>8}")


async def run_system(system: System, args: argparse.Namespace, notes: list[str]) -> dict:
    out: dict[str, Any] = {}
    print(f"running {system.name} ...", file=sys.stderr, flush=True)
    try:
        await system.start()
        if isinstance(system, Etcd | ZooKeeper):
            notes.append(f"{system.name}: the writer's server is the leader: "
                         f"{await system.leader() == 0}")  # fmt: skip
        out |= await run_local(system, args.local_puts, args.local_gap_ms / 1000)
        out |= await run_fanout(system, args.agents - 1, args.puts, args.spacing_ms / 1000)
        if isinstance(system, Shoal) and args.watches:
            out |= await run_many(system, args.watches, args.watch_puts)
    except Skip as exc:
        notes.append(f"{system.name} skipped: {exc}")
    finally:
        await system.stop()
    return out


async def run(args: argparse.Namespace) -> None:
    results: dict[str, dict[str, Any]] = {}
    notes: list[str] = []
    makers: list[tuple[str, Callable[[Path], System]]] = []
    makers.append(("shoal", lambda root: Shoal(root, args.agents)))
    if not args.skip_etcd:
        makers.append(("etcd", Etcd))
    if not args.skip_zk:
        makers.append(("zk", ZooKeeper))
    for name, make in makers:
        if name in args.skip:
            continue
        root = Path(tempfile.mkdtemp(prefix=f"shoal-bench-watch-{name}-", dir="/var/tmp"))
        try:
            results[name] = await run_system(make(root), args, notes)
        finally:
            shutil.rmtree(root, ignore_errors=True)
    report(results, args, notes)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--agents", type=int, default=20)
    parser.add_argument("--puts", type=int, default=100, help="fan-out puts")
    parser.add_argument("--spacing-ms", type=float, default=100.0, help="between fan-out puts")
    parser.add_argument("--local-puts", type=int, default=500)
    parser.add_argument("--local-gap-ms", type=float, default=10.0)
    parser.add_argument("--watches", type=int, default=1000, help="on one agent (0: skip)")
    parser.add_argument("--watch-puts", type=int, default=20)
    parser.add_argument("--skip-etcd", action="store_true")
    parser.add_argument("--skip-zk", action="store_true")
    parser.add_argument("--skip", nargs="*", default=[], choices=["shoal", "etcd", "zk"])
    parser.add_argument("--quick", action="store_true", help="small numbers, a smoke run")
    args = parser.parse_args()
    if args.quick:
        args.agents, args.puts, args.local_puts = min(args.agents, 5), 20, 50
        args.watches, args.watch_puts = min(args.watches, 100), 5
    args.loadavg = " ".join(Path("/proc/loadavg").read_text().split()[:3])
    try:
        import uvloop
    except ImportError:
        asyncio.run(run(args))
    else:
        uvloop.run(run(args))


if __name__ == "__main__":
    main()
