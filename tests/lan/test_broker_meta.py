"""The broker example's topics through a partition of the network (issue 37),
with real agents and brokers on a virtual LAN.

Five hosts, each with an agent (`--meta`) and a broker beside it. The
controller's host is cut off from the other four by nftables while the
broker beside it goes on creating topics, and a broker on the majority side
does the same. With the topics in the metadata log:

- a creation on the cut-off side is never acknowledged (it ends not applied
  or unknown), where kv acknowledged it and brought it back after the heal;
- every creation a broker acknowledged, on either side, at any time, exists
  after the heal, read through every agent, on every agent's own state, and
  in the view of the broker beside the new controller; and every one
  acknowledged before a read through the majority was in that read;
- none refused appears later, and none of the cut-off side's unknown ones
  appears behind the new controller's back (after the heal, a topic absent
  from the majority's view at the heal comes only from a creation sent
  after it);
- creations on the majority side succeed within a few seconds of the new
  controller.
"""

from __future__ import annotations

import http.client
import json
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import poll_until
from tests.lan.netlab import Host, VirtualLan, socket_in

pytestmark = [pytest.mark.root, pytest.mark.netns]

BROKER_PORT = 9092
TTL_S = 3
REPO = Path(__file__).resolve().parents[2]


def start_broker(host: Host) -> subprocess.Popen[bytes]:
    log = open(host.lan.workdir / f"broker-h{host.index}.log", "ab")
    proc = subprocess.Popen(
        ["ip", "netns", "exec", host.ns, sys.executable, "-m", "shoal.examples.broker", "serve",
         "--agent", "127.0.0.1:7947", "--id", f"b{host.index}", "--host", host.ip,
         "--port", str(BROKER_PORT), "--session-ttl", str(TTL_S)],
        stdout=log, stderr=log, stdin=subprocess.DEVNULL, cwd=REPO)  # fmt: skip
    log.close()
    return proc


def ask(host: Host, request: dict[str, Any], timeout_s: float) -> dict[str, Any] | None:
    """One request to the broker on `host` (None: no answer)."""
    sock = socket_in(host.ns)
    sock.settimeout(timeout_s)
    try:
        sock.connect((host.ip, BROKER_PORT))
        sock.sendall(json.dumps(request).encode() + b"\n")
        answer: dict[str, Any] = json.loads(sock.makefile().readline())
        return answer
    except (OSError, ValueError):
        return None
    finally:
        sock.close()


def topics_of(host: Host, stale: bool = False) -> set[str] | None:
    """The topics in the metadata log, read through `host`'s agent
    (linearizably, or from its own applied state); None: not served."""
    try:
        held = host.api("/v1/meta/topics" + ("?stale" if stale else ""), timeout_s=6)
    except (OSError, ValueError, http.client.HTTPException):
        return None
    if "value" not in held:
        return set() if "no key" in str(held.get("error")) else None
    return set(json.loads(held["value"]))


def controller_of(host: Host) -> tuple[str, int] | None:
    try:
        info = host.api("/v1/controller")
    except (OSError, ValueError, http.client.HTTPException):
        return None
    return (info["controller"], info["epoch"]) if info.get("controller") else None


def agreed(hosts: list[Host]) -> tuple[str, int] | None:
    seen = {controller_of(h) for h in hosts}
    return seen.pop() if len(seen) == 1 and None not in seen else None


@dataclass
class Creation:
    name: str
    sent: float
    answered: float
    outcome: str  # ok, not_applied, unknown (an answer "unknown" or none), exists


class Creator(threading.Thread):
    """Creates topics <prefix>-000, -001, ... through one broker, one at a
    time, until stopped; records every outcome."""

    def __init__(self, host: Host, prefix: str) -> None:
        super().__init__(daemon=True)
        self.host, self.prefix = host, prefix
        self.done: list[Creation] = []
        self.halt = threading.Event()

    def run(self) -> None:
        while not self.halt.is_set():
            name = f"{self.prefix}-{len(self.done):03d}"
            sent = time.monotonic()
            answer = ask(self.host, {"op": "create_topic", "topic": name, "partitions": 1,
                                     "timeout": 2.0, "token": name}, 20)  # fmt: skip
            outcome = "ok" if answer and answer.get("ok") else (answer or {}).get("error")
            self.done.append(Creation(name, sent, time.monotonic(), outcome or "unknown"))
            self.halt.wait(0.25)  # a pace, not a wait for a condition

    def acked(self, after: float = 0.0) -> list[Creation]:
        return [c for c in self.done if c.outcome == "ok" and c.sent >= after]

    def counts(self, since: float, until: float) -> str:
        window = [c for c in self.done if since <= c.sent < until]
        by = {o: sum(c.outcome == o for c in window) for o in ("ok", "not_applied", "unknown")}
        return f"{by['ok']} acknowledged, {by['not_applied']} refused, {by['unknown']} unknown"


def start_cluster(lan: VirtualLan) -> list[subprocess.Popen[bytes]]:
    for host in lan.hosts:
        config = lan.workdir / f"{host.ns}.toml"
        config.write_text(f'[election]\nhealthy_only = 1\n[[checks]]\nid = "broker-b{host.index}"'
                          f'\nkind = "ttl"\nttl_s = {TTL_S}\n')  # fmt: skip
        host.start_agent(extra=("--bootstrap-expect", "5", "--meta", "--config", str(config)))
    # The brokers pass their checks: with `healthy_only`, only then is any
    # member eligible as controller.
    brokers = [start_broker(h) for h in lan.hosts]
    names = {f"host-{h.index}" for h in lan.hosts}
    poll_until(lambda: all(set(h.members()) == names and set(h.members().values()) == {"alive"}
                           for h in lan.hosts), 90)  # fmt: skip
    poll_until(lambda: agreed(lan.hosts), 60)
    return brokers


def serving(hosts: list[Host], topics: set[str]) -> bool:
    """Every broker of `hosts` knows `topics` and has a leader for each of
    their partitions (one partition each here, but `base`'s five)."""
    for host in hosts:
        status = ask(host, {"op": "status"}, 5) or {}
        if not topics <= set(status.get("topics", {})):
            return False
        leaders = status["leaders"]
        if not all(any(n.startswith(t + "/") for n in leaders) for t in topics):
            return False
    return True


def test_topics_created_through_a_cut_off_controller_are_refused_or_never_lost(make_lan, figure):
    lan = make_lan(5)
    brokers: list[subprocess.Popen[bytes]] = []
    try:
        brokers = start_cluster(lan)
        _run(lan, figure)
    finally:
        for proc in brokers:
            proc.kill()
            proc.wait(10)
        for host in lan.hosts:
            print(
                f"---- broker b{host.index}\n"
                + (lan.workdir / f"broker-h{host.index}.log").read_text(errors="replace")
            )


def _run(lan: VirtualLan, figure: Callable[[str], None]) -> None:
    hosts = lan.hosts
    poll_until(lambda: (ask(hosts[0], {"op": "create_topic", "topic": "base", "partitions": 5,
                                       "timeout": 10, "token": "base"}, 30) or {}).get("ok"),
               90)  # fmt: skip
    poll_until(lambda: serving(hosts, {"base"}), 60)
    old_name, old_epoch = poll_until(lambda: agreed(hosts), 30)
    deposed = next(h for h in hosts if f"host-{h.index}" == old_name)
    majority = [h for h in hosts if h is not deposed]
    cut_off, other = Creator(deposed, "d"), Creator(majority[0], "m")
    cut_off.start()
    other.start()
    poll_until(lambda: len(cut_off.acked()) >= 3 and len(other.acked()) >= 3, 60)

    lan.partition([deposed], majority)
    t_cut = time.monotonic()
    new_name, _ = poll_until(lambda: (a := agreed(majority)) and a[1] > old_epoch and a, 30)
    t_new = time.monotonic()
    first = poll_until(lambda: [c for c in other.acked() if c.answered > t_new], 30)[0]
    # Let the cut-off broker go on trying for a while, then read what the
    # new controller holds: the view the heal must not change behind its back.
    poll_until(lambda: time.monotonic() > t_new + 6
               and sum(c.sent > t_cut for c in cut_off.done) >= 4, 60)  # fmt: skip
    t_view = time.monotonic()
    view = poll_until(lambda: topics_of(majority[1]), 30)
    # Healing takes a moment, host after host: what was answered before it
    # began had no help from it (a creation answered during it may succeed).
    t_healing = time.monotonic()
    lan.heal(hosts)
    t_heal = time.monotonic()
    never = {c.name for c in cut_off.done if c.outcome != "ok" and c.answered < t_healing}

    def after_heal() -> bool:  # and, meanwhile, nothing that must not be there is
        for host in hosts:
            seen = topics_of(host, stale=True) or set()
            assert not seen & never, f"{host.ns} holds {seen & never} after the heal"
        return len(cut_off.acked(after=t_heal)) >= 3 and len(other.acked(after=t_heal)) >= 3

    poll_until(after_heal, 90, interval_s=0.2)
    for creator in (cut_off, other):
        creator.halt.set()
        creator.join(30)

    final = poll_until(lambda: agreed_topics(hosts), 30)
    everything = cut_off.done + other.done
    acked = {c.name for c in everything if c.outcome == "ok"}
    assert acked <= final, f"acknowledged, then lost: {acked - final}"
    assert {c.name for c in everything if c.outcome == "ok" and c.answered < t_view} <= view
    assert not any(c.outcome == "exists" for c in everything)  # one request per name
    assert not {c.name for c in everything if c.outcome == "not_applied"} & final
    # Those the cut-off broker had finished with before the heal (none was
    # acknowledged: below) exist after it only if the majority held them.
    behind = {c.name for c in cut_off.done if c.answered < t_healing} & (final - view)
    assert not behind, f"appeared behind the new controller's back: {behind}"
    during = [c for c in cut_off.done if t_cut < c.sent and c.answered < t_healing]
    assert during and not [c for c in during if c.outcome == "ok"]  # a minority acks nothing
    assert first.answered - t_new < 10, "the majority could not create for too long"
    poll_until(lambda: serving(hosts, final), 60)  # the new assignment covers all, on all
    controller_host = next(h for h in hosts if f"host-{h.index}" == agreed(hosts)[0])
    assert set((ask(controller_host, {"op": "status"}, 5) or {})["topics"]) == final

    figure(
        f"[broker meta] controller {old_name} cut off, {new_name} elected "
        f"{t_new - t_cut:.2f} s after the cut; first majority-side topic created "
        f"{first.answered - t_new:.2f} s after that; cut for {t_heal - t_cut:.1f} s"
    )
    for label, creator in (("cut-off broker", cut_off), ("majority broker", other)):
        figure(
            f"[broker meta] {label}: before the cut {creator.counts(0, t_cut)}; "
            f"during it {creator.counts(t_cut, t_heal)}; after the heal "
            f"{creator.counts(t_heal, float('inf'))}"
        )
    figure(
        f"[broker meta] {len(final)} topics after the heal on every agent; the "
        f"majority's view at the heal held {len(view)}"
    )


def agreed_topics(hosts: list[Host]) -> set[str] | None:
    """The topics, once every agent's linearizable read and its own applied
    state say the same."""
    seen = [topics_of(h) for h in hosts] + [topics_of(h, stale=True) for h in hosts]
    if any(s is None for s in seen) or len({frozenset(s or ()) for s in seen}) != 1:
        return None
    return seen[0]
