#!/usr/bin/env python3
"""DNS queries per second one agent answers (issue 41).

Starts --agents agents on loopback (127.24.0.x; tagged role=web, a service
port each, `[dns] bind` on), waits until they are formed, then sends the
first --seconds of queries: with dnsperf (Debian's dnsperf) when it
is installed, --clients sockets, a query file cycling through node A, tag
A, controller A, SRV and an NXDOMAIN; else a small loop in this process
(one UDP socket, --in-flight queries outstanding). It prints the
configuration, queries per second, loss, and the agent's CPU per query
(from /proc: utime + stime), which is what one core gives.

--failures N: N fresh clusters of five, each asked through one survivor's
DNS: kill -9 of a member (seconds until the survivor lists it failed, and
until its name is NXDOMAIN), then of the controller (seconds until
controller.shoal names the successor).
No published Consul figure is set beside it: Consul publishes none for its
DNS interface.

    apt-get install dnsperf
    .venv/bin/python bench/dns.py [--agents 3] [--seconds 10] [--clients 4] [--loop]
        [--failures 3]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

NET = "127.24.0"
PORT = 8600
CLK_TCK = os.sysconf("SC_CLK_TCK")
QUERIES = ["agent-1.node.shoal A", "web.role.tag.shoal A", "controller.shoal A",
           "_http._tcp.service.shoal SRV", "nobody.node.shoal A"]  # fmt: skip


def start(n: int, root: Path) -> list[subprocess.Popen[bytes]]:
    procs = []
    for i in range(n):
        ip = f"{NET}.{i + 1}"
        conf = root / f"agent-{i}.toml"
        conf.write_text(f'[dns]\nbind = "{ip}:{PORT}"\n')
        args = [
            sys.executable,
            "-m",
            "shoal.daemon.cli",
            "agent",
            "--node-name",
            f"agent-{i}",
            "--bind",
            f"{ip}:7946",
            "--api",
            f"{ip}:7947",
            "--data-dir",
            str(root / str(i)),
            "--config",
            str(conf),
            "--no-discovery",
            "--bootstrap-expect",
            str(n),
            "--tag",
            "role=web",
            "--tag",
            f"service:http={8080 + i}",
            "--log-level",
            "warning",
        ]
        if i:
            args += ["--join", f"{NET}.1:7946"]
        procs.append(subprocess.Popen(args, stdout=subprocess.DEVNULL,
                                      stderr=open(root / f"agent-{i}.log", "wb")))  # fmt: skip
    return procs


def api(i: int, path: str) -> Any:
    """GET `path` of agent `i`'s API (None when it does not answer)."""
    try:
        with urllib.request.urlopen(f"http://{NET}.{i + 1}:7947{path}", timeout=2) as r:
            return json.loads(r.read())
    except OSError:
        return None


def formed(n: int, timeout_s: float = 60.0) -> str:
    """Until agent 0 lists all `n` alive and knows a controller: its name."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        info, members = api(0, "/v1/controller"), api(0, "/v1/members")
        if info and members and info["controller"]:
            if sum(m["status"] == "alive" for m in members["members"]) == n:
                return str(info["controller"])
        time.sleep(0.2)
    raise SystemExit("the agents did not form in time")


def ask(i: int, name: str, qtype: str = "A") -> tuple[str, list[str]]:
    """One UDP query to agent `i`: (rcode, the answers' data)."""
    from dnslib import RCODE, DNSRecord

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.settimeout(1.0)
        sock.sendto(DNSRecord.question(name, qtype).pack(), (f"{NET}.{i + 1}", PORT))
        try:
            reply = DNSRecord.parse(sock.recv(4096))
        except TimeoutError:
            return "timeout", []
    return str(RCODE.get(reply.header.rcode)), sorted(str(rr.rdata) for rr in reply.rr)


def until(what: str, check: Callable[[], bool], timeout_s: float = 30.0) -> float:
    """Seconds until `check()` holds (polled every 10 ms)."""
    started = time.monotonic()
    while not check():
        if time.monotonic() - started > timeout_s:
            raise SystemExit(f"{what}: not within {timeout_s} s")
        time.sleep(0.01)
    return time.monotonic() - started


def failures(root: Path, trial: int) -> None:
    """Five agents; kill -9 of a member, then of the controller, asked of a survivor."""
    procs = start(5, root)
    try:
        boss = int(formed(5).rsplit("-", 1)[1])
        member, asker = [i for i in range(5) if i != boss][:2]
        procs[member].kill()
        killed = time.monotonic()

        def dead() -> bool:
            seen = api(asker, "/v1/members") or {"members": []}
            return any(m["name"] == f"agent-{member}" and m["status"] == "dead"
                       for m in seen["members"])  # fmt: skip

        detect_s = until("member failed", dead)
        nx_s = (
            time.monotonic()
            - killed
            + until("NXDOMAIN", lambda: ask(asker, f"agent-{member}.node.shoal")[0] == "NXDOMAIN")
        )
        procs[boss].kill()
        old = [f"{NET}.{boss + 1}"]
        failover_s = until("new controller", lambda: ask(asker, "controller.shoal")[1]
                           not in ([], old))  # fmt: skip
        print(
            f"  trial {trial}: member failed in the asked agent's view {detect_s:.2f} s after "
            f"kill -9, NXDOMAIN at {nx_s:.2f} s; controller.shoal named the successor "
            f"{failover_s:.2f} s after kill -9 of the controller"
        )
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def with_dnsperf(root: Path, seconds: float, clients: int) -> tuple[int, int]:
    data = root / "queries.txt"
    data.write_text("\n".join(QUERIES * 20) + "\n")
    out = subprocess.run(["dnsperf", "-s", f"{NET}.1", "-p", str(PORT), "-d", str(data),
                          "-l", str(seconds), "-c", str(clients), "-q", "500", "-t", "2"],
                         capture_output=True, text=True, timeout=seconds + 60).stdout  # fmt: skip
    sent = int(re.search(r"Queries sent:\s+(\d+)", out).group(1))  # type: ignore[union-attr]
    done = int(re.search(r"Queries completed:\s+(\d+)", out).group(1))  # type: ignore[union-attr]
    return sent, done


def with_loop(seconds: float, in_flight: int) -> tuple[int, int]:
    from dnslib import DNSRecord

    packets = [DNSRecord.question(q.split()[0], q.split()[1]).pack() for q in QUERIES]
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.connect((f"{NET}.1", PORT))
    sock.settimeout(1.0)
    sent = done = 0
    end = time.monotonic() + seconds
    for i in range(in_flight):
        sock.send(packets[i % len(packets)])
        sent += 1
    while time.monotonic() < end:
        try:
            sock.recv(4096)
        except TimeoutError:
            sock.send(packets[sent % len(packets)])  # one was lost: put another in flight
            sent += 1
            continue
        done += 1
        sock.send(packets[sent % len(packets)])
        sent += 1
    sock.close()
    return sent, done


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--agents", type=int, default=3)
    p.add_argument("--seconds", type=float, default=10.0)
    p.add_argument("--clients", type=int, default=4, help="dnsperf's sockets")
    p.add_argument("--in-flight", type=int, default=32, help="the loop's outstanding queries")
    p.add_argument("--loop", action="store_true", help="the small loop even with dnsperf there")
    p.add_argument(
        "--failures",
        type=int,
        default=0,
        metavar="TRIALS",
        help="also time NXDOMAIN after kill -9 and controller.shoal after a failover",
    )
    args = p.parse_args()
    tool = "dnsperf" if shutil.which("dnsperf") and not args.loop else "loop"
    with tempfile.TemporaryDirectory(prefix="shoal-bench-dns-", dir="/var/tmp") as tmp:
        root = Path(tmp)
        procs = start(args.agents, root)
        try:
            formed(args.agents)
            pid = procs[0].pid
            cpu0, t0 = cpu_s(pid), time.monotonic()
            if tool == "dnsperf":
                sent, done = with_dnsperf(root, args.seconds, args.clients)
            else:
                sent, done = with_loop(args.seconds, args.in_flight)
            wall, cpu = time.monotonic() - t0, cpu_s(pid) - cpu0
        finally:
            for proc in procs:
                proc.kill()
                proc.wait()
    print(
        f"dns bench: {args.agents} agents, one asked; {tool}, {args.seconds:g} s, "
        f"queries: {', '.join(QUERIES)}; load {os.getloadavg()[0]:.1f}, {os.cpu_count()} cores"
    )
    print(
        f"  answered {done:,} of {sent:,} ({(sent - done) / max(sent, 1):.2%} lost), "
        f"{done / wall:,.0f} queries/s over {wall:.1f} s wall"
    )
    print(
        f"  agent CPU {cpu:.2f} s: {cpu / max(done, 1) * 1e6:.0f} us per query, "
        f"{done / max(cpu, 1e-9):,.0f} queries per CPU-second"
    )
    if args.failures:
        print("failures: 5 agents on loopback, each trial a fresh cluster")
    for trial in range(args.failures):
        with tempfile.TemporaryDirectory(prefix="shoal-bench-dns-", dir="/var/tmp") as tmp:
            failures(Path(tmp), trial)


if __name__ == "__main__":
    main()
