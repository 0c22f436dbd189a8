#!/usr/bin/env python3
"""User events and queries (issue 29): shoal against Serf on loopback, in the same run.

N agents of each system (default 20), one system at a time so they never
share the CPU, both on the LAN timing profile (probe 1 s, gossip 0.2 s),
every agent with the same three handlers:

  user:bench  reports (its node name, the payload) to a UDP port of this
              bench; the arrival is stamped here with time.monotonic();
  user:big    the same, with the length of the payload it read (so a
              64 KiB event counts only when all of it arrived);
  query:bench answers "NODE:PAYLOAD" (sh builtins only).

The user-event handlers are `bash --norc -c '... >/dev/udp/127.0.0.1/PORT'`:
a handler that writes a file would have to be read back with its own clock
stamp; a datagram is stamped when it arrives, on one monotonic clock, and
costs a bash start (~2 ms) on top of what the agent itself does. Both
agents start handlers through /bin/sh -c with the payload on stdin.
`--norc` matters: shoal's handlers get a socket as stdin (uvloop's
subprocess pipes are socketpairs; Serf's are pipes), and `bash -c` with a
socket on stdin and no SHLVL in its environment takes itself to be run by
rshd and reads /etc/bash.bashrc and ~/.bashrc (on a host whose .bashrc runs
`pyenv init`, 3 s and more per handler under load).

Sections:

  event   --events (50) events, one at a time, each sent to agent 0 once the
          previous one reached all N handlers (or 15 s passed): from just
          before the send (shoal: the POST /v1/event/bench request is
          written; Serf: `serf event -coalesce=false` is spawned) until the
          LAST of the N handlers reported it; p50, p99 (with 50 events, the
          worst), max; and every (event, agent) pair. Payload 64 B (Serf's
          limit is 512 B for name and payload). Two warm-up events first,
          not counted. Goal (issue 29): shoal's p99 below Serf's p50.
  big     shoal: 64 KiB events to all N: seconds until the last handler read
          all 65,536 bytes. Serf: what `serf event` says to a 64 KiB payload.
  query   --queries (20) queries, one at a time, to all N with the echo
          handler: until the API call (shoal: POST /v1/query/bench?timeout=10)
          or the command (`serf query bench PAYLOAD`, its default timeout)
          returns; p50, max; responses counted. For Serf also when its
          N-th "Response from" line reached this process through a pipe.
          Goal: under 0.5 s.

Prints the configuration (versions, N, payload sizes, load average) and the
figures with the ratio shoal/Serf.

    apt-get install serf
    .venv/bin/python bench/events.py [--agents 20] [--events 50] [--queries 20]
        [--big 5] [--skip-serf] [--quick]
"""

from __future__ import annotations

import abc
import argparse
import asyncio
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SHOAL_NET, SERF_NET = "127.29.0", "127.29.1"  # free of other benches and tests
EVENT_BYTES = 64
BIG_BYTES = 64 * 1024
QUERY_BYTES = 16
EVENT_WAIT_S = 15.0  # an event not at every handler by then is counted missing
GAP_S = 0.1  # between one event's last handler and the next send


class Skip(Exception):
    """A system that cannot run here."""


# -- handlers' reports -------------------------------------------------------------------


class Reports(asyncio.DatagramProtocol):
    """`NODE TOKEN:... [LENGTH]` datagrams from handlers, stamped on arrival."""

    def __init__(self) -> None:
        self.at: dict[str, dict[str, tuple[float, int]]] = {}
        self._changed = asyncio.Event()

    def datagram_received(self, data: bytes, addr: Any) -> None:
        now = time.monotonic()
        fields = data.decode(errors="replace").split()
        if len(fields) < 2:
            return
        token = fields[1].split(":")[0]
        length = int(fields[2]) if len(fields) > 2 and fields[2].isdigit() else -1
        self.at.setdefault(token, {}).setdefault(fields[0], (now, length))
        self._changed.set()

    async def until(self, token: str, n: int, length: int, timeout_s: float) -> bool:
        """Wait until `n` nodes reported `token` (with at least `length` bytes)."""
        deadline = time.monotonic() + timeout_s
        while self.count(token, length) < n:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            self._changed.clear()
            try:
                await asyncio.wait_for(self._changed.wait(), remaining)
            except TimeoutError:
                pass
        return True

    def count(self, token: str, length: int = -1) -> int:
        return sum(1 for _, got in self.at.get(token, {}).values() if got >= length)


def handlers(port: int) -> list[tuple[str, str]]:
    """(event, command) for both systems; $SERF_SELF_NAME is set by both."""
    udp = f"/dev/udp/127.0.0.1/{port}"
    big = 'p=$(cat); echo "$SERF_SELF_NAME ${p:0:12} ${#p}"'
    return [
        ("user:bench", f"""bash --norc -c 'read -r p; echo "$SERF_SELF_NAME $p" >{udp}'"""),
        ("user:big", f"bash --norc -c '{big} >{udp}'"),
        ("query:bench", """read -r p; printf '%s:%s' "$SERF_SELF_NAME" "$p\""""),
    ]


def payload(token: str, size: int) -> bytes:
    head = f"{token}:".encode()
    return head + b"x" * (size - len(head))


# -- HTTP, by hand -----------------------------------------------------------------------


async def http(host: str, port: int, method: str, path: str, body: bytes = b"",
               timeout_s: float = 30.0) -> tuple[int, Any]:  # fmt: skip
    """One request on a fresh connection; (status, JSON body)."""
    reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), 5)
    try:
        writer.write(f"{method} {path} HTTP/1.1\r\nhost: {host}\r\nconnection: close\r\n"
                     f"content-length: {len(body)}\r\n\r\n".encode() + body)  # fmt: skip
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout_s)
        status = int(head.split(b" ", 2)[1])
        length = re.search(rb"\r\ncontent-length:\s*(\d+)", head, re.I)
        data = await (reader.readexactly(int(length.group(1))) if length else reader.read())
    finally:
        writer.close()
    return status, json.loads(data) if data else None


async def poll(check: Any, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            if await check():
                return
        except (OSError, asyncio.IncompleteReadError, TimeoutError, ValueError):
            pass
        if time.monotonic() > deadline:
            raise TimeoutError(f"bench: no {what} within {timeout_s:.0f} s")
        await asyncio.sleep(0.2)  # polling a starting system


async def run_cmd(*args: str, stdin: bytes | None = None) -> tuple[int, str]:
    proc = await asyncio.create_subprocess_exec(
        *args, stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT)  # fmt: skip
    out, _ = await proc.communicate(stdin)
    return proc.returncode or 0, out.decode(errors="replace")


# -- the systems -------------------------------------------------------------------------


class System(abc.ABC):
    name = ""
    net = ""

    def __init__(self, root: Path, n: int, port: int) -> None:
        self.root, self.n, self.port = root, n, port
        self.ips = [f"{self.net}.{i + 1}" for i in range(n)]
        self.procs: list[subprocess.Popen[bytes]] = []

    def spawn(self, i: int, args: list[str]) -> None:
        with open(self.root / f"{i:03d}.log", "ab") as log:
            self.procs.append(subprocess.Popen(args, stdout=log, stderr=log,
                                               stdin=subprocess.DEVNULL, cwd=ROOT))  # fmt: skip

    def node(self, i: int) -> str:
        return f"{self.name[:2]}{i:03d}"

    async def start(self) -> None:
        self.spawn(0, self.command(0))
        await poll(lambda: self.sees(0, 1), 30, f"{self.name}'s first agent")
        for i in range(1, self.n):
            self.spawn(i, self.command(i))

        async def formed() -> bool:
            for i in range(self.n):
                if not await self.sees(i, self.n):
                    return False
            return True

        await poll(formed, 30 + 3 * self.n, f"{self.n} {self.name} agents seeing each other")

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
        for proc in self.procs:
            proc.wait()

    @abc.abstractmethod
    def command(self, i: int) -> list[str]:
        """The command line that starts agent i."""

    @abc.abstractmethod
    async def sees(self, i: int, n: int) -> bool:
        """Whether agent i lists n alive members."""

    @abc.abstractmethod
    async def event(self, name: str, body: bytes) -> str:
        """Send; returns an error text, or "" when the system accepted it."""

    @abc.abstractmethod
    async def query(self, body: bytes) -> dict[str, Any]:
        """Send a query; its answers and how long they took."""


class Shoal(System):
    name = "shoal"
    net = SHOAL_NET

    def command(self, i: int) -> list[str]:
        args = [sys.executable, "-m", "shoal.daemon.cli", "agent", "--node-name", self.node(i),
                "--bind", f"{self.ips[i]}:7946", "--api", f"{self.ips[i]}:7947",
                "--profile", "lan", "--data-dir", str(self.root / self.node(i)),
                "--no-discovery", "--log-level", "warning"]  # fmt: skip
        for event, command in handlers(self.port):
            args += ["--event-handler", f"{event}={command}"]
        return args + (["--join", f"{self.ips[0]}:7946"] if i else [])

    async def sees(self, i: int, n: int) -> bool:
        status, out = await http(self.ips[i], 7947, "GET", "/v1/members?status=alive", b"", 5)
        return status == 200 and len(out["members"]) >= n

    async def event(self, name: str, body: bytes) -> str:
        status, out = await http(self.ips[0], 7947, "POST", f"/v1/event/{name}", body)
        return "" if status == 200 else f"{status} {out}"

    async def query(self, body: bytes) -> dict[str, Any]:
        started = time.monotonic()
        status, out = await http(self.ips[0], 7947, "POST", "/v1/query/bench?timeout=10", body)
        took = time.monotonic() - started
        assert status == 200, out
        return {"returned_s": took, "last_response_s": None, "expected": out["expected"],
                "responses": out["answered"],
                "right": sum(1 for k, v in out["members"].items()
                             if v.get("answer") == f"{k}:{body.decode()}")}  # fmt: skip

    def version(self) -> str:
        from shoal import __version__

        head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True).stdout.strip()  # fmt: skip
        where = Path(sys.modules["shoal"].__file__ or "").parent
        return f"shoal {__version__} (imported from {where}; {ROOT} at {head or '?'})"


class Serf(System):
    name = "serf"
    net = SERF_NET

    def rpc(self, i: int = 0) -> str:
        return f"-rpc-addr={self.ips[i]}:7373"

    def command(self, i: int) -> list[str]:
        args = ["serf", "agent", "-node", self.node(i), "-bind", f"{self.ips[i]}:7946",
                self.rpc(i), "-profile", "lan", "-log-level", "warn"]  # fmt: skip
        for event, command in handlers(self.port):
            args += ["-event-handler", f"{event}={command}"]
        return args + (["-join", f"{self.ips[0]}:7946"] if i else [])

    async def sees(self, i: int, n: int) -> bool:
        code, out = await run_cmd("serf", "members", self.rpc(i), "-status", "alive")
        return code == 0 and len(out.splitlines()) >= n

    async def event(self, name: str, body: bytes) -> str:
        code, out = await run_cmd("serf", "event", self.rpc(), "-coalesce=false", name,
                                  body.decode())  # fmt: skip
        return "" if code == 0 else f"exit {code}: {out.strip()}"

    async def query(self, body: bytes) -> dict[str, Any]:
        started = time.monotonic()
        proc = await asyncio.create_subprocess_exec(
            "serf", "query", self.rpc(), "bench", body.decode(), stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)  # fmt: skip
        assert proc.stdout is not None
        stamps: list[float] = []
        text = []
        async for raw in proc.stdout:
            line = raw.decode(errors="replace")
            text.append(line)
            if line.startswith("Response from"):
                stamps.append(time.monotonic() - started)
        await proc.wait()
        took = time.monotonic() - started
        out = "".join(text)
        acks = re.search(r"Total Acks:\s*(\d+)", out)
        responses = re.search(r"Total Responses:\s*(\d+)", out)
        right = len(re.findall(rf"Response from '(\S+)': \1:{re.escape(body.decode())}$", out,
                               re.M))  # fmt: skip
        return {"returned_s": took,
                "last_response_s": stamps[-1] if len(stamps) >= self.n else None,
                "expected": int(acks.group(1)) if acks else None,
                "responses": int(responses.group(1)) if responses else None,
                "right": right}  # fmt: skip

    def version(self) -> str:
        out = subprocess.run(["serf", "version"], capture_output=True, text=True).stdout
        deb = subprocess.run(["dpkg-query", "-W", "-f", "${Version}", "serf"],
                             capture_output=True, text=True).stdout  # fmt: skip
        return f"Serf {out.splitlines()[0] if out else '?'} (Debian serf {deb or '?'})"


# -- sections ----------------------------------------------------------------------------


def pct(values: list[float], q: float) -> float | None:
    """The value at rank q (with 50 values, q=0.99 is the largest)."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def run_events(system: System, reports: Reports, count: int,
                     notes: list[str]) -> dict[str, Any]:  # fmt: skip
    last, first, each, sent, missing = [], [], [], [], 0
    for k in range(-2, count):  # two warm-up events
        token = f"e{system.name[:2]}{k + 2:04d}"
        started = time.monotonic()
        error = await system.event("bench", payload(token, EVENT_BYTES))
        returned = time.monotonic() - started
        if error:
            notes.append(f"{system.name} event {token}: {error}")
            continue
        complete = await reports.until(token, system.n, -1, EVENT_WAIT_S)
        if k < 0:
            continue
        seen = [at - started for at, _ in reports.at.get(token, {}).values()]
        sent.append(returned)
        each += seen
        missing += system.n - len(seen)
        if seen:
            first.append(min(seen))
        if complete:
            last.append(max(seen))
        await asyncio.sleep(GAP_S)
    return {"ev_last_p50": pct(last, 0.5), "ev_last_p99": pct(last, 0.99),
            "ev_last_max": pct(last, 1.0), "ev_first_p50": pct(first, 0.5),
            "ev_each_p50": pct(each, 0.5), "ev_each_p99": pct(each, 0.99),
            "ev_sent_p50": pct(sent, 0.5), "ev_complete": f"{len(last)}/{count}",
            "ev_missing": missing}  # fmt: skip


async def run_big(system: System, reports: Reports, count: int,
                  notes: list[str]) -> dict[str, Any]:  # fmt: skip
    if isinstance(system, Serf):
        error = await system.event("big", payload("bserf0", BIG_BYTES))
        notes.append(f"serf event with a {BIG_BYTES}-byte payload: "
                     f"{error or 'accepted (exit 0)'}")  # fmt: skip
        if not error:  # accepted after all: see whether it arrives
            got = await reports.until("bserf0", system.n, BIG_BYTES, 60)
            notes.append(f"serf: the 64 KiB event reached {reports.count('bserf0', BIG_BYTES)}"
                         f" of {system.n} handlers within 60 s ({got})")  # fmt: skip
        return {}
    last, sent = [], []
    for k in range(count):
        token = f"b{k:04d}"
        started = time.monotonic()
        error = await system.event("big", payload(token, BIG_BYTES))
        sent.append(time.monotonic() - started)
        if error:
            notes.append(f"shoal 64 KiB event {token}: {error}")
            continue
        if await reports.until(token, system.n, BIG_BYTES, 60):
            last.append(max(at for at, _ in reports.at[token].values()) - started)
        else:
            notes.append(
                f"shoal 64 KiB event {token}: all {BIG_BYTES} bytes reached "
                f"{reports.count(token, BIG_BYTES)} of {system.n} handlers in 60 s"
            )
        await asyncio.sleep(GAP_S)
    return {"big_last_p50": pct(last, 0.5), "big_last_max": pct(last, 1.0),
            "big_sent_p50": pct(sent, 0.5), "big_complete": f"{len(last)}/{count}"}  # fmt: skip


async def run_queries(system: System, count: int) -> dict[str, Any]:
    rows = []
    for k in range(count + 1):  # one warm-up query
        row = await system.query(payload(f"q{k:04d}", QUERY_BYTES))
        if k:
            rows.append(row)
    returned = [r["returned_s"] for r in rows]
    lasts = [r["last_response_s"] for r in rows if r["last_response_s"] is not None]

    def counts(key: str) -> str:
        values = sorted({str(r[key]) for r in rows})
        return "/".join(values)

    return {"q_returned_p50": pct(returned, 0.5), "q_returned_max": pct(returned, 1.0),
            "q_last_response_p50": pct(lasts, 0.5) if isinstance(system, Serf)
            else pct(returned, 0.5),
            "q_expected": counts("expected"), "q_responses": counts("responses"),
            "q_right": counts("right")}  # fmt: skip


# -- report ------------------------------------------------------------------------------

ROWS = [
    ("event to all: send until the LAST handler ran", None),
    ("ev_last_p50", "p50 (s)"),
    ("ev_last_p99", "p99 (s; goal: shoal's below Serf's p50)"),
    ("ev_last_max", "max (s)"),
    ("ev_first_p50", "until the first handler ran, p50 (s)"),
    ("ev_each_p50", "each (event, agent), p50 (s)"),
    ("ev_each_p99", "each (event, agent), p99 (s)"),
    ("ev_sent_p50", "the send call returned, p50 (s)"),
    ("ev_complete", "events that reached every handler"),
    ("ev_missing", "(event, agent) never reported"),
    ("64 KiB event to all", None),
    ("big_last_p50", "until the last handler read it all, p50 (s)"),
    ("big_last_max", "the same, max (s)"),
    ("big_sent_p50", "the send call returned, p50 (s)"),
    ("big_complete", "events that reached every handler"),
    ("query to all, echo handler", None),
    ("q_returned_p50", "the call/command returned, p50 (s; goal < 0.5)"),
    ("q_returned_max", "the same, max (s)"),
    ("q_last_response_p50", "the last response arrived, p50 (s)"),
    ("q_expected", "expected (shoal) / acks (Serf), per query"),
    ("q_responses", "responses per query"),
    ("q_right", "responses with the right echo, per query"),
]


def fmt(v: object) -> str:
    if isinstance(v, float):
        return f"{v:.3f}" if v < 10 else f"{v:.1f}"
    return "-" if v is None else str(v)


def report(results: dict[str, dict[str, Any]], args: argparse.Namespace, versions: list[str],
           notes: list[str]) -> None:  # fmt: skip
    print(f"\nconfiguration: N = {args.agents} agents per system on loopback, one system at a "
          f"time, LAN profile on both (shoal without discovery); {'; '.join(versions)}; "
          f"Python {sys.version.split()[0]}, bash {bash_version()}; {os.cpu_count()} cores, "
          f"load average {args.loadavg} at start; events {args.events} x {EVENT_BYTES} B "
          f"(+2 warm-up) one at a time; 64 KiB events {args.big} x {BIG_BYTES} B (shoal); "
          f"queries {args.queries} x {QUERY_BYTES} B (+1 warm-up); handlers report over "
          f"UDP to this process, stamped on arrival (CLOCK_MONOTONIC)")  # fmt: skip
    for note in notes:
        print(f"  note: {note}")
    print(f"\n  {'figure':52} {'shoal':>8} {'serf':>8} {'shoal/serf':>10}")
    for key, label in ROWS:
        if label is None:
            print(f"  == {key}")
            continue
        s, f = results.get("shoal", {}).get(key), results.get("serf", {}).get(key)
        ok = isinstance(s, float) and isinstance(f, float) and f > 0
        ratio = f"{s / f:.3f}" if ok else "-"  # type: ignore[operator]
        print(f"  {label:52} {fmt(s):>8} {fmt(f):>8} {ratio:>10}")
    s, f = results.get("shoal", {}), results.get("serf", {})
    if s.get("ev_last_p99") is not None and f.get("ev_last_p50") is not None:
        met = s["ev_last_p99"] < f["ev_last_p50"]
        print(f"\n  goal, event p99 below Serf's p50: {'met' if met else 'NOT met'} "
              f"({s['ev_last_p99']:.3f} s against {f['ev_last_p50']:.3f} s)")  # fmt: skip
    if s.get("q_returned_p50") is not None:
        met = s["q_returned_p50"] < 0.5
        print(f"  goal, query returns under 0.5 s: {'met' if met else 'NOT met'} "
              f"({s['q_returned_p50']:.3f} s)")  # fmt: skip


def bash_version() -> str:
    out = subprocess.run(["bash", "--version"], capture_output=True, text=True).stdout
    return out.split()[3] if out else "?"


async def run_system(system: System, reports: Reports, args: argparse.Namespace,
                     notes: list[str]) -> dict[str, Any]:  # fmt: skip
    print(f"running {system.name}: starting {system.n} agents ...", file=sys.stderr, flush=True)
    out: dict[str, Any] = {}
    try:
        await system.start()
        await asyncio.sleep(2.0)  # past the joins' gossip
        print(f"  {system.name}: events ...", file=sys.stderr, flush=True)
        out |= await run_events(system, reports, args.events, notes)
        print(f"  {system.name}: 64 KiB events ...", file=sys.stderr, flush=True)
        out |= await run_big(system, reports, args.big, notes)
        print(f"  {system.name}: queries ...", file=sys.stderr, flush=True)
        out |= await run_queries(system, args.queries)
    except Skip as exc:
        notes.append(f"{system.name} skipped: {exc}")
    finally:
        system.stop()
    return out


async def run(args: argparse.Namespace) -> None:
    loop = asyncio.get_running_loop()
    transport, reports = await loop.create_datagram_endpoint(Reports, local_addr=("127.0.0.1", 0))
    port = transport.get_extra_info("sockname")[1]
    results: dict[str, dict[str, Any]] = {}
    notes: list[str] = []
    versions: list[str] = []
    kinds: list[type[System]] = [Shoal] + ([] if args.skip_serf else [Serf])
    try:
        for kind in kinds:
            if kind is Serf and shutil.which("serf") is None:
                notes.append("serf skipped: not installed (apt-get install serf)")
                continue
            root = Path(tempfile.mkdtemp(prefix=f"shoal-bench-events-{kind.name}-",
                                         dir="/var/tmp"))  # fmt: skip
            try:
                system = kind(root, args.agents, port)
                versions.append(system.version())  # type: ignore[attr-defined]
                results[kind.name] = await run_system(system, reports, args, notes)
            finally:
                shutil.rmtree(root, ignore_errors=True)
    finally:
        transport.close()
    report(results, args, versions, notes)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--agents", type=int, default=20)
    parser.add_argument("--events", type=int, default=50)
    parser.add_argument("--queries", type=int, default=20)
    parser.add_argument("--big", type=int, default=5, help="64 KiB events (shoal)")
    parser.add_argument("--skip-serf", action="store_true")
    parser.add_argument("--quick", action="store_true", help="small numbers, a smoke run")
    args = parser.parse_args()
    if args.quick:
        args.agents, args.events, args.queries, args.big = min(args.agents, 5), 10, 5, 2
    args.loadavg = " ".join(Path("/proc/loadavg").read_text().split()[:3])
    try:
        import uvloop
    except ImportError:
        asyncio.run(run(args))
    else:
        uvloop.run(run(args))


if __name__ == "__main__":
    main()
