#!/usr/bin/env python3
"""Client sessions (issues 30, 38): their cost, how fast a dead holder's key goes, restarts.

Sections:

  capacity  one agent; --sessions (10,000) sessions opened (ttl 30 s) over
            --connections (4) keep-alive HTTP connections: the agent's RSS
            before and after (KiB per session, VmRSS). Then every session is
            renewed every ttl/3 = 10 s, as a client library would, the
            renewals spread evenly (~1,000/s for 10,000): the agent's CPU (% of
            one core, utime+stime from /proc/PID/stat) over --renew-s (30 s),
            against the same agent idle with no session open. Two controls
            with the sessions open: a short window with no renewal at all (it
            must stay well inside the TTL), and the same request rate of
            `GET /v1/session/<id>` (the same HTTP path and JSON answer, without
            the renewal's heap push and timer re-arm). Sessions that expired
            unexpectedly (a renewal answered 404, or missing from
            `GET /v1/sessions` at the end): should be 0.
  removal   a holder process (a Python child) opens a session with ttl T
            (--ttl, 4 s: ZooKeeper's minimum with tickTime 2000), registers
            (shoal: `PUT /v1/kv/<key>?session=`; ZooKeeper: an ephemeral znode
            through kazoo with timeout=T), keeps it alive (shoal: a renewal
            every T/3; kazoo pings by itself, every ~T/3) and says "ready". A
            watch on ANOTHER member (shoal: agent 2 of 3, the holder on agent
            0; ZooKeeper: a kazoo exists-watch on a client of server 2 of 3,
            the holder on server 0) waits for the deletion. The bench sleeps a
            random 1 s + [0, T/3) (the same seeded delays for both systems, so
            the kill lands anywhere in the keepalive cycle), kill -9s the
            holder and times the deletion's arrival at the watch: from the
            kill, and from the holder's last keepalive send (every request a
            kazoo client sends is one; shoal's are the session's open and its
            renewals). --rounds (10) each; p50 and max; ratios shoal/ZooKeeper.
            Expected: shoal's keepalive -> deletion is T plus a few ms (the
            agent expires the session at its TTL); ZooKeeper's is T to T +
            tickTime (its session tracker expires in tickTime buckets).
  removal-log
            the same with sessions in the metadata log (issue 38): agents
            started with --meta; the holder is the client library
            (`Session`, renewals every T/3, stamped before each is sent)
            and registers a *metadata key* (`Session.meta_put`); the watch
            on agent 2 is a metadata watch (`GET /v1/meta/?prefix=&watch=1`).
            The deletion is the controller's committed SessionEnd, applied
            on agent 2. Printed beside the agent-table sessions and
            ZooKeeper (one ZooKeeper run serves both), ratios to ZooKeeper.
  restart   a live holder's agent restarts (issue 38: an upgrade). shoal:
            --meta agents; the holder (the client library, which retries a
            failed renewal until the TTL since its last answer runs out)
            on a non-controller agent registers a metadata key and a kv key
            under its session; the agent gets SIGTERM (it leaves, then
            exits) or kill -9, and is started again on its data directory.
            Counted on watches (metadata and kv) on the other
            non-controller agent over the restart and a TTL + 1 s after the
            first renewal answered: deletions (must be 0); the session
            still open there, same id; the holder not told its session was
            lost. Timed: signal -> the agent's API answers -> the holder's
            first renewal answered; how much of the TTL was left then (its
            last keepalive before the signal + T - then); and the steps of
            the restarted agent's start from its own log (the agents run
            at --log-level info: `START_STEPS`): started, join completed,
            the controller's notice accepted, the feature level known
            (renewals are forwarded from then on). ZooKeeper: the
            holder (kazoo, timeout T, the connection string lists all
            three servers, its own first, randomize_hosts off) is on a
            follower; that server gets SIGTERM or kill -9 and is started
            again; kazoo moves to the next server: the time to kazoo's
            CONNECTED (state listener) from the signal and from SUSPENDED,
            the session id unchanged, deletions seen by a DataWatch on the
            leader (0 expected). --restarts (4) rounds per kind, a new
            holder each (closed after, its keys deleted outside the count);
            ratios shoal/ZooKeeper of signal -> usable. Expected: shoal
            pays an agent's start (a second or more), ZooKeeper a
            reconnect (milliseconds): the shoal client renews through its
            one local agent. --home controller: the holder's agent is the
            controller's (the restart is also a failover: a new controller
            gives every session a full TTL), ZooKeeper's the leader's (an
            election); the watches on another agent/server.

Clocks: every time is CLOCK_MONOTONIC (time.monotonic(), one clock for every
process on the host); the holder stamps its keepalives just before writing
them. Everything runs on loopback: shoal on 127.21.3.x, ZooKeeper on
127.21.4.x (ports as bench/watch.py, whose classes this reuses).

    apt-get install zookeeper; pip install kazoo
    .venv/bin/python bench/sessions.py [--sessions 10000] [--rounds 10] [--restarts 4]
        [--ttl 4] [--only capacity removal removal-log restart] [--home follower|controller]
        [--skip-zk] [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import logging
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

_spec = importlib.util.spec_from_file_location("bench_watch", Path(__file__).with_name("watch.py"))
assert _spec is not None and _spec.loader is not None
watch = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(watch)

SHOAL_NET, ZK_NET = "127.21.3", "127.21.4"  # free of bench/watch.py's and the tests'
KEY_PREFIX = "bench/sessions/"
ZPARENT = "/bench-sessions"
CAPACITY_TTL_S = 30.0
META_LOG_FEATURE = 2  # sessions go through the log from this level (kernel/versions.py)
SEED = 30  # the kill delays: the same for both systems, and from run to run
SECTIONS = ("capacity", "removal", "removal-log", "restart")


class Agents(watch.Shoal):
    """bench/watch.py's agents, on this bench's addresses; with `meta`, agents
    of the metadata log (`--meta`), each of which can be restarted on its data."""

    def __init__(self, root: Path, n: int, meta: bool = False, log_level: str = "warning") -> None:
        super().__init__(root, n)
        self.ips = [f"{SHOAL_NET}.{i + 1}" for i in range(n)]
        self.writer = watch.HttpConnection(self.ips[0], 7947)
        self.meta = meta
        self.log_level = log_level
        self.argv: dict[int, tuple[str, list[str]]] = {}

    def launch(self, i: int) -> None:
        ip, name = self.ips[i], f"w{i:03d}"
        args = [sys.executable, "-m", "shoal.daemon.cli", "agent", "--node-name", name,
                "--bind", f"{ip}:7946", "--api", f"{ip}:7947", "--profile", "local",
                "--data-dir", str(self.root / name), "--no-discovery",
                "--log-level", self.log_level, *(["--meta"] if self.meta else [])]  # fmt: skip
        self.spawn(name, args + (["--join", f"{self.ips[0]}:7946"] if i else []))
        # Started again, it joins every other agent (tests/integration/metaagents.py).
        others = [f"{o}:7946" for o in self.ips if o != ip]
        self.argv[i] = (name, args + [w for o in others for w in ("--join", o)])

    async def start(self) -> None:
        await super().start()
        if self.meta:
            for ip in self.ips:
                await watch.poll(lambda ip=ip: self.writable(ip), 60, f"the log writable via {ip}")

    async def writable(self, ip: str) -> bool:
        """A metadata write through the agent at `ip` commits."""
        conn = watch.HttpConnection(ip, 7947)
        try:
            status, _ = await asyncio.wait_for(conn.request("PUT", "/v1/meta/bench/probe", b"x"),
                                               5)  # fmt: skip
        finally:
            conn.close()
        return status == 200

    async def controller(self) -> int | None:
        """Which agent is the controller (as agent 0 sees it)."""
        seen = await watch.get_json(self.ips[0], 7947, "/v1/controller")
        name = (seen or {}).get("controller")
        return int(name[1:]) if name else None

    async def restart(self, i: int, how: str) -> tuple[float, float, float]:
        """SIGTERM or kill -9 agent `i`, then start it again on its data:
        when the signal went, when the agent had exited, when it was started."""
        return await restart_process(self.servers, i, how,
                                     lambda: self.spawn(*self.argv[i]))  # fmt: skip


class ZooKeeper(watch.ZooKeeper):
    """bench/watch.py's 3-server ensemble (tickTime 2000), on this bench's
    addresses; each server can be restarted on its data."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.ips = [f"{ZK_NET}.{i + 1}" for i in range(3)]
        self.argv: list[tuple[str, list[str]]] = []

    def spawn(self, name: str, args: list[str]) -> None:
        self.argv.append((name, args))
        super().spawn(name, args)

    async def restart(self, i: int, how: str) -> tuple[float, float, float]:
        """As `Agents.restart`, for server `i`."""
        return await restart_process(self.servers, i, how,
                                     lambda: watch.System.spawn(self, *self.argv[i]))  # fmt: skip

    async def mode(self, i: int) -> str | None:
        """Server `i`'s role (`srvr`: leader, follower), None while it has none."""
        try:
            reader, writer = await asyncio.open_connection(self.ips[i], 2181)
            writer.write(b"srvr")
            answer = await asyncio.wait_for(reader.read(), 5)
            writer.close()
        except (OSError, TimeoutError):
            return None
        found = re.search(rb"Mode: (\w+)", answer)
        return found.group(1).decode() if found else None


async def restart_process(servers: list[subprocess.Popen[bytes]], i: int, how: str,
                          start: Any) -> tuple[float, float, float]:  # fmt: skip
    """Signal `servers[i]` (SIGTERM or SIGKILL), wait for its exit, `start()`
    it again (System.spawn appends it) and put it back at `i`."""
    proc = servers[i]
    sent_at = time.monotonic()
    proc.send_signal(signal.SIGTERM if how == "SIGTERM" else signal.SIGKILL)
    await asyncio.to_thread(proc.wait, 60)
    exited_at = time.monotonic()
    start()
    servers[i] = servers.pop()
    return sent_at, exited_at, time.monotonic()


def pct(values: list[float], q: float) -> float | None:
    """The q-quantile of `values` (nearest rank), or None."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


# -- capacity ----------------------------------------------------------------------------


async def cpu_pct(agents: Agents, seconds: float) -> float:
    """The agent's CPU over the next `seconds`, in % of one core."""
    cpu, at = agents.cpu_s(0), time.monotonic()
    await asyncio.sleep(seconds)
    return (agents.cpu_s(0) - cpu) / (time.monotonic() - at) * 100


async def open_sessions(conns: list[watch.HttpConnection], n: int) -> list[str]:
    ids: list[str] = []

    async def opener(conn: watch.HttpConnection, count: int) -> None:
        for _ in range(count):
            body = json.dumps({"ttl_s": CAPACITY_TTL_S, "name": f"bench-{len(ids)}"}).encode()
            status, answer = await conn.request("POST", "/v1/session", body)
            assert status == 200, answer
            ids.append(json.loads(answer)["id"])

    share = [n // len(conns) + (1 if i < n % len(conns) else 0) for i in range(len(conns))]
    await asyncio.gather(*(opener(c, k) for c, k in zip(conns, share)))
    return ids


async def paced(agents: Agents, conns: list[watch.HttpConnection], ids: list[str], method: str,
                op: str, period_s: float, duration_s: float) -> dict[str, Any]:  # fmt: skip
    """Each session once every `period_s`, spread evenly, for `duration_s`:
    request g (session g mod N) is due at start + g * period_s / N;
    connection c sends the requests g = c mod len(conns), one at a time.
    The agent's CPU is taken over the whole schedule."""
    n, width = len(ids), len(conns)
    total = int(duration_s * n / period_s)
    latency: list[float] = []
    lateness: list[float] = []
    refused: list[tuple[int, bytes]] = []
    start = time.monotonic() + 0.05

    async def sender(c: int, conn: watch.HttpConnection) -> None:
        for g in range(c, total, width):
            due = start + g * period_s / n
            now = time.monotonic()
            if due > now:
                await asyncio.sleep(due - now)
                now = time.monotonic()
            lateness.append(now - due)
            status, answer = await conn.request(method, f"/v1/session/{ids[g % n]}{op}")
            latency.append(time.monotonic() - now)
            if status != 200:
                refused.append((status, answer[:200]))

    cpu, at, own = agents.cpu_s(0), time.monotonic(), time.process_time()
    await asyncio.gather(*(sender(c, conn) for c, conn in enumerate(conns)))
    wall = time.monotonic() - at
    cpu = agents.cpu_s(0) - cpu
    return {"rate": total / wall, "wall_s": wall, "cpu_pct": cpu / wall * 100,
            "cpu_us": cpu / total * 1e6,
            "own_cpu_pct": (time.process_time() - own) / wall * 100,
            "latency_p50_ms": pct(latency, 0.5) * 1000,  # type: ignore[operator]
            "latency_p99_ms": pct(latency, 0.99) * 1000,  # type: ignore[operator]
            "late_p99_ms": pct(lateness, 0.99) * 1000,  # type: ignore[operator]
            "late_max_ms": max(lateness) * 1000,
            "refused": len(refused), "refused_first": refused[:1]}  # fmt: skip


async def run_capacity(args: argparse.Namespace, root: Path, out: dict[str, Any]) -> None:
    agents = Agents(root, 1)
    conns: list[watch.HttpConnection] = []
    try:
        await agents.start()
        host = agents.ips[0]
        await asyncio.sleep(3.0)  # the agent's start-up work settles
        out["rss_start_kb"] = agents.rss_kb(0)
        out["idle_cpu_pct"] = await cpu_pct(agents, args.idle_s)
        rss_before = agents.rss_kb(0)
        conns = [watch.HttpConnection(host, 7947) for _ in range(args.connections)]
        opened_at, cpu = time.monotonic(), agents.cpu_s(0)
        ids = await open_sessions(conns, args.sessions)
        open_s = time.monotonic() - opened_at
        out["open_s"] = open_s
        out["open_rate"] = args.sessions / open_s
        out["open_cpu_us"] = (agents.cpu_s(0) - cpu) / args.sessions * 1e6
        await asyncio.sleep(1.0)
        rss_open = agents.rss_kb(0)
        out |= {"rss_before_kb": rss_before, "rss_open_kb": rss_open,
                "rss_per_session_kib": (rss_open - rss_before) / args.sessions}  # fmt: skip
        period = CAPACITY_TTL_S / 3
        print(f"  renewing {len(ids)} sessions every {period:.0f} s for {args.renew_s:.0f} s",
              file=sys.stderr, flush=True)  # fmt: skip
        out["renew"] = await paced(agents, conns, ids, "PUT", "/renew", period, args.renew_s)
        out["rss_renewed_kb"] = agents.rss_kb(0)
        # Every session was renewed within the last `period`: each has at least
        # ttl - period left; the two controls below take less than that.
        out["quiet_cpu_pct"] = await cpu_pct(agents, args.quiet_s)
        out["read"] = await paced(agents, conns, ids, "GET", "", period, args.read_s)
        status, answer = await conns[0].request("GET", "/v1/sessions")
        listed = {s["id"] for s in json.loads(answer)["sessions"]} if status == 200 else set()
        out["missing"] = len(set(ids) - listed)
        out["unexpected"] = out["renew"]["refused"] + out["read"]["refused"] + out["missing"]
        out["rss_end_kb"] = agents.rss_kb(0)
    finally:
        for conn in conns:
            conn.close()
        await agents.stop()


# -- removal after kill -9 ---------------------------------------------------------------

HOLDER_SHOAL = r"""
import http.client, json, sys, time
host, key, ttl = sys.argv[1], sys.argv[2], float(sys.argv[3])
conn = http.client.HTTPConnection(host, 7947, timeout=10)
def call(method, path, body=None, keepalive=False):
    if keepalive:
        print("keepalive", repr(time.monotonic()), flush=True)
    conn.request(method, path, body=body)
    answer = conn.getresponse()
    data = answer.read()
    if answer.status != 200:
        sys.exit(f"holder: {method} {path}: {answer.status} {data[:200]!r}")
    return json.loads(data)
opened = call("POST", "/v1/session", json.dumps({"ttl_s": ttl, "name": "bench-holder"}).encode(),
              keepalive=True)
sid = opened["id"]
print("negotiated", opened["ttl_s"] * 1000, flush=True)
call("PUT", f"/v1/kv/{key}?session={sid}", b"holder")
print("ready", flush=True)
due = time.monotonic()
while True:
    due += ttl / 3
    time.sleep(max(0.0, due - time.monotonic()))
    call("PUT", f"/v1/session/{sid}/renew", keepalive=True)
"""

HOLDER_ZK = r"""
import logging, sys, time
from kazoo.client import KazooClient
from kazoo.loggingsupport import BLATHER
hosts, path, ttl = sys.argv[1], sys.argv[2], float(sys.argv[3])

class Stamps(logging.Handler):
    # Every request kazoo writes (pings included) keeps the session alive.
    def emit(self, record):
        if record.msg.startswith("Sending request"):
            print("keepalive", repr(time.monotonic()), flush=True)
        elif record.msg.startswith("Session created"):
            print("negotiated", record.args[2], flush=True)

log = logging.getLogger("bench-holder")
log.setLevel(BLATHER)
log.propagate = False
log.addHandler(Stamps())
zk = KazooClient(hosts=hosts, timeout=ttl, logger=log)
zk.start(timeout=30)
zk.create(path, b"holder", ephemeral=True)
print("ready", flush=True)
sys.stdin.read()
"""


HOLDER_LOG = r"""
import sys, threading, time
from shoal.client import Client
from shoal.client.session import Session
host, key, kv_key, ttl = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
lock = threading.Lock()
def say(*words):
    with lock:  # the keepalive thread and this one
        sys.stdout.write(" ".join(str(w) for w in words) + "\n")
        sys.stdout.flush()

class Stamped(Session):
    # The client library's own keepalive (renewals every ttl/3, retries
    # within the TTL), each renewal stamped before it is sent and on its answer.
    def _renew(self):
        say("keepalive", repr(time.monotonic()))
        try:
            super()._renew()
        except Exception as exc:
            why = " ".join(str(getattr(exc, "message", exc)).split())[:160]
            say("failed", repr(time.monotonic()), type(exc).__name__ + ":", why)
            raise
        say("renewed", repr(time.monotonic()))

def lost(s):
    say("lost", repr(time.monotonic()), s.reason.replace("\n", " ")[:200])

client = Client(host, token="", timeout=5)
say("keepalive", repr(time.monotonic()))
s = Stamped(client, ttl, "bench-holder", (), lost)
say("session", s.id)
say("negotiated", s.ttl_s * 1000)
s.meta_put(key, "holder")
if kv_key != "-":
    s.put(kv_key, "holder")
say("ready")
sys.stdin.readline()
s.close()
say("closed")
"""

HOLDER_ZK_MOVE = r"""
import logging, sys, threading, time
from kazoo.client import KazooClient
from kazoo.loggingsupport import BLATHER
hosts, path, ttl = sys.argv[1], sys.argv[2], float(sys.argv[3])
lock = threading.Lock()
def say(*words):
    with lock:
        sys.stdout.write(" ".join(str(w) for w in words) + "\n")
        sys.stdout.flush()

class Stamps(logging.Handler):
    def emit(self, record):
        if record.msg.startswith("Sending request"):  # any request keeps the session alive
            say("keepalive", repr(time.monotonic()))
        elif record.msg.startswith("Connecting to"):
            say("server", record.args[1])
        elif record.msg.startswith("Session created"):
            say("session", format(record.args[0], "x"))
            say("negotiated", record.args[2])

def changed(state):  # kazoo's state listener: CONNECTED, SUSPENDED, LOST
    now = time.monotonic()
    say("lost" if state == "LOST" else state.lower(), repr(now))

log = logging.getLogger("bench-holder")
log.setLevel(BLATHER)
log.propagate = False
log.addHandler(Stamps())
zk = KazooClient(hosts=hosts, timeout=ttl, logger=log, randomize_hosts=False)
zk.add_listener(changed)
zk.start(timeout=30)
zk.create(path, b"holder", ephemeral=True)
say("ready")
sys.stdin.readline()
zk.stop()
zk.close()
say("closed")
"""


class Holder:
    """One holder process: its keepalive stamps, "ready", the negotiated timeout."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self.keepalives: list[float] = []
        self.negotiated_ms: float | None = None
        self.sessions: list[str] = []  # the session id, each time the holder names one
        self.servers: list[str] = []  # HOLDER_ZK_MOVE: each server kazoo connects to
        self.stamps: dict[str, list[float]] = {}  # renewed, failed, connected, suspended, lost
        self.lost_reason = ""
        self.failures: list[tuple[float, str]] = []  # failed renewals: when, why
        self.changed = asyncio.Event()
        self.ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.task = asyncio.create_task(self._read())

    async def _read(self) -> None:
        assert self.proc.stdout is not None
        async for raw in self.proc.stdout:
            word, _, rest = raw.decode().strip().partition(" ")
            if word == "keepalive":
                self.keepalives.append(float(rest))
            elif word == "negotiated":
                self.negotiated_ms = float(rest)
            elif word == "session":
                self.sessions.append(rest)
            elif word == "server":
                self.servers.append(rest)
            elif word in ("renewed", "failed", "connected", "suspended", "lost"):
                stamp, _, why = rest.partition(" ")
                self.stamps.setdefault(word, []).append(float(stamp))
                if word == "lost":
                    self.lost_reason = why
                elif word == "failed":
                    self.failures.append((float(stamp), why))
            elif word == "ready" and not self.ready.done():
                self.ready.set_result(None)
            self.changed.set()
        if not self.ready.done():
            self.ready.set_exception(RuntimeError("the holder ended before it was ready"))
        self.changed.set()

    def first(self, word: str, after: float) -> float | None:
        """The first `word` stamp after `after`."""
        return min((t for t in self.stamps.get(word, ()) if t > after), default=None)

    async def until(self, word: str, after: float, timeout_s: float) -> float | None:
        """Wait for the first `word` stamp after `after` (None: none in time,
        or the holder ended)."""
        deadline = time.monotonic() + timeout_s
        while (found := self.first(word, after)) is None:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or self.task.done():
                return None
            self.changed.clear()
            try:
                await asyncio.wait_for(self.changed.wait(), remaining)
            except TimeoutError:
                pass
        return found

    async def close(self) -> None:
        """Tell the holder to close its session (its keys go now) and exit."""
        if self.proc.returncode is None and self.proc.stdin is not None:
            self.proc.stdin.write(b"close\n")
            try:
                await asyncio.wait_for(self.proc.wait(), 15)
            except TimeoutError:
                self.proc.kill()
        await self.kill()

    def last_keepalive(self, before: float) -> float | None:
        return max((k for k in self.keepalives if k <= before), default=None)

    async def kill(self) -> float:
        """kill -9; the time just before the signal."""
        at = time.monotonic()
        if self.proc.returncode is None:
            self.proc.kill()
        await self.proc.wait()
        await self.task
        return at


async def spawn_holder(root: Path, code: str, *argv: str) -> Holder:
    with open(root / "holders.log", "ab") as log:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-c", code, *argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=log, cwd=watch.ROOT)  # fmt: skip
    return Holder(proc)


class KvStream(watch.WatchStream):
    """A /v1/watch stream of kv events under KEY_PREFIX: when each key was
    first put and first deleted, stamped on arrival."""

    def __init__(self, host: str) -> None:
        super().__init__(host, f"topics=kv&prefix={KEY_PREFIX}")
        self.put_at: dict[str, float] = {}
        self.deleted_at: dict[str, float] = {}
        self.changed = asyncio.Event()

    def on_event(self, event: dict[str, Any], now: float) -> None:
        if event.get("topic") == "kv":
            seen = self.deleted_at if event.get("type") == "delete" else self.put_at
            seen.setdefault(event["key"], now)
            self.changed.set()

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.ready.done():
            self.ready.set_exception(RuntimeError(self.failure()))
        self.changed.set()

    async def until(self, seen: dict[str, float], key: str, timeout_s: float) -> float | None:
        deadline = time.monotonic() + timeout_s
        while key not in seen:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or self.transport is None or self.transport.is_closing():
                return None
            self.changed.clear()
            try:
                await asyncio.wait_for(self.changed.wait(), remaining)
            except TimeoutError:
                pass
        return seen[key]


class MetaStream(KvStream):
    """A metadata-log watch (`GET /v1/meta/?prefix=...&watch=1`) under
    KEY_PREFIX: when each key was first put and first deleted, stamped on
    arrival."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        transport.write(f"GET /v1/meta/?prefix={KEY_PREFIX}&watch=1 HTTP/1.1\r\n"  # type: ignore[attr-defined]
                        f"host: {self.host}\r\n\r\n".encode())  # fmt: skip

    def on_event(self, event: dict[str, Any], now: float) -> None:
        if event.get("type") == "changes":
            for change in event.get("events", ()):
                seen = self.deleted_at if change.get("type") == "delete" else self.put_at
                seen.setdefault(change["key"], now)
            self.changed.set()


async def open_stream(kind: type[KvStream], host: str) -> KvStream:
    """A kv or metadata watch on the agent at `host`, once it said hello."""
    loop = asyncio.get_running_loop()
    _, stream = await loop.create_connection(lambda: kind(host), host, 7947)
    await asyncio.wait_for(stream.ready, 10)
    return stream


def kill_delays(rounds: int, ttl_s: float) -> list[float]:
    rng = random.Random(SEED)
    return [1.0 + rng.uniform(0, ttl_s / 3) for _ in range(rounds)]


def one_round(kill_at: float, holder: Holder, deleted_at: float | None) -> dict[str, Any]:
    last = holder.last_keepalive(kill_at)
    if deleted_at is None:
        return {"lost": True}
    return {"from_kill": deleted_at - kill_at,
            "from_keepalive": None if last is None else deleted_at - last,
            "kill_after_keepalive": None if last is None else kill_at - last}  # fmt: skip


async def removal_shoal(args: argparse.Namespace, root: Path, out: dict[str, Any],
                        log: bool = False) -> None:  # fmt: skip
    """The holder on agent 0, the watch on agent 2. `log`: agents of the
    metadata log; the holder (the client library) registers a metadata key
    and the watch is a metadata watch. Else: the agent's own sessions, a kv key."""
    agents = Agents(root, 3, meta=log)
    stream: KvStream | None = None
    holder: Holder | None = None
    rounds: list[dict[str, Any]] = []
    try:
        await agents.start()
        if log:
            out["controller"] = await agents.controller()
        stream = await open_stream(MetaStream if log else KvStream, agents.ips[2])
        for r, delay in enumerate(kill_delays(args.rounds, args.ttl)):
            key = f"{KEY_PREFIX}holder-{r}"
            if log:
                holder = await spawn_holder(root, HOLDER_LOG, f"{agents.ips[0]}:7947", key, "-",
                                            f"{args.ttl:g}")  # fmt: skip
            else:
                holder = await spawn_holder(root, HOLDER_SHOAL, agents.ips[0], key,
                                            f"{args.ttl:g}")  # fmt: skip
            await asyncio.wait_for(holder.ready, 30)
            assert await stream.until(stream.put_at, key, 10) is not None, "no put on agent 2"
            await asyncio.sleep(delay)
            kill_at = await holder.kill()
            deleted = await stream.until(stream.deleted_at, key, 3 * args.ttl + 10)
            rounds.append(
                one_round(kill_at, holder, deleted) | {"negotiated_ms": holder.negotiated_ms}
            )
            holder = None
    finally:
        if holder is not None:
            await holder.kill()
        if stream is not None:
            stream.close()
        await agents.stop()
        out["rounds"] = rounds


async def removal_zk(args: argparse.Namespace, root: Path, out: dict[str, Any]) -> None:
    zk = ZooKeeper(root)
    watcher: Any = None
    holder: Holder | None = None
    rounds: list[dict[str, Any]] = []
    try:
        try:
            await zk.start()
        except watch.Skip as exc:
            out["skipped"] = str(exc)
            return
        from kazoo.client import KazooClient

        out["leader"] = await zk.leader()
        await asyncio.to_thread(zk.client.ensure_path, ZPARENT)
        watcher = KazooClient(hosts=f"{zk.ips[2]}:2181", timeout=10.0)
        await asyncio.to_thread(watcher.start, 30)
        loop = asyncio.get_running_loop()
        for r, delay in enumerate(kill_delays(args.rounds, args.ttl)):
            path = f"{ZPARENT}/holder-{r}"
            holder = await spawn_holder(root, HOLDER_ZK, f"{zk.ips[0]}:2181", path,
                                        f"{args.ttl:g}")  # fmt: skip
            await asyncio.wait_for(holder.ready, 30)
            gone: asyncio.Future[tuple[str, float]] = loop.create_future()

            def fired(event: Any, gone: asyncio.Future[tuple[str, float]] = gone) -> None:
                now = time.monotonic()  # in kazoo's callback thread, at once
                loop.call_soon_threadsafe(gone.set_result, (event.type, now))

            async def visible(path: str = path) -> bool:
                return await asyncio.to_thread(watcher.exists, path) is not None

            await watch.poll(visible, 10, f"{path} on server 2")
            stat = await asyncio.to_thread(watcher.exists, path, fired)
            assert stat is not None, f"{path} went before the kill"
            await asyncio.sleep(delay)
            kill_at = await holder.kill()
            try:
                kind, deleted_at = await asyncio.wait_for(gone, 3 * args.ttl + 10)
            except TimeoutError:
                kind, deleted_at = "none", None
            assert kind in ("DELETED", "none"), kind
            rounds.append(
                one_round(kill_at, holder, deleted_at) | {"negotiated_ms": holder.negotiated_ms}
            )
            holder = None
    finally:
        if holder is not None:
            await holder.kill()
        if watcher is not None:
            watcher.stop()
            watcher.close()
        await zk.stop()
        out["rounds"] = rounds


# -- restart of the holder's agent (shoal) or server (ZooKeeper) --------------------------

KINDS = ("SIGTERM", "kill -9")


def restart_plan(rounds: int, ttl_s: float) -> list[tuple[str, int, float]]:
    """(kind, round, delay after ready): each kind `rounds` times, seeded."""
    delays = kill_delays(2 * rounds, ttl_s)
    return [(how, r, delays[k * rounds + r]) for k, how in enumerate(KINDS)
            for r in range(rounds)]  # fmt: skip


async def restart_shoal(args: argparse.Namespace, root: Path, out: dict[str, Any]) -> None:
    """The holder (the client library) on agent `home`: a non-controller
    agent (--home follower) or the controller's (--home controller); the
    watches (metadata and kv) on another agent, a non-controller one. Each
    round a new holder registers a metadata key and a kv key; `home` is
    restarted under it; then a TTL and a second more for any late deletion."""
    agents = Agents(root, 3, meta=True, log_level="info")  # info: the steps of a start
    streams: list[KvStream] = []
    holder: Holder | None = None
    rounds: list[dict[str, Any]] = []
    placements: set[str] = set()
    try:
        await agents.start()
        for how, r, delay in restart_plan(args.restarts, args.ttl):
            controller = await agents.controller()
            assert controller is not None, "no controller"
            followers = [i for i in range(3) if i != controller]
            home = controller if args.home == "controller" else followers[0]
            other = followers[-1]
            placements.add(f"controller agent {controller}, holder's agent {home}, watch on "
                           f"{other}")  # fmt: skip
            streams = [await open_stream(MetaStream, agents.ips[other]),
                       await open_stream(KvStream, agents.ips[other])]  # fmt: skip
            key = f"{KEY_PREFIX}restart-{how.replace(' ', '')}-{r}"
            holder = await spawn_holder(root, HOLDER_LOG, f"{agents.ips[home]}:7947", key, key,
                                        f"{args.ttl:g}")  # fmt: skip
            await asyncio.wait_for(holder.ready, 30)
            for stream in streams:
                assert await stream.until(stream.put_at, key, 10) is not None, "no put seen"
            await asyncio.sleep(delay)
            log_at = (root / f"w{home:03d}.log").stat().st_size
            sent, exited, started = await agents.restart(home, how)
            wall_minus_mono = time.time() - time.monotonic()
            answered, knows, level = await asyncio.gather(
                first_answer(agents.ips[home], 60),
                first_answer(agents.ips[home], 60, "/v1/controller", lambda c: c["controller"]),
                first_answer(agents.ips[home], 60, "/v1/self",
                             lambda me: me["feature_level"] >= META_LOG_FEATURE))  # fmt: skip
            renewed = await holder.until("renewed", started, args.ttl + 30)
            await asyncio.sleep(args.ttl + 1.0)  # a late expiry would show by now
            sid = holder.sessions[0]
            held = await watch.get_json(agents.ips[other], 7947, f"/v1/session/{sid}")
            end = time.monotonic()
            rounds.append({
                "how": how, "to_exit": exited - sent, "to_api": answered - sent,
                "to_controller": knows - sent, "to_level": level - sent,
                "to_usable": None if renewed is None else renewed - sent,
                "margin": margin(holder, sent, renewed, args.ttl),
                "api_to_usable": None if renewed is None else renewed - answered,
                "failed": len([t for t, _ in holder.failures if t > sent]),
                "failures": [(k - sent, t - sent, why) for t, why in holder.failures
                             if t > sent and (k := holder.last_keepalive(t)) is not None],
                "lost": holder.first("lost", 0) is not None, "reason": holder.lost_reason,
                "same": held is not None and held.get("id") == sid,
                "deleted": sum(1 for st in streams if st.deleted_at.get(key, end) < end),
                "watch_ended": any(st.transport is None or st.transport.is_closing()
                                   for st in streams),
                "to_spawn": started - sent,
                **start_steps(root / f"w{home:03d}.log", log_at, sent + wall_minus_mono,
                              started + wall_minus_mono),
            })  # fmt: skip
            await holder.close()
            holder = None
            for stream in streams:
                stream.close()
            streams = []
            await watch.poll(lambda: agents.writable(agents.ips[home]), 60, "the agent back")
    finally:
        if holder is not None:
            await holder.kill()
        for stream in streams:
            stream.close()
        await agents.stop()
        out["rounds"] = rounds
        out["placement"] = "; ".join(sorted(placements))


# The steps of an agent's start, by the first line of its log (--log-level
# info) that says each: the round's key -> the line's event.
START_STEPS = {
    "to_started": "agent started",  # data directory open, sockets bound, join sent
    "to_joined": "join-completed",  # a push-pull with a member done
    "to_notice": "controller-changed",  # a controller's notice accepted
    "to_level_log": "feature-level-changed",  # the cluster's level known
}


def start_steps(log: Path, offset: int, sent_wall: float,
                started_wall: float) -> dict[str, float | None]:  # fmt: skip
    """Seconds from the signal (`sent_wall`, wall clock) to each of
    `START_STEPS`, from what the restarted agent (started at `started_wall`)
    logged after `offset`, not the stopped one's last words (None: the step
    is not in the log)."""
    from datetime import datetime

    found: dict[str, float | None] = dict.fromkeys(START_STEPS)
    with open(log, "rb") as f:
        f.seek(offset)
        for raw in f:
            try:
                line = json.loads(raw)
                at = datetime.fromisoformat(line["timestamp"].replace("Z", "+00:00")).timestamp()
            except (ValueError, KeyError, TypeError, AttributeError):
                continue
            if at < started_wall or line.get("controller") == "":
                continue  # the agent stopped, or a controller forgotten
            for key, event in START_STEPS.items():
                if found[key] is None and line.get("event") == event:
                    found[key] = at - sent_wall
    return found


def margin(holder: Holder, sent: float, usable: float | None, ttl_s: float) -> float | None:
    """How much of the TTL was left when the holder's session was usable
    again: its last keepalive sent before the signal, plus the TTL, minus
    then (below 0: the session would have expired)."""
    last = holder.last_keepalive(sent)
    return None if usable is None or last is None else last + ttl_s - usable


async def first_answer(host: str, timeout_s: float, path: str = "/v1/self",
                       ok: Callable[[Any], bool] = bool) -> float:  # fmt: skip
    """When the agent at `host` first answered `GET path` with something
    `ok` says yes to, polled every 20 ms."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            seen = await watch.get_json(host, 7947, path)
            if seen is not None and ok(seen):
                return time.monotonic()
        except (OSError, asyncio.IncompleteReadError, TimeoutError):
            pass
        await asyncio.sleep(0.02)  # polling a starting agent
    raise TimeoutError(f"bench: the agent at {host} did not answer {path} within "
                       f"{timeout_s:.0f} s")  # fmt: skip


class ZnodeWatch:
    """A kazoo DataWatch on one path: when it was deleted, each time."""

    def __init__(self, client: Any, path: str) -> None:
        self.deleted: list[float] = []
        self.present = False
        self.done = False
        loop = asyncio.get_running_loop()

        def changed(data: Any, stat: Any, event: Any = None) -> bool:
            now = time.monotonic()  # in kazoo's callback thread, at once
            if data is None and self.present:
                loop.call_soon_threadsafe(self.deleted.append, now)
            self.present = data is not None
            return not self.done  # False: stop watching

        client.DataWatch(path, changed)


async def restart_zk(args: argparse.Namespace, root: Path, out: dict[str, Any]) -> None:
    """The holder (kazoo, the hosts of all three servers, its home first)
    on a follower (--home follower; the watch on the leader) or on the
    leader (--home controller; the watch on a follower). Each round a new
    holder creates an ephemeral znode; its server is restarted under it
    (kazoo moves to the next server); then a TTL and a second more."""
    zk = ZooKeeper(root)
    watcher: Any = None
    holder: Holder | None = None
    rounds: list[dict[str, Any]] = []
    placements: set[str] = set()
    try:
        try:
            await zk.start()
        except watch.Skip as exc:
            out["skipped"] = str(exc)
            return
        from kazoo.client import KazooClient

        await asyncio.to_thread(zk.client.ensure_path, ZPARENT)
        for how, r, delay in restart_plan(args.restarts, args.ttl):
            leader = await zk.leader()
            assert leader is not None, "no ZooKeeper leader"
            followers = [i for i in range(3) if i != leader]
            if args.home == "controller":
                home, next_, seer = leader, followers[r % 2], followers[1 - r % 2]
            else:
                home, next_, seer = followers[r % 2], followers[1 - r % 2], leader
            placements.add(f"leader server {leader}, holder's server {home}, watch on {seer}")
            watcher = KazooClient(hosts=f"{zk.ips[seer]}:2181", timeout=10.0)
            await asyncio.to_thread(watcher.start, 30)
            hosts = ",".join(f"{zk.ips[i]}:2181" for i in (home, next_, seer))
            path = f"{ZPARENT}/restart-{how.replace(' ', '')}-{r}"
            holder = await spawn_holder(root, HOLDER_ZK_MOVE, hosts, path, f"{args.ttl:g}")
            await asyncio.wait_for(holder.ready, 30)
            assert holder.servers[-1] == zk.ips[home], holder.servers
            znode = ZnodeWatch(watcher, path)

            async def visible(path: str = path) -> bool:
                return await asyncio.to_thread(watcher.exists, path) is not None

            await watch.poll(visible, 10, f"{path} on server {seer}")
            await asyncio.sleep(delay)
            sent, exited, started = await zk.restart(home, how)
            connected = await holder.until("connected", sent, args.ttl + 30)
            suspended = holder.first("suspended", sent)
            await asyncio.sleep(args.ttl + 1.0)  # a late expiry would show by now
            there = await visible()
            end = time.monotonic()
            znode.done = True
            rounds.append({
                "how": how, "to_exit": exited - sent,
                "to_usable": None if connected is None else connected - sent,
                "margin": margin(holder, sent, connected, args.ttl),
                "suspended_to_connected": (None if connected is None or suspended is None
                                           else connected - suspended),
                "moved_to": holder.servers[-1] if len(holder.servers) > 1 else None,
                "lost": holder.first("lost", 0) is not None,
                "same": there and len(set(holder.sessions)) == 1,
                "deleted": len([t for t in znode.deleted if t < end]),
            })  # fmt: skip
            await holder.close()
            holder = None
            watcher.stop()
            watcher.close()
            watcher = None

            async def back(i: int = home) -> bool:
                return await zk.mode(i) in ("follower", "leader")

            await watch.poll(back, 60, f"ZooKeeper server {home} back in the quorum")
    finally:
        if holder is not None:
            await holder.kill()
        if watcher is not None:
            watcher.stop()
            watcher.close()
        await zk.stop()
        out["rounds"] = rounds
        out["placement"] = "; ".join(sorted(placements))


# -- report ------------------------------------------------------------------------------


def fmt(v: object, digits: int = 1) -> str:
    if isinstance(v, float):
        return f"{v:.{digits}f}"
    return "-" if v is None else str(v)


def versions() -> str:
    def first_line(cmd: list[str], stderr: bool = False) -> str:
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=10)
        except OSError:
            return "not installed"
        out = done.stderr if stderr else done.stdout
        return out.splitlines()[0] if out.strip() else "not installed"

    try:
        import kazoo

        kz = kazoo.__version__
    except ImportError:
        kz = "not installed"
    rev = first_line(["git", "-C", str(watch.ROOT), "rev-parse", "--short", "HEAD"])
    dirty = first_line(["git", "-C", str(watch.ROOT), "status", "--porcelain",
                        "--untracked-files=no"])  # fmt: skip
    where = f"{watch.ROOT} at {rev}" + (" (with uncommitted edits)" if dirty != "not installed"
                                        else "")  # fmt: skip
    if not (watch.ROOT / ".git").exists():
        where = f"{watch.ROOT} (an export, not a checkout)"
    return (f"shoal from {where}; ZooKeeper "
            f"{first_line(['dpkg-query', '-W', '-f', '${Version}', 'zookeeper'])}; kazoo {kz}; "
            f"{first_line(['java', '-version'], stderr=True)}")  # fmt: skip


def report_capacity(args: argparse.Namespace, c: dict[str, Any]) -> None:
    n = args.sessions
    print(f"\n== capacity: {n} sessions (ttl {CAPACITY_TTL_S:.0f} s) on one agent, opened over "
          f"{args.connections} keep-alive connections")  # fmt: skip
    if "renew" not in c:
        print("  (did not finish)")
        return
    renew, read = c["renew"], c["read"]
    rows = [
        ("opening them (s)", fmt(c["open_s"], 2)),
        ("opened per second", fmt(c["open_rate"], 0)),
        ("agent CPU per open (us)", fmt(c["open_cpu_us"], 0)),
        ("agent RSS before (MiB)", fmt(c["rss_before_kb"] / 1024)),
        ("agent RSS with them open (MiB)", fmt(c["rss_open_kb"] / 1024)),
        ("RSS per session (KiB)", fmt(c["rss_per_session_kib"], 2)),
        (f"agent CPU idle, no session ({args.idle_s:.0f} s) (% of a core)",
         fmt(c["idle_cpu_pct"], 2)),
        (f"renewals: each every {CAPACITY_TTL_S / 3:.0f} s, {args.renew_s:.0f} s; rate (/s)",
         fmt(renew["rate"], 0)),
        ("  agent CPU (% of a core)", fmt(renew["cpu_pct"], 1)),
        ("  agent CPU per renewal (us)", fmt(renew["cpu_us"], 0)),
        ("  renewal round trip p50 / p99 (ms)",
         f"{fmt(renew['latency_p50_ms'], 2)} / {fmt(renew['latency_p99_ms'], 2)}"),
        ("  sent late vs schedule p99 / max (ms)",
         f"{fmt(renew['late_p99_ms'], 1)} / {fmt(renew['late_max_ms'], 1)}"),
        ("  this process's CPU (% of a core)", fmt(renew["own_cpu_pct"], 1)),
        ("  agent RSS after the renewals (MiB)", fmt(c["rss_renewed_kb"] / 1024)),
        (f"control: open, no renewal ({args.quiet_s:.0f} s) (% of a core)",
         fmt(c["quiet_cpu_pct"], 2)),
        (f"control: GET /v1/session/<id> at the same rate ({args.read_s:.0f} s); rate (/s)",
         fmt(read["rate"], 0)),
        ("  agent CPU (% of a core)", fmt(read["cpu_pct"], 1)),
        ("  agent CPU per request (us)", fmt(read["cpu_us"], 0)),
        ("  round trip p50 / p99 (ms)",
         f"{fmt(read['latency_p50_ms'], 2)} / {fmt(read['latency_p99_ms'], 2)}"),
        ("renewal's own cost over a GET (us)", fmt(renew["cpu_us"] - read["cpu_us"], 0)),
        ("agent RSS at the end (MiB)", fmt(c["rss_end_kb"] / 1024)),
        ("sessions expired unexpectedly (should be 0)", str(c["unexpected"])),
    ]  # fmt: skip
    for label, value in rows:
        print(f"  {label:66} {value:>14}")
    for phase in ("renew", "read"):
        if c[phase]["refused_first"]:
            print(f"  note: first refused {phase}: {c[phase]['refused_first'][0]}")


REMOVAL_SYSTEMS = {"shoal": "the agent's own sessions (daemon/sessions.py), a kv key, kv watch",
                   "shoal-log": "sessions in the metadata log (--meta agents), a metadata key, "
                   "metadata watch",
                   "zk": "ZooKeeper, an ephemeral znode, exists-watch"}  # fmt: skip


def ratio(a: float | None, b: float | None) -> str:
    return f"{a / b:.2f}" if a is not None and b else "-"


def report_removal(args: argparse.Namespace, results: dict[str, dict[str, Any]]) -> None:
    t = args.ttl
    print(f"\n== removal: kill -9 of the holder -> the deletion on a watch on another member; "
          f"ttl {t:g} s, {args.rounds} rounds each; kill 1 s + [0, {t / 3:.2f}) s after "
          "'ready' (seeded)")  # fmt: skip
    systems = [s for s in REMOVAL_SYSTEMS if results.get(s, {}).get("rounds")]
    for s in REMOVAL_SYSTEMS:
        if "skipped" in results.get(s, {}):
            print(f"  note: {s} skipped: {results[s]['skipped']}")
    for s in systems:
        print(f"  {s}: {REMOVAL_SYSTEMS[s]}")
    if "leader" in results.get("zk", {}):
        print(f"  note: ZooKeeper leader is server {results['zk']['leader']} (holder on server 0,"
              " watcher on server 2)")  # fmt: skip
    if "controller" in results.get("shoal-log", {}):
        controller = results["shoal-log"]["controller"]
        print(f"  note: shoal-log's controller is agent {controller} (holder "
              "on agent 0, watch on agent 2; shoal's the same)")  # fmt: skip
    for s in systems:
        negotiated = {r.get("negotiated_ms") for r in results[s]["rounds"]}
        print(f"  note: {s} session timeout the holder got (ms): "
              f"{', '.join(fmt(v, 0) for v in sorted(negotiated, key=str))}")  # fmt: skip
    if not systems:
        return

    def column(s: str, key: str) -> list[float]:
        return [r[key] for r in results[s]["rounds"] if r.get(key) is not None]

    rows = [("from_kill", "kill -> deletion seen"),
            ("from_keepalive", "last keepalive sent -> deletion seen"),
            ("kill_after_keepalive", "(last keepalive -> kill)")]  # fmt: skip
    pairs = [(s, "zk") for s in ("shoal", "shoal-log") if s in systems and "zk" in systems]
    head = "".join(f" {s + ' p50':>13} {s + ' max':>13}" for s in systems)
    head += "".join(f" {a + '/' + b + ' p50':>16} {a + '/' + b + ' max':>16}" for a, b in pairs)
    print(f"  {'figure (s)':38}" + head)
    for key, label in rows:
        line = f"  {label:38}"
        stats = {}
        for s in systems:
            values = column(s, key)
            stats[s] = (pct(values, 0.5), max(values, default=None))
            line += f" {fmt(stats[s][0], 3):>13} {fmt(stats[s][1], 3):>13}"
        for a, b in pairs:
            line += "".join(f" {ratio(stats[a][i], stats[b][i]):>16}" for i in (0, 1))
        print(line)
    for s in systems:
        lost = sum(1 for r in results[s]["rounds"] if r.get("lost"))
        each = " ".join(fmt(v, 3) for v in column(s, "from_kill"))
        print(f"  {s}: kill -> deletion per round (s): {each}; never seen: {lost}")


def report_restart(args: argparse.Namespace, results: dict[str, dict[str, Any]]) -> None:
    t = args.ttl
    print(f"\n== restart: the holder's agent (shoal, sessions in the metadata log) or server "
          f"(ZooKeeper; kazoo moves to the next), a {args.home}'s, restarted under a live "
          f"holder; ttl {t:g} s, "
          f"{args.restarts} rounds per kind each; signal 1 s + [0, {t / 3:.2f}) s after 'ready' "
          f"(seeded); then watched for a TTL + 1 s")  # fmt: skip
    for s in ("shoal", "zk"):
        if "skipped" in results.get(s, {}):
            print(f"  note: {s} skipped: {results[s]['skipped']}")
        if "placement" in results.get(s, {}):
            print(f"  note: {s}: {results[s]['placement']}")
    systems = [s for s in ("shoal", "zk") if results.get(s, {}).get("rounds")]
    if not systems:
        return
    rows: list[tuple[str, str, str]] = [
        ("deleted", "deletions seen by the watch (must be 0)", "sum"),
        ("lost", "sessions lost (must be 0)", "sum"),
        ("same", "the same session after (of rounds)", "sum"),
        ("to_exit", "signal -> process exited, p50 / max (s)", "p50/max"),
        ("to_spawn", "signal -> started again (s)", "p50/max"),
        ("to_started", "signal -> log: agent started (bound, join sent) (s)", "p50/max"),
        ("to_api", "signal -> restarted agent's API answers (s)", "p50/max"),
        ("to_joined", "signal -> log: join completed (push-pull) (s)", "p50/max"),
        ("to_notice", "signal -> log: controller's notice accepted (s)", "p50/max"),
        ("to_level_log", "signal -> log: feature level known (s)", "p50/max"),
        ("to_controller", "signal -> it names the controller (s)", "p50/max"),
        ("to_level", f"signal -> its feature level is {META_LOG_FEATURE} (s)", "p50/max"),
        ("to_usable", "signal -> renewal answered / kazoo CONNECTED (s)", "ratio"),
        ("api_to_usable", "  API answers -> renewal answered (s)", "p50/max"),
        ("margin", "  TTL left then (last keepalive + TTL - then) (s)", "min/p50"),
        ("suspended_to_connected", "kazoo SUSPENDED -> CONNECTED (s)", "p50/max"),
        ("failed", "holder's renewals that failed meanwhile (total)", "total"),
    ]  # fmt: skip
    both = len(systems) == 2
    head = "".join(f" {s + ' ' + how.split()[-1]:>16}" for how in KINDS for s in systems)
    print(f"  {'figure':52}" + head + ("".join(f" {'ratio ' + how.split()[-1]:>12}"
                                               for how in KINDS) if both else ""))  # fmt: skip
    for key, label, agg in rows:
        line = f"  {label:52}"
        p50s: dict[tuple[str, str], float | None] = {}
        for how in KINDS:
            for s in systems:
                mine = [r for r in results[s]["rounds"] if r["how"] == how]
                values = [r[key] for r in mine if r.get(key) is not None]
                if not mine or key not in mine[0]:
                    cell = "-"
                elif agg == "sum":
                    cell = f"{sum(int(v) for v in values)}/{len(mine)}"
                elif agg == "total":
                    cell = str(sum(values))
                elif agg == "min/p50":
                    cell = f"{fmt(min(values, default=None), 2)} / {fmt(pct(values, 0.5), 2)}"
                else:
                    p50s[s, how] = pct(values, 0.5)
                    cell = f"{fmt(p50s[s, how], 2)} / {fmt(max(values, default=None), 2)}"
                line += f" {cell:>16}"
        if both and agg == "ratio":
            line += "".join(f" {ratio(p50s.get(('shoal', h)), p50s.get(('zk', h))):>12}"
                            for h in KINDS)  # fmt: skip
        print(line)
    for r in results.get("shoal", {}).get("rounds", ()):
        if r.get("lost"):
            print(f"  note: shoal, {r['how']}: the holder's session was lost: {r['reason']}")
        if r.get("watch_ended"):
            print(f"  note: shoal, {r['how']}: a watch ended during the round: its deletions "
                  "are not all counted")  # fmt: skip
    for how in KINDS:  # what the holder's failed renewals were told, in the first round
        first = next((r for r in results.get("shoal", {}).get("rounds", ()) if r["how"] == how),
                     None)  # fmt: skip
        for asked, after, why in (first or {}).get("failures", ()):
            print(f"  note: shoal, {how}, round 0: a renewal sent {asked:.2f} s after the "
                  f"signal failed at {after:.2f} s: {why}")  # fmt: skip
    if both:
        election = ", once the others elect a leader" if args.home == "controller" else ""
        print("  ratio: shoal/zk of the p50s (signal -> usable: a shoal agent restarts, where "
              f"kazoo moves to a server that is up{election})")  # fmt: skip


async def run(args: argparse.Namespace) -> None:
    capacity: dict[str, Any] = {}
    removal: dict[str, dict[str, Any]] = {"shoal": {}, "shoal-log": {}, "zk": {}}
    restart: dict[str, dict[str, Any]] = {"shoal": {}, "zk": {}}
    steps: list[tuple[str, Any, dict[str, Any]]] = []
    only = set(args.only)
    if args.sessions and "capacity" in only:
        steps.append(("capacity", run_capacity, capacity))
    if args.rounds and "removal" in only:
        steps.append(("removal, shoal", removal_shoal, removal["shoal"]))
    if args.rounds and "removal-log" in only:
        steps.append(("removal, shoal-log", partial(removal_shoal, log=True), removal["shoal-log"]))
    if args.rounds and not args.skip_zk and only & {"removal", "removal-log"}:
        steps.append(("removal, ZooKeeper", removal_zk, removal["zk"]))
    if args.restarts and "restart" in only:
        steps.append(("restart, shoal", restart_shoal, restart["shoal"]))
        if not args.skip_zk:
            steps.append(("restart, ZooKeeper", restart_zk, restart["zk"]))
    try:
        for name, step, out in steps:
            print(f"running {name} ...", file=sys.stderr, flush=True)
            root = Path(tempfile.mkdtemp(prefix="shoal-bench-sessions-", dir="/var/tmp"))
            try:
                await step(args, root, out)
            finally:
                shutil.rmtree(root, ignore_errors=True)
    finally:
        print(f"\nconfiguration: {os.cpu_count()} cores, Python {sys.version.split()[0]}, "
              f"load average at start {args.loadavg}; {versions()}; shoal agents: profile local, "
              f"no discovery, on {SHOAL_NET}.x; ZooKeeper: 3 servers on {ZK_NET}.x, tickTime "
              "2000 ms; data on /var/tmp")  # fmt: skip
        if capacity or any(name == "capacity" for name, _, _ in steps):
            report_capacity(args, capacity)
        if any(name.startswith("removal") for name, _, _ in steps):
            report_removal(args, removal)
        if any(name.startswith("restart") for name, _, _ in steps):
            report_restart(args, restart)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sessions", type=int, default=10_000, help="on one agent (0: skip)")
    parser.add_argument("--connections", type=int, default=4, help="for opening and renewing")
    parser.add_argument("--renew-s", type=float, default=30.0, help="renewing them, measured")
    parser.add_argument("--idle-s", type=float, default=30.0, help="the idle agent, measured")
    parser.add_argument("--rounds", type=int, default=10, help="kill -9 rounds per system")
    parser.add_argument("--restarts", type=int, default=4,
                        help="restart rounds per kind (SIGTERM, kill -9) per system")  # fmt: skip
    parser.add_argument("--ttl", type=float, default=4.0, help="the holder's session (s)")
    parser.add_argument("--home", choices=("follower", "controller"), default="follower",
                        help="restart: the holder's agent/server is a non-controller (a "
                        "follower), or the controller's (the leader)")  # fmt: skip
    parser.add_argument("--only", nargs="+", default=list(SECTIONS), choices=SECTIONS,
                        metavar="SECTION", help=", ".join(SECTIONS))  # fmt: skip
    parser.add_argument("--skip-zk", action="store_true")
    parser.add_argument("--quick", action="store_true", help="small numbers, a smoke run")
    args = parser.parse_args()
    args.quiet_s, args.read_s = 5.0, 10.0  # both inside ttl - ttl/3 = 20 s (run_capacity)
    if args.quick:
        args.sessions, args.rounds = min(args.sessions, 1000), min(args.rounds, 3)
        args.restarts = min(args.restarts, 2)
        args.renew_s, args.idle_s, args.quiet_s, args.read_s = 10.0, 5.0, 3.0, 5.0
    logging.getLogger("kazoo").setLevel(logging.CRITICAL)
    args.loadavg = " ".join(Path("/proc/loadavg").read_text().split()[:3])
    try:
        import uvloop
    except ImportError:
        asyncio.run(run(args))
    else:
        uvloop.run(run(args))


if __name__ == "__main__":
    main()
