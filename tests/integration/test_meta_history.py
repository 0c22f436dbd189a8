"""The metadata log's client histories with real agents: clients put,
compare-and-set and read through every agent while the controller is
killed (-9) and restarted; the linearizability checker of the simulator
(sim/metahistory.py) checks what they saw. And Consul's old stale-read bug
as a loop: every agent restarted, then read at once — never stale (5
rounds here, 200 behind `slow`)."""

from __future__ import annotations

import random
import time

import pytest

from shoal.sim.metamodel import Read, Written
from tests.conftest import poll_until
from tests.integration.agents import AgentCluster
from tests.integration.metaagents import crash_the_controller, meta_cluster, request
from tests.integration.metaclients import Recorder, check_and_report


def test_histories_through_a_controller_crash_are_linearizable(agents):
    """Six clients through three agents for a while, the controller killed
    with -9 and restarted in the middle: every history checks, writes go on
    once a successor leads, and some of each outcome happened."""
    members = meta_cluster(agents)
    rec = Recorder(request)
    threads = rec.start(6, members)
    crash_the_controller(members, lambda: len(rec.ops), 150)
    rec.stop.set()
    for t in threads:
        t.join(15)
    assert rec.count(Written) > 50
    check_and_report(rec.ops, "controller kill -9", ["kill -9 of the controller"])


def restart_loop(agents: AgentCluster, rounds: int) -> None:
    """Consul's old bug, as a loop: write, kill -9 every agent and start
    them again, read at once through any agent. The read answers the last
    acknowledged value or says it cannot (503: asked again), never an older
    one; the whole history (with the writes that failed) is checked too."""
    members = meta_cluster(agents)
    rec = Recorder(request, keys=["loop"])
    rng = random.Random(7)
    started = time.monotonic()
    for round_ in range(rounds):
        sent: list[str] = []
        unknown = False

        def write() -> Written | None:  # 503 (no controller known yet): safe to retry
            nonlocal unknown
            sent.append(f"r{round_}.{len(sent)}")
            out = rec.put(0, rng.choice(members), "loop", None, {}, value=sent[-1])
            unknown |= out is None  # it may commit later: the checker alone judges the read
            return out if isinstance(out, Written) else None

        out = poll_until(write, 60, interval_s=0.1)
        value = sent[-1]
        for a in members:
            a.kill()
        for a in members:
            a.start()
        read = poll_until(lambda: rec.get(1, rng.choice(members), "loop", {}), 60, interval_s=0.2)
        if not unknown:
            assert read == Read(value, out.revision), (round_, read)
    print(f"\nrestart loop: {rounds} rounds in {time.monotonic() - started:.0f} s, "
          "no first read after the restarts stale")  # fmt: skip
    check_and_report(rec.ops, f"restart loop x{rounds}", [f"{rounds} x kill -9 of every agent"])


def test_a_read_right_after_every_agent_restarts_is_never_stale(agents):
    """Five rounds of the loop (`restart_loop`)."""
    restart_loop(agents, 5)


@pytest.mark.slow
def test_a_read_right_after_every_agent_restarts_is_never_stale_200_rounds(agents):
    """Two hundred rounds of the loop, as the issue asks (`restart_loop`)."""
    restart_loop(agents, 200)
