"""The metadata log's client histories with real agents under real faults
(issue 37): five agents, one per network namespace on one bridge
(tests/lan/netlab.py), clients putting, compare-and-setting and reading
through all of them while the controller is cut off by an nftables
partition, the LAN splits into a minority and a majority, the controller is
killed (-9) and restarted, and paused (SIGSTOP) past its lease then let go
(SIGCONT); one agent runs all along on a clock at the wrong rate
(libfaketime). The simulator's linearizability checker (sim/metahistory.py)
checks every history the clients saw. One round of each fault here (about
two minutes); three rounds, with longer faults and a second wrong clock,
behind `slow`."""

from __future__ import annotations

import glob
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from shoal.sim.linearizability import Verdict
from shoal.sim.metamodel import Written
from tests.conftest import IN_CI, poll_until
from tests.integration.metaclients import Recorder, check_and_report, http_exchange
from tests.lan import netlab
from tests.lan.netlab import Host, VirtualLan, remove_stale_namespaces

pytestmark = [pytest.mark.root, pytest.mark.netns]

LIBFAKETIME = next(iter(glob.glob("/usr/lib/*/faketime/libfaketime.so.1")), None)
LEASE_S = 2.0  # [election] lease_s, the default


@pytest.fixture
def lan(tmp_path):
    """Five hosts on one bridge, torn down with their agents."""
    netlab.require_lan()
    if LIBFAKETIME is None:
        if IN_CI:
            pytest.fail("libfaketime is missing (make sysdeps)")
        pytest.skip("needs libfaketime (apt-get install faketime; `make sysdeps` does it)")
    remove_stale_namespaces()
    built = VirtualLan(5, tmp_path)
    yield built
    built.close()


def start(host: Host, clock: str | None = None) -> None:
    """`shoal agent --meta` in `host`, joining the other hosts (and finding
    them by mDNS); with `clock`, libfaketime's FAKETIME for it alone (its
    monotonic clock too)."""
    env = [] if clock is None else ["env", f"LD_PRELOAD={LIBFAKETIME}", f"FAKETIME={clock}"]
    joins = [arg for h in host.lan.hosts if h is not host for arg in ("--join", f"{h.ip}:7946")]
    args = ["ip", "netns", "exec", host.ns, *env, sys.executable, "-m", "shoal.daemon.cli",
            "agent", "--node-name", f"host-{host.index}", "--bind", f"{host.ip}:7946",
            "--api", "127.0.0.1:7947", "--data-dir", str(host.lan.workdir / host.ns),
            "--log-format", "json", "--meta", "--bootstrap-expect", str(len(host.lan.hosts)),
            *joins]  # fmt: skip
    with open(host.log_path, "ab") as log:  # `ip netns exec` and `env` exec: one process
        host.proc = subprocess.Popen(args, stdout=log, stderr=log, stdin=subprocess.DEVNULL,
                                     cwd=Path(netlab.__file__).resolve().parents[2])  # fmt: skip


def request(host: Host, method: str, path: str, body: bytes | None,
            timeout_s: float = 6.0) -> tuple[int, Any]:  # fmt: skip
    """One call to `host`'s API, on its own loopback inside its namespace."""
    return http_exchange(host.connect_api(timeout_s), method, path, body)


def controller(hosts: list[Host]) -> Host | None:
    """The host whose agent says it holds the lease of the highest epoch."""
    best: tuple[int, Host] | None = None
    for host in hosts:
        try:
            status, info = request(host, "GET", "/v1/controller", None, timeout_s=1.0)
        except OSError:
            continue
        if status == 200 and info["is_self"] and (best is None or info["epoch"] > best[0]):
            best = (info["epoch"], host)
    return None if best is None else best[1]


class Faults:
    """The faults, each held for `hold_s`, and the progress wanted after."""

    def __init__(self, lan: VirtualLan, rec: Recorder, hold_s: float, clocks: dict[int, str]):
        self.lan, self.rec, self.hold_s, self.clocks = lan, rec, hold_s, clocks
        self.done: list[str] = []
        self.threads: list[threading.Thread] = []

    def progress(self, writes: int = 10, timeout_s: float = 60.0) -> None:
        """Wait for `writes` more acknowledged writes."""
        target = self.rec.count(Written) + writes
        poll_until(lambda: self.rec.count(Written) >= target, timeout_s, interval_s=0.1)

    def holder(self) -> Host:
        return poll_until(lambda: controller(self.lan.hosts), 30, interval_s=0.2)

    def held(self, name: str, undo: Callable[[], None], others: list[Host]) -> None:
        """The fault is on: the others make progress; hold, undo, progress."""
        until = time.monotonic() + self.hold_s
        if others:
            poll_until(lambda: controller(others), 30, interval_s=0.2)
            self.progress(5)
        poll_until(lambda: time.monotonic() >= until, self.hold_s + 1, interval_s=0.1)
        undo()
        self.progress()
        self.done.append(name)

    def isolate_controller(self) -> None:
        old = self.holder()
        rest = [h for h in self.lan.hosts if h is not old]
        self.lan.partition([old], rest)
        self.held(f"controller host-{old.index} cut off (nftables)",
                  lambda: self.lan.heal(self.lan.hosts), rest)  # fmt: skip

    def split(self) -> None:
        old = self.holder()
        minority = [old, next(h for h in self.lan.hosts if h is not old)]
        majority = [h for h in self.lan.hosts if h not in minority]
        self.lan.partition(minority, majority)
        names = "+".join(f"host-{h.index}" for h in minority)
        self.held(f"split {names} | the other 3 (nftables)",
                  lambda: self.lan.heal(self.lan.hosts), majority)  # fmt: skip

    def kill_controller(self) -> None:
        old = self.holder()
        old.stop_agent()  # SIGKILL
        rest = [h for h in self.lan.hosts if h is not old]
        self.held(f"controller host-{old.index} kill -9, restarted",
                  lambda: start(old, self.clocks.get(old.index)), rest)  # fmt: skip

    def pause_controller(self) -> None:
        old = self.holder()
        proc = old.proc
        assert proc is not None
        proc.send_signal(signal.SIGSTOP)
        rest = [h for h in self.lan.hosts if h is not old]
        self.held(f"controller host-{old.index} SIGSTOP {self.hold_s:.0f} s, SIGCONT",
                  lambda: proc.send_signal(signal.SIGCONT), rest)  # fmt: skip


def boot(lan: VirtualLan, clocks: dict[int, str], rec: Recorder, clients: int) -> Faults:
    """Agents up (with their clocks), a controller, clients on."""
    for host in lan.hosts:
        start(host, clocks.get(host.index))
    poll_until(lambda: controller(lan.hosts), 60, interval_s=0.2)
    faults = Faults(lan, rec, LEASE_S + 2.0, clocks)
    faults.done += [f"host-{i} clock {spec!r} (libfaketime)" for i, spec in clocks.items()]
    faults.threads = rec.start(clients, lan.hosts)
    faults.progress(20)
    return faults


def stop_clients(lan: VirtualLan, faults: Faults) -> None:
    faults.rec.stop.set()
    for host in lan.hosts:  # nobody left paused: the clients' calls end
        if host.proc is not None and host.proc.poll() is None:
            os.kill(host.proc.pid, signal.SIGCONT)
    for t in faults.threads:
        t.join(15)


def run(lan: VirtualLan, rounds: int, hold_s: float, clocks: dict[int, str],
        clients: int) -> None:  # fmt: skip
    """Agents up, clients on, `rounds` of every fault, then the checker."""
    rec = Recorder(request)
    faults = boot(lan, clocks, rec, clients)
    faults.hold_s = hold_s
    try:
        for _ in range(rounds):
            faults.isolate_controller()
            faults.split()
            faults.kill_controller()
            faults.pause_controller()
    finally:
        stop_clients(lan, faults)
    check_and_report(rec.ops, f"{len(lan.hosts)} agents in namespaces", faults.done)


def test_histories_under_partitions_crashes_pauses_and_a_fast_clock_are_linearizable(lan):
    """One round of each fault, a fast clock on one agent: every history
    the clients saw is linearizable, and writes went on after each fault."""
    run(lan, rounds=1, hold_s=LEASE_S + 2.0, clocks={5: "+0 x1.5"}, clients=5)


@pytest.mark.slow
def test_histories_under_many_faults_and_wrong_clocks_are_linearizable(lan):
    """Three rounds, each fault held longer, a fast and a slow clock."""
    run(lan, rounds=3, hold_s=3 * LEASE_S + 2.0, clocks={4: "+0 x0.6", 5: "+0 x1.5"}, clients=8)


def test_the_check_fails_on_stale_reads_from_a_cut_off_controller(lan):
    """The control: the same clients reading `?stale` (an agent's own state,
    not linearizable by design: docs/metadata.md) while the controller is
    cut off and the others go on writing. The checker must find the stale
    reads: the histories above pass a check that can fail."""
    rec = Recorder(request, read_query="?stale=1")  # a bare ?stale is not parsed as a flag
    faults = boot(lan, {}, rec, clients=5)
    try:
        faults.isolate_controller()
    finally:
        stop_clients(lan, faults)
    check_and_report(rec.ops, "control: ?stale reads", faults.done, expect=Verdict.ILLEGAL)
