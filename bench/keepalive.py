#!/usr/bin/env python3
"""Session renewals into the controller (issue 38; daemon/renewals.py).

Three agents of the metadata log (`--meta`, profile local) on 127.21.6.x.
--sessions (10,000) sessions are opened through the two agents that are
not the controller. Then every session is renewed every 10 s, as the
client library renews a session of TTL 30 s (every TTL/3), the renewals
spread evenly (1,000/s for 10,000 sessions) over --connections (16)
keep-alive HTTP connections split between those two agents, for --renew-s
(30 s); `--arrivals poisson`: each connection's renewals at the arrivals
of a Poisson process of its share of the rate (independent clients'
renewals come so; even spacing is the least favourable to batching). The
sessions are opened with a TTL of 600 s: opening 10,000 takes
a minute or more here, and the first would expire before the renewals
start; a renewal costs the controller the same whatever the TTL. Before
the renewals, the same cluster with the sessions open and no renewal for
--idle-s (10 s): the floor.

Printed, over each window: renewals answered per second (200) and refused,
their latency (p50, p99) and how late the client sent them (p99: the
client keeping up); on the controller: datagrams in per second (every
datagram: gossip and the log's heartbeats too, hence the idle floor),
renewal messages it served per second (`meta_keepalives_served`), its CPU
(% of one core, utime+stime from /proc/PID/stat) and per renewal; the
other two agents' CPU.

Before and after: run it against another checkout by putting the
directory holding it (as `shoal`) first on PYTHONPATH; `--label` names the
run in the output:

    git worktree add /tmp/kbase/shoal <commit>   # the build before
    PYTHONPATH=/tmp/kbase .venv/bin/python bench/keepalive.py --label before
    .venv/bin/python bench/keepalive.py --label after
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import os
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any


def _load(name: str) -> Any:
    path = Path(__file__).with_name(f"{name}.py")
    spec = importlib.util.spec_from_file_location(f"bench_{name}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


sessions = _load("sessions")
watch = sessions.watch

NET = "127.21.6"  # free of the other benches' and the tests' addresses
TTL_S = 30.0  # the renewals' period is TTL_S / 3
OPEN_TTL_S = 600.0  # the sessions' own TTL (module docstring)
SEED = 38  # the Poisson arrivals', the same from run to run


class Agents(sessions.Agents):
    """bench/sessions.py's agents of the log, on this bench's addresses."""

    def __init__(self, root: Path, n: int) -> None:
        super().__init__(root, n, meta=True)
        self.ips = [f"{NET}.{i + 1}" for i in range(n)]
        self.writer = watch.HttpConnection(self.ips[0], 7947)


async def counters(ip: str) -> dict[str, int]:
    seen = await watch.get_json(ip, 7947, "/v1/self")
    assert seen is not None, f"no answer from {ip}"
    out: dict[str, int] = seen["counters"]
    return out


class Window:
    """The controller's counters and every agent's CPU over a window."""

    def __init__(self, agents: Agents, controller: int) -> None:
        self.agents, self.controller = agents, controller

    async def __aenter__(self) -> Window:
        self.at = time.monotonic()
        self.cpu = [self.agents.cpu_s(i) for i in range(self.agents.members)]
        self.counted = await counters(self.agents.ips[self.controller])
        return self

    async def __aexit__(self, *_: object) -> None:
        wall = time.monotonic() - self.at
        cpu = [self.agents.cpu_s(i) - c for i, c in enumerate(self.cpu)]
        now = await counters(self.agents.ips[self.controller])
        delta = {k: now.get(k, 0) - v for k, v in self.counted.items()}
        others = [c for i, c in enumerate(cpu) if i != self.controller]
        self.figures = {
            "wall_s": wall,
            "controller_datagrams_in_s": delta["datagrams_in"] / wall,
            "controller_keepalives_s": delta.get("meta_keepalives_served", 0) / wall,
            "controller_cpu_pct": cpu[self.controller] / wall * 100,
            "controller_cpu_s": cpu[self.controller],
            "others_cpu_pct": [c / wall * 100 for c in others],
        }


async def open_sessions(conns: list[Any], n: int) -> list[str]:
    """`n` sessions of `OPEN_TTL_S`, opened over `conns`; their ids."""
    ids: list[str] = []

    async def opener(conn: Any, count: int) -> None:
        for _ in range(count):
            body = json.dumps({"ttl_s": OPEN_TTL_S, "name": f"bench-{len(ids)}"}).encode()
            status, answer = await conn.request("POST", "/v1/session", body)
            assert status == 200, answer
            ids.append(json.loads(answer)["id"])

    share = [n // len(conns) + (1 if i < n % len(conns) else 0) for i in range(len(conns))]
    await asyncio.gather(*(opener(c, k) for c, k in zip(conns, share, strict=True)))
    return ids


async def renew_paced(conns: list[Any], ids: list[str], duration_s: float,
                      poisson: bool) -> dict[str, Any]:  # fmt: skip
    """Each session once every TTL/3 on average, for `duration_s`: renewal
    g (session g mod N) is due at start + g * period / N (`poisson`: each
    connection's renewals due at the arrivals of a Poisson process of its
    share of the rate, as independent clients' would be); connection c
    sends those with g = c mod len(conns), one at a time."""
    n, width, period = len(ids), len(conns), TTL_S / 3
    total = int(duration_s * n / period)
    rng = random.Random(SEED)
    dues = [[start_g * period / n for start_g in range(c, total, width)] for c in range(width)]
    if poisson:
        for c in range(width):
            at, rate = 0.0, n / period / width
            for k in range(len(dues[c])):
                at += rng.expovariate(rate)
                dues[c][k] = at
    latency: list[float] = []
    lateness: list[float] = []
    refused: list[tuple[int, str]] = []
    start = time.monotonic() + 0.05

    async def sender(c: int, conn: Any) -> None:
        for g, offset in zip(range(c, total, width), dues[c], strict=True):
            due = start + offset
            now = time.monotonic()
            if due > now:
                await asyncio.sleep(due - now)
                now = time.monotonic()
            lateness.append(now - due)
            status, answer = await conn.request("PUT", f"/v1/session/{ids[g % n]}/renew")
            latency.append(time.monotonic() - now)
            if status != 200:
                refused.append((status, answer[:200].decode(errors="replace")))

    await asyncio.gather(*(sender(c, conn) for c, conn in enumerate(conns)))
    pct = sessions.pct
    return {"renewals": total, "refused": len(refused), "refused_first": refused[:1],
            "latency_p50_ms": pct(latency, 0.5) * 1000, "latency_p99_ms": pct(latency, 0.99) * 1000,
            "late_p99_ms": pct(lateness, 0.99) * 1000}  # fmt: skip


async def run(args: argparse.Namespace, root: Path) -> dict[str, Any]:
    agents = Agents(root, 3)
    conns: list[Any] = []
    out: dict[str, Any] = {"label": args.label, "sessions": args.sessions,
                           "arrivals": args.arrivals, "connections": args.connections,
                           "shoal": os.environ.get("PYTHONPATH") or "this checkout"}  # fmt: skip
    try:
        await agents.start()
        ctl = await agents.controller()
        assert ctl is not None
        followers = [ip for i, ip in enumerate(agents.ips) if i != ctl]
        conns = [watch.HttpConnection(followers[c % 2], 7947) for c in range(args.connections)]
        opened_at = time.monotonic()
        ids = await open_sessions(conns, args.sessions)
        out["open_rate"] = args.sessions / (time.monotonic() - opened_at)
        await asyncio.sleep(2.0)
        async with Window(agents, ctl) as idle:
            await asyncio.sleep(args.idle_s)
        out["idle"] = idle.figures
        print(f"  renewing {len(ids)} sessions every {TTL_S / 3:.0f} s for {args.renew_s:.0f} s",
              file=sys.stderr, flush=True)  # fmt: skip
        async with Window(agents, ctl) as busy:
            renewed = await renew_paced(conns, ids, args.renew_s, args.arrivals == "poisson")
        out["renew"] = renewed | busy.figures
        served = renewed["renewals"] - renewed["refused"]
        out["renew"]["renewals_s"] = served / busy.figures["wall_s"]
        extra = busy.figures["controller_cpu_s"] - idle.figures["controller_cpu_pct"] / 100 * \
            busy.figures["wall_s"]  # fmt: skip
        out["renew"]["controller_cpu_us_per_renewal"] = extra / max(1, served) * 1e6
    finally:
        for conn in conns:
            conn.close()
        await agents.stop()
    return out


def report(out: dict[str, Any]) -> None:
    idle, busy = out["idle"], out["renew"]
    print(
        f"\n[{out['label']}] {out['sessions']} sessions renewed every "
        f"{TTL_S / 3:g} s (TTL {TTL_S:g} s / 3), {out['arrivals']} arrivals over "
        f"{out['connections']} connections, through the two non-controller agents "
        f"(shoal: {out['shoal']})"
    )
    print(f"  opened at {out['open_rate']:.0f}/s")
    print(
        f"  idle:    controller {idle['controller_datagrams_in_s']:7.1f} datagrams in/s, "
        f"CPU {idle['controller_cpu_pct']:5.1f} %"
    )
    print(
        f"  renewing: {busy['renewals_s']:7.1f} renewals/s answered, {busy['refused']} refused; "
        f"latency p50 {busy['latency_p50_ms']:.1f} ms p99 {busy['latency_p99_ms']:.1f} ms; "
        f"sent late p99 {busy['late_p99_ms']:.1f} ms"
    )
    print(
        f"            controller {busy['controller_datagrams_in_s']:7.1f} datagrams in/s, "
        f"{busy['controller_keepalives_s']:7.1f} keepalives served/s, CPU "
        f"{busy['controller_cpu_pct']:5.1f} % ({busy['controller_cpu_us_per_renewal']:.0f} µs "
        f"a renewal above idle); the others' CPU "
        + ", ".join(f"{c:.1f} %" for c in busy["others_cpu_pct"])
    )
    print(json.dumps(out))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=10_000)
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--renew-s", type=float, default=30.0)
    parser.add_argument("--idle-s", type=float, default=10.0)
    parser.add_argument("--arrivals", choices=("even", "poisson"), default="even")
    parser.add_argument("--label", default="run")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="shoal-keepalive-") as tmp:
        report(asyncio.run(run(args, Path(tmp))))


if __name__ == "__main__":
    main()
