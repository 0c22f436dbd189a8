"""Sessions in the metadata log with real agents (issue 38; docs/client.md,
"Sessions"): an application's session and its keys survive its agent's
restart (SIGTERM, then kill -9) and a controller failover; its keys go on
every agent within TTL + 1 s of the application's kill -9; a paused
application loses its session and its lock, and its write under the old
fence is refused."""

from __future__ import annotations

import subprocess
import sys
import threading
import time

from shoal.client import Client
from shoal.client.metatxn import Compare, TxnPut
from tests.conftest import poll_until
from tests.integration.agents import AgentProcess
from tests.integration.metaagents import controller_name, meta_cluster, request, writable

HOLDER = """
import sys, time
from shoal.client import Client
from shoal.client.metatxn import Compare, TxnPut
c = Client(sys.argv[1], token="", timeout=5)
s = c.session(ttl=float(sys.argv[2]), name="holder")
s.meta_put("brokers/1", "10.0.0.5:9092")
s.put("kv/brokers/1", "up")
took = c.meta.txn([Compare.absent("locks/job")], [TxnPut("locks/job", "holder", s.id)])
fence = took.revision  # the lock key's create revision: the fencing token
print(s.id, fence, flush=True)
sys.stdin.readline()  # the test says when to write under the fence
done = c.meta.txn([Compare("locks/job", "create_revision", "=", fence)],
                  [TxnPut("jobs/output", "from the old holder")])
print("wrote" if done.succeeded else "refused", "lost" if s.lost else "open", flush=True)
s.wait_lost()
"""


class Holder:
    """An application holding a session through `agent` (a child process)."""

    def __init__(self, agent: AgentProcess, ttl_s: float) -> None:
        self.proc = subprocess.Popen([sys.executable, "-c", HOLDER, f"{agent.ip}:7947",
                                      str(ttl_s)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True)  # fmt: skip
        assert self.proc.stdout is not None
        self.id, fence = self.proc.stdout.readline().split()
        self.fence = int(fence)

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait(10)
        for f in (self.proc.stdin, self.proc.stdout):
            if f is not None:
                f.close()


def present(agent: AgentProcess, stale: bool = True) -> bool | None:
    """Whether `agent` holds both of the holder's keys (None: no answer, or
    a linearizable read not served: during a failover). A stale read may
    lag; a linearizable one says what the log holds."""
    try:
        path = "/v1/meta/brokers/1" + ("?stale" if stale else "")
        meta, _ = request(agent, "GET", path, timeout_s=8)
        kv, _ = request(agent, "GET", "/v1/kv/kv/brokers/1", timeout_s=2)
    except OSError:
        return None
    if meta not in (200, 404):
        return None
    return meta == 200 and kv == 200


class Watcher:
    """Polls `agents` for the keys every 50 ms, reading the metadata key
    linearizably; remembers any absence. An agent restarted by kill -9 may
    lack a kv key until anti-entropy brings it back (its writes from peers
    were not yet synced): `exclude` it, and check it at the end."""

    def __init__(self, agents: list[AgentProcess]) -> None:
        self.missing: list[str] = []
        self._stop = threading.Event()
        self._agents = list(agents)
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def exclude(self, agent: AgentProcess) -> None:
        self._agents = [a for a in self._agents if a is not agent]

    def _run(self) -> None:
        while not self._stop.wait(0.05):
            for a in self._agents:
                if a.running() and present(a, stale=False) is False:
                    self.missing.append(a.name)

    def stop(self) -> list[str]:
        self._stop.set()
        self._thread.join()
        return self.missing


def session_open(agent: AgentProcess, sid: str) -> bool:
    try:
        status, _ = request(agent, "GET", f"/v1/session/{sid}", timeout_s=2)
    except OSError:
        return False
    return status == 200


def test_a_session_outlives_its_agents_restart_and_a_controller_failover(agents, figure):
    members = meta_cluster(agents, 3)
    controller = controller_name(members[0])
    home = next(a for a in members if a.name != controller)  # the holder's agent
    others = [a for a in members if a is not home]
    holder = Holder(home, ttl_s=8)
    try:
        poll_until(lambda: all(present(a) for a in members), 10)
        watcher = Watcher(others)
        for how in ("SIGTERM", "kill -9"):
            started = time.monotonic()
            home.stop() if how == "SIGTERM" else home.kill()
            home.start()
            poll_until(lambda: writable(home), 30, interval_s=0.1)
            figure(f"sessions: agent back and writable after {how}: "
                   f"{time.monotonic() - started:.2f} s")  # fmt: skip
            poll_until(lambda: present(home), 10)
        victim = next(a for a in members if a.name == controller_name(home))
        watcher.exclude(victim)
        victim.kill()  # the controller: a new one gives the session a full TTL
        survivors = [a for a in members if a is not victim]
        poll_until(lambda: controller_name(survivors[0]) not in (None, victim.name), 30)
        failover = time.monotonic()
        poll_until(lambda: writable(survivors[0]), 30, interval_s=0.1)
        victim.start()

        def renewed_past_a_ttl() -> bool:  # at the new controller, a TTL and more on
            new = next(a for a in survivors if a.name == controller_name(survivors[0]))
            _, body = request(new, "GET", f"/v1/session/{holder.id}")
            left = body.get("expires_in_s") if isinstance(body, dict) else None
            return time.monotonic() - failover > 10 and left is not None and left > 0

        poll_until(renewed_past_a_ttl, 30, interval_s=0.2)
        assert watcher.stop() == [], "the session's keys were missing on an agent"
        poll_until(lambda: all(present(a) for a in members), 15)  # the old controller too
        assert all(session_open(a, holder.id) for a in members)
        assert holder.proc.poll() is None  # never told its session was lost
    finally:
        holder.stop()


def test_a_killed_applications_keys_go_everywhere_within_its_ttl(agents, figure):
    members = meta_cluster(agents, 3)
    holder = Holder(members[0], ttl_s=2)
    try:
        poll_until(lambda: all(present(a) for a in members), 10)
        killed = time.monotonic()
        holder.stop()
        poll_until(lambda: not any(present(a) for a in members), 2 + 1, interval_s=0.02)
        figure("sessions: kill -9 of the holder to its keys gone on every agent (ttl 2 s): "
               f"{time.monotonic() - killed:.2f} s")  # fmt: skip
        assert not any(session_open(a, holder.id) for a in members)
    finally:
        holder.stop()


def test_a_paused_application_loses_its_lock_and_its_fenced_write_is_refused(agents):
    members = meta_cluster(agents, 3)
    holder = Holder(members[0], ttl_s=2)
    try:
        holder.proc.send_signal(19)  # SIGSTOP, longer than its TTL
        poll_until(lambda: not session_open(members[1], holder.id), 6)
        rival = Client(f"{members[1].ip}:7947", timeout=5)
        with rival.session(ttl=10) as session:
            took = rival.meta.txn([Compare.absent("locks/job")],
                                  [TxnPut("locks/job", "rival", session.id)])  # fmt: skip
            assert took.succeeded and took.revision > holder.fence
            holder.proc.send_signal(18)  # SIGCONT
            assert holder.proc.stdin is not None and holder.proc.stdout is not None
            holder.proc.stdin.write("go\n")
            holder.proc.stdin.flush()
            assert holder.proc.stdout.readline().split()[0] == "refused"
            status, _ = request(members[1], "GET", "/v1/meta/jobs/output")
            assert status == 404
        assert holder.proc.wait(10) == 0  # its session was lost (wait_lost returned)
    finally:
        holder.stop()


def test_the_lock_recipe_hands_over_in_fence_order_and_refuses_a_stale_holder(agents):
    """shoal.client.recipes: a waiter takes the lock the moment the holder's
    session ends, with a higher fence; the old holder's guarded write is
    refused; an election names its leader and moves on a resign."""
    from shoal.client.recipes import Election, Lock

    a, b, _ = meta_cluster(agents, 3)
    first, second = Client(f"{a.ip}:7947", timeout=10), Client(f"{b.ip}:7947", timeout=10)
    s1, s2 = first.session(ttl=10), second.session(ttl=10)
    held, waiting = Lock(first, "locks/x", s1), Lock(second, "locks/x", s2)
    fence = held.acquire()
    got: list[int | Exception] = []

    def wait() -> None:
        try:
            got.append(waiting.acquire())
        except Exception as exc:  # shown by the assertion below
            got.append(exc)

    waiter = threading.Thread(target=wait, daemon=True)
    waiter.start()
    assert not waiting.held() and held.held()
    s1.close()  # the holder's session ends: its lock key goes with it
    waiter.join(30)
    assert got and isinstance(got[0], int), got
    assert got[0] > fence and waiting.held()
    stale = first.meta.txn([held.guard()], [TxnPut("jobs/x", "stale")])
    assert not stale.succeeded
    e1, e2 = (
        Election(second, "leader", s2, "b"),
        Election(first, "leader", first.session(ttl=10), "a"),
    )
    assert e1.campaign() > 0 and e2.leader() == "b"
    campaigning = threading.Thread(target=e2.campaign, daemon=True)
    campaigning.start()
    e1.resign()
    campaigning.join(10)
    assert e2.leader() == "a" and e2.term > e1.term == 0


def test_a_critical_check_ends_its_session_through_the_log_and_any_agent_renews(agents, tmp_path):
    """A session bound to a check of its agent ends, on every agent, when
    the check turns critical; before that, any agent renews it."""
    config = tmp_path / "checks.toml"
    config.write_text('[[checks]]\nid = "broker"\nkind = "ttl"\nttl_s = 60\n')
    members = agents.start(3, extra=["--meta", "--no-discovery", "--config", str(config)])
    for m in members:
        m.join = [o.gossip for o in members if o is not m]
    agents.wait_all_see([a.name for a in members], "alive", members)
    poll_until(lambda: all(writable(a) for a in members), 60, interval_s=0.2)
    c = Client(f"{members[0].ip}:7947", timeout=10)
    c.check_pass("broker")
    with c.session(ttl=30, checks=["broker"]) as session:
        session.meta_put("brokers/1", "up")
        for other in members[1:]:  # renewed through another agent
            assert request(other, "PUT", f"/v1/session/{session.id}/renew")[0] == 200
        c.check_fail("broker", "not accepting connections")
        poll_until(lambda: not any(session_open(a, session.id) for a in members), 5)
        status, body = request(members[2], "GET", "/v1/meta/brokers/1?stale")
        assert status == 404
        assert session.wait_lost(15) and "ended" in session.reason
