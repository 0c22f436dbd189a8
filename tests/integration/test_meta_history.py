"""The metadata log's client histories with real agents: clients put,
compare-and-set and read through every agent while the controller is
killed (-9) and restarted; the linearizability checker of the simulator
(sim/metahistory.py) checks what they saw. And Consul's old stale-read bug
as a loop: every agent restarted, then read at once — never stale."""

from __future__ import annotations

import http.client
import json
import random
import threading
import time
from typing import Any

from shoal.sim.linearizability import Operation
from shoal.sim.metahistory import check_meta
from shoal.sim.metamodel import Conflict, Get, NotApplied, Put, Read, Written
from tests.conftest import poll_until
from tests.integration.agents import AgentCluster, AgentProcess

KEYS = ["h0", "h1", "h2"]


def _request(agent: AgentProcess, method: str, path: str, body: bytes | None = None,
             timeout_s: float = 6.0) -> tuple[int, Any]:  # fmt: skip
    conn = http.client.HTTPConnection(agent.ip, 7947, timeout=timeout_s)
    try:
        conn.request(method, path, body=body)
        resp = conn.getresponse()
        raw = resp.read()
        return resp.status, (json.loads(raw) if raw else None)
    finally:
        conn.close()


class Recorder:
    """Client threads' calls and returns on one monotonic timeline."""

    def __init__(self) -> None:
        self.ops: list[Operation] = []
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.values = 0

    def run_client(self, client: int, agents: list[AgentProcess], seed: int) -> None:
        rng = random.Random(seed)
        last: dict[str, int] = {}
        while not self.stop.is_set():
            agent = rng.choice(agents)
            key = rng.choice(KEYS)
            roll = rng.random()
            if roll < 0.4:
                self._get(client, agent, key, last)
            else:
                cas = last.get(key, 0) if roll < 0.6 else None
                self._put(client, agent, key, cas, last)

    def _get(self, client: int, agent: AgentProcess, key: str, last: dict[str, int]) -> None:
        at = time.monotonic()
        try:
            status, body = _request(agent, "GET", f"/v1/meta/{key}")
        except OSError:
            return  # a read that was not answered changed nothing
        done = time.monotonic()
        if status == 200:
            out = Read(body["value"], body["mod_revision"])
        elif status == 404:
            out = Read(None, 0)
        else:
            return  # not served
        last[key] = out.mod_revision
        self._add(Operation(client, at, done, Get(key), out))

    def _put(self, client: int, agent: AgentProcess, key: str, cas: int | None,
             last: dict[str, int]) -> None:  # fmt: skip
        with self.lock:
            self.values += 1
            value = f"v{self.values}"
        query = "" if cas is None else f"?cas={cas}"
        at = time.monotonic()
        try:
            status, body = _request(agent, "PUT", f"/v1/meta/{key}{query}", value.encode())
        except OSError:
            self._add(Operation(client, at, None, Put(key, value, cas), None))  # unknown
            return
        done = time.monotonic()
        out: Written | Conflict | NotApplied | None
        if status == 200:
            out = Written(body["revision"])
            last[key] = body["revision"]
        elif status == 409:
            out = Conflict(body["current"])
            last[key] = body["current"]
        elif status == 503:
            out = NotApplied()
        else:
            out = None  # 504 (unknown), or anything else: not known
        self._add(Operation(client, at, None if out is None else done, Put(key, value, cas), out))

    def _add(self, op: Operation) -> None:
        with self.lock:
            self.ops.append(op)


def meta_cluster(agents: AgentCluster, n: int = 3) -> list[AgentProcess]:
    members = list(agents.start(n, extra=["--no-discovery", "--meta"]))
    agents.wait_all_see([a.name for a in members], "alive", members)

    def writable() -> bool:
        try:
            return _request(members[-1], "PUT", "/v1/meta/ready", b"1")[0] == 200
        except OSError:
            return False

    poll_until(writable, 60, interval_s=0.2)
    return members


def controller_of(agent: AgentProcess) -> str | None:
    try:
        return _request(agent, "GET", "/v1/controller")[1].get("controller")
    except (OSError, AttributeError):
        return None


def test_histories_through_a_controller_crash_are_linearizable(agents):
    """Six clients through three agents for a while, the controller killed
    with -9 and restarted in the middle: every history checks, writes go on
    once a successor leads, and some of each outcome happened."""
    members = meta_cluster(agents)
    rec = Recorder()
    threads = [threading.Thread(target=rec.run_client, args=(c, members, c), daemon=True)
               for c in range(6)]  # fmt: skip
    for t in threads:
        t.start()
    poll_until(lambda: len(rec.ops) > 150, 60)
    name = controller_of(members[0])
    victim = next(a for a in members if a.name == name)
    victim.kill()
    survivors = [a for a in members if a is not victim]
    poll_until(lambda: controller_of(survivors[0]) not in (None, name), 30)
    victim.start()
    before = len(rec.ops)
    poll_until(lambda: len(rec.ops) > before + 150, 60)
    rec.stop.set()
    for t in threads:
        t.join(15)
    written = sum(1 for op in rec.ops if isinstance(op.output, Written))
    assert written > 50
    verdict = check_meta(rec.ops, max_steps=5_000_000)
    kinds = {name: sum(1 for op in rec.ops if type(op.output).__name__ == name)
             for name in ("Written", "Conflict", "NotApplied", "Read", "NoneType")}  # fmt: skip
    print(f"history: {len(rec.ops)} operations {kinds}, checked in {verdict.steps} steps")
    assert verdict.ok, verdict.explanation


def test_a_read_right_after_every_agent_restarts_is_never_stale(agents):
    """Consul's old bug, as a loop: write, restart every agent (kill -9),
    read at once through any agent: the read answers the last acknowledged
    value or says it cannot (503), never an older one."""
    members = meta_cluster(agents)
    rng = random.Random(7)
    for round_ in range(5):
        status, body = _request(rng.choice(members), "PUT", "/v1/meta/loop", f"r{round_}".encode())
        if status != 200:
            continue
        for a in members:
            a.kill()
        for a in members:
            a.start()
        def answered() -> Any:
            try:
                s, b = _request(rng.choice(members), "GET", "/v1/meta/loop")
            except OSError:
                return None
            return (s, b) if s in (200, 404) else None
        status, body = poll_until(answered, 60, interval_s=0.2)
        assert status == 200 and body["value"] == f"r{round_}", (round_, status, body)
