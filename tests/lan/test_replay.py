"""Replays by an attacker on the LAN who holds no key (issue 27).

Three encrypted agents share a virtual LAN with a fourth host that records
every frame on the segment and sends copies later (tests/lan/attacker.py):
datagrams with their original source spoofed, stream frames on new TCP
connections. Whatever the copy and wherever it is sent, a member counts it as
dropped and nothing it reports changes.

How "accepted" is measured: every copy delivered to a member must show up as
one more `dropped_*` in that member's `GET /v1/self` counters, whatever the
reason (`CopyLedger`). A copy that is not counted as dropped was accepted.

The tests share one cluster and run in file order: copies of steady traffic,
key commands, failover of the controller, restart of every agent.
"""

from __future__ import annotations

import http.client
import json
import threading
import time
from collections import Counter
from dataclasses import dataclass, field

import pytest

from shoal.daemon.keys import generate_key
from tests.conftest import poll_until
from tests.lan.attacker import Attacker, Datagram, ReplayWalk, StreamFrame
from tests.lan.netlab import Host, VirtualLan

pytestmark = [pytest.mark.root, pytest.mark.netns]

KEY = generate_key()
AGENT_ARGS = ("--encrypt", KEY)
STEADY_CAPTURE_S = 10.0
# docs/election.md: with kill -9 of the controller, every survivor named the
# successor within 2.4 s in 300 of 300 simulated runs.
FAILOVER_S = 2.4
TOLERANCE_S = 1.0  # issue 27: failover within its normal time plus 1 s
# A new controller sends its notice three times 0.25 s apart and twice more
# one renewal (1 s) apart (docs/election.md): all within this of its election.
NOTICES_S = 2.5
HELD_S = 8.0  # how long the successor controls before it dies, too
AFTER_FAILOVER_S = 15.0
COUNTED_WITHIN_S = 5.0  # a delivered copy is decoded within ms; this is slack


def name_of(host: Host) -> str:
    return f"host-{host.index}"


def controller_of(host: Host) -> dict | None:
    try:
        return host.api("/v1/controller")
    except (OSError, ValueError, http.client.HTTPException):
        return None


def counters(host: Host) -> dict[str, int]:
    return host.api("/v1/self")["counters"]


def drops(counts: dict[str, int]) -> Counter[str]:
    return Counter({k: v for k, v in counts.items() if k.startswith("dropped_")})


@dataclass
class Lab:
    """The shared cluster: three encrypted agents and the attacker."""

    lan: VirtualLan
    attacker: Attacker
    members: list[Host]

    def host_named(self, name: str) -> Host:
        return next(h for h in self.members if name_of(h) == name)

    def others(self, host: Host) -> list[Host]:
        return [h for h in self.members if h is not host]

    def start(self, host: Host) -> None:
        host.start_agent(extra=AGENT_ARGS)

    def settled(self, timeout_s: float = 30.0, controller: bool = True) -> tuple[str, int]:
        """Wait until every member lists every member alive and (unless not
        `controller`) all agree on a controller; its (name, epoch)."""
        hosts = self.members
        names = {name_of(h) for h in hosts}

        def check() -> tuple[str, int] | None:
            for host in hosts:
                view = host.members()
                if any(view.get(n) != "alive" for n in names):
                    return None
            return agreed(hosts) if controller else ("", 0)

        try:
            return poll_until(check, timeout_s, interval_s=0.1)
        except AssertionError:
            views = "\n".join(f"  {h.ns}: {h.members()} {controller_of(h)}" for h in hosts)
            raise AssertionError(f"the cluster did not settle in {timeout_s} s:\n{views}") from None

    def state_changes(self, expected: tuple[str, int]) -> list[str]:
        """What differs from every member alive in every view, with the
        controller and epoch `expected`."""
        changes = []
        names = {name_of(h) for h in self.members}
        for host in self.members:
            view = host.members()
            if any(view.get(n) != "alive" for n in names):
                changes.append(f"{name_of(host)} lists {view}")
            info = controller_of(host) or {}
            if (info.get("controller"), info.get("epoch")) != expected:
                changes.append(f"{name_of(host)} reports controller {info.get('controller')} "
                               f"epoch {info.get('epoch')}, not {expected}")  # fmt: skip
        return changes


def agreed(hosts: list[Host]) -> tuple[str, int] | None:
    """The (controller, epoch) every one of `hosts` reports, if they agree on one."""
    seen = {(c["controller"], c["epoch"]) if c else None for c in map(controller_of, hosts)}
    if len(seen) == 1:
        (only,) = seen
        if only and only[0] is not None:
            return only
    return None


def wait_until(at: float) -> None:
    """Let the cluster run (and the attacker capture) until monotonic `at`."""
    poll_until(lambda: time.monotonic() >= at, at - time.monotonic() + 5, interval_s=0.2)


class CopyLedger:
    """Copies sent to each member, against that member's drop counters.

    Args:
        attacker: sends the copies.
        members: the members copies go to; their counters are read now.
    """

    def __init__(self, attacker: Attacker, members: list[Host]) -> None:
        self.attacker = attacker
        self.members = members
        self.copies: Counter[str] = Counter()
        self._before = {h.ip: counters(h) for h in members}
        self._overflows = {h.ip: h.udp_receive_errors() for h in members}

    def send_datagrams(self, datagrams: list[Datagram], to: list[Host]) -> None:
        """Each datagram to each of `to`, original source spoofed."""
        for i, datagram in enumerate(datagrams):
            for host in to:
                self.attacker.replay_datagram(datagram, host.ip)
                self.copies[host.ip] += 1
            if i % 8 == 7:
                time.sleep(0.003)  # pace: no socket buffer of a member overflows

    def send_frames(self, frames: list[StreamFrame], to: list[Host]) -> None:
        """Each frame to each of `to`, on a new connection (answers discarded)."""
        for frame in frames:
            for host in to:
                self.attacker.replay_frame(frame, host.ip)
                self.copies[host.ip] += 1

    def verdict(self, timeout_s: float = COUNTED_WITHIN_S) -> str | None:
        """None if every copy sent was counted as dropped (and nothing
        else was); else how many were accepted, member by member."""

        def dropped_since(host: Host) -> int:
            return drops(counters(host)).total() - drops(self._before[host.ip]).total()

        def all_counted() -> bool:
            return all(dropped_since(h) >= self.copies[h.ip] for h in self.members)

        try:
            poll_until(all_counted, timeout_s, interval_s=0.1)
        except AssertionError:
            pass  # some were accepted: say how many below
        rows, accepted, extra = [], 0, 0
        for host in self.members:
            now = counters(host)
            reasons = drops(now)
            reasons.subtract(drops(self._before[host.ip]))
            got, sent = reasons.total(), self.copies[host.ip]
            accepted += max(0, sent - got)
            extra += max(0, got - sent)
            grew = Counter(now)
            grew.subtract(self._before[host.ip])
            overflows = host.udp_receive_errors() - self._overflows[host.ip]
            rows.append(f"  {name_of(host)}: {sent} copies, {got} counted as dropped "
                        f"{dict(+reasons)}; datagrams_in +{grew['datagrams_in']}, streams_in "
                        f"+{grew['streams_in']}, socket buffer overflows +{overflows}")  # fmt: skip
        if not accepted and not extra:
            return None
        total = sum(self.copies.values())
        more = f"; {extra} drops more than copies sent" if extra else ""
        return f"{accepted} of {total} copies accepted{more}:\n" + "\n".join(rows)


@dataclass
class Sighting:
    """What one host reported at one moment."""

    at: float
    host: str
    controller: str | None
    epoch: int | None
    declared_dead: bool  # its view had listed the watched member dead or left by then


class ControllerWatch:
    """Asks every host for its controller (and, first, whether its view
    lists `watched` dead or left), over and over, on a thread."""

    def __init__(self, hosts: list[Host], watched: str = "", interval_s: float = 0.1) -> None:
        self.hosts = hosts
        self.watched = watched
        self.seen: list[Sighting] = []
        self.declared: set[str] = set()  # hosts whose view listed `watched` dead or left
        self._interval_s = interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="controller-watch", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            for host in self.hosts:
                if self.watched and host.members().get(self.watched) in ("dead", "left"):
                    self.declared.add(host.ns)
                info = controller_of(host)
                if info is not None:
                    self.seen.append(Sighting(time.monotonic(), name_of(host), info["controller"],
                                              info["epoch"], host.ns in self.declared))  # fmt: skip
            self._stop.wait(self._interval_s)

    def stop(self) -> list[Sighting]:
        """Stop asking; everything seen."""
        self._stop.set()
        self._thread.join(10)
        return self.seen


@pytest.fixture(scope="module")
def lab(make_module_lan):
    lan = make_module_lan(3)
    attacker = Attacker(lan)  # capturing from before the first agent starts
    try:
        members = lan.hosts[:3]
        shared = Lab(lan, attacker, members)
        for host in members:
            shared.start(host)
        shared.settled(timeout_s=40)
        yield shared
    finally:
        attacker.close()


def test_copies_of_steady_traffic_are_refused_by_every_member_and_change_nothing(lab):
    """Every datagram and stream frame of 10 s of a settled cluster's traffic,
    sent again to every member (its receiver, the others, and its sender), is
    counted as dropped, and no member's view or controller changes."""
    controller = lab.settled()
    since = time.monotonic()
    wait_until(since + STEADY_CAPTURE_S)
    until = time.monotonic()
    datagrams = lab.attacker.captured_datagrams(since, until)
    frames = lab.attacker.captured_frames(since, until)
    assert len(datagrams) >= 30 and frames, f"captured {len(datagrams)} datagrams, {frames}"
    ledger = CopyLedger(lab.attacker, lab.members)
    ledger.send_datagrams(datagrams, lab.members)
    ledger.send_frames(frames, lab.members)
    report = ledger.verdict()
    changes = lab.state_changes(controller)
    assert report is None and not changes, (
        f"{len(datagrams)} datagrams and {len(frames)} frames captured in "
        f"{STEADY_CAPTURE_S:.0f} s, each sent to 3 members: {report or '0 accepted'}\n"
        f"changes: {changes or 'none'}")  # fmt: skip


def keys_held(host: Host, key: str) -> list[str]:
    """Where `host` still holds `key`: its `shoal keys list`, its keyring file."""
    where = []
    listing = host.shoal("keys", "list", "--local", "--json", check=False)
    try:
        if key in json.loads(listing.stdout)["keys"]:
            where.append("shoal keys list")
    except (ValueError, KeyError):
        where.append(f"shoal keys list failed: {listing.stdout}{listing.stderr}")
    if key in (host.lan.workdir / host.ns / "keyring").read_text():
        where.append("keyring file")
    return where


def requests_from(lab: Lab, host: Host, since: float, until: float = float("inf")):
    """Stream frames `host` opened a connection with, captured in [since, until]."""
    frames = lab.attacker.captured_frames(since, until, request=True)
    return [f for f in frames if f.src[0] == host.ip]


def test_a_removed_key_stays_removed_when_its_install_commands_are_replayed(lab):
    """After a cluster-wide `keys install K2` and `keys remove K2`, copies of
    the install commands sent to every member are counted as dropped, and K2
    is in no member's `shoal keys list` and no keyring file."""
    origin, k2 = lab.members[0], generate_key()
    since = time.monotonic()
    origin.shoal("keys", "install", k2)  # exits 1 unless every member acknowledged
    poll_until(lambda: len(requests_from(lab, origin, since)) >= 2, 5)
    removing_at = time.monotonic()
    origin.shoal("keys", "remove", k2)
    install = requests_from(lab, origin, since, removing_at)
    assert all(not keys_held(h, k2) for h in lab.members), "keys remove did not remove K2"
    ledger = CopyLedger(lab.attacker, lab.members)
    ledger.send_frames(install, lab.members)
    report = ledger.verdict()
    held = {name_of(h): w for h in lab.members if (w := keys_held(h, k2))}
    assert not held and report is None, (
        f"{len(install)} install frames sent to 3 members: K2 is back on {held or 'none'}; "
        f"{report or '0 accepted'}")  # fmt: skip


def test_a_key_reply_sent_as_a_request_is_counted_and_dropped_without_a_traceback(lab):
    """A captured answer to a key command, sent to a member's stream port as
    if it were a request, is counted as dropped, and no agent logs a traceback."""
    origin = lab.members[0]
    since = time.monotonic()
    origin.shoal("keys", "list")  # each other member answers with a KeyReply

    def replies() -> list[StreamFrame]:
        frames = lab.attacker.captured_frames(since, request=False)
        return [f for f in frames if f.dst[0] == origin.ip]

    answers = poll_until(lambda: len(replies()) >= 2 and replies(), 5)
    logged = {h.ns: len(h.log()) for h in lab.members}
    ledger = CopyLedger(lab.attacker, lab.members)
    ledger.send_frames(answers, lab.members)
    report = ledger.verdict()
    tracebacks = {name_of(h): n for h in lab.members
                  if (n := h.log()[logged[h.ns]:].count("Traceback"))}  # fmt: skip
    assert report is None and not tracebacks, (
        f"{len(answers)} reply frames sent to 3 members: {report or '0 accepted'}; "
        f"tracebacks logged: {tracebacks or 'none'}")  # fmt: skip


@dataclass
class Failover:
    """What happened when the controller died while its traffic was replayed."""

    dead: str
    epoch: int  # the dead controller's
    killed_at: float
    control_s: float  # failover without replay, in the same cluster
    attacked_s: float | None  # failover under replay; None: none within the watch
    successor: tuple[str, int] | None
    # Reports of the dead node as controller by a survivor that had declared
    # it dead, or after the successor was agreed.
    named_again: list[Sighting] = field(default_factory=list)
    report: str | None = None  # CopyLedger.verdict of every copy sent


def successor_of(hosts: list[Host], dead: str, epoch: int) -> tuple[str, int] | None:
    """The (controller, epoch) `hosts` agree on, if it is not `dead` and
    its epoch is above `epoch`."""
    now = agreed(hosts)
    return now if now and now[0] != dead and now[1] > epoch else None


def wait_failover(hosts: list[Host], dead: str, epoch: int,
                  timeout_s: float) -> tuple[str, int] | None:  # fmt: skip
    """`successor_of` once there is one; None if not within `timeout_s`."""
    try:
        return poll_until(lambda: successor_of(hosts, dead, epoch), timeout_s, interval_s=0.05)
    except AssertionError:
        return None


def control_run(lab: Lab) -> float:
    """Kill -9 the controller and wait for its successor, with no replay;
    bring the dead node back. The failover time."""
    first, epoch = lab.settled()
    killed_at = time.monotonic()
    lab.host_named(first).stop_agent()  # SIGKILL
    found = wait_failover(lab.others(lab.host_named(first)), first, epoch, 30)
    assert found, f"control run: no new controller within 30 s of killing {first}"
    failover_s = time.monotonic() - killed_at
    lab.start(lab.host_named(first))
    return failover_s


def held(lab: Lab, watch: ControllerWatch) -> tuple[str, int, float]:
    """Wait until every member agrees on a controller that has held its
    epoch for `HELD_S`: (name, epoch, when it was first reported)."""

    def check() -> tuple[str, int, float] | None:
        now = agreed(lab.members)
        if now is None:
            return None
        since = min((s.at for s in watch.seen if (s.controller, s.epoch) == now),
                    default=time.monotonic())  # fmt: skip
        return (*now, since) if time.monotonic() - since >= HELD_S else None

    return poll_until(check, 60, interval_s=0.1)


@pytest.fixture(scope="module")
def failover(lab) -> Failover:
    """A control run (`control_run`), then kill -9 of the controller once it
    has held its epoch for 8 s, while the attacker replays its datagrams to
    the survivors: its renewals every 0.8 s until the survivors know it is
    gone (they agree on a successor, or one declares it dead), then the
    notices of its election and everything else, for 15 s after the failover."""
    tenures = ControllerWatch(lab.members)
    try:
        control_s = control_run(lab)
        dead, epoch, elected_at = held(lab, tenures)
    finally:
        tenures.stop()
    dying = lab.host_named(dead)
    survivors = lab.others(dying)
    ledger = CopyLedger(lab.attacker, survivors)
    killed_at = time.monotonic()
    dying.stop_agent()  # SIGKILL
    sent = lab.attacker.captured_datagrams(elected_at - 1.0, killed_at, src=dying.ip)
    notices = [d for d in sent if d.at <= elected_at + NOTICES_S]
    renewals = [d for d in sent if d.at > elected_at + NOTICES_S]
    walk = ReplayWalk(lambda d: ledger.send_datagrams([d], survivors), renewals, notices)
    watch = ControllerWatch(survivors, watched=dead)
    try:
        try:
            poll_until(lambda: successor_of(survivors, dead, epoch) or watch.declared, 30, 0.05)
        except AssertionError:
            pass  # neither: wait_failover below says so
        walk.switch()
        left_s = max(0.1, killed_at + 30 - time.monotonic())
        successor = wait_failover(survivors, dead, epoch, left_s)
        agreed_at = time.monotonic() if successor else float("inf")
        wait_until(min(agreed_at, time.monotonic()) + AFTER_FAILOVER_S)
    finally:
        seen = watch.stop()
        walk.stop()
    named_again = [s for s in seen
                   if s.controller == dead and (s.declared_dead or s.at > agreed_at)]  # fmt: skip
    result = Failover(dead, epoch, killed_at, control_s,
                      agreed_at - killed_at if successor else None,
                      successor, named_again, ledger.verdict())  # fmt: skip
    lab.start(dying)
    lab.settled()
    return result


def test_replayed_renewals_of_a_dead_controller_do_not_delay_the_failover(failover):
    """With the dead controller's captured renewals sent to the survivors
    every 0.8 s, a successor with a higher epoch is agreed within the normal
    failover time plus 1 s."""
    bound_s = max(failover.control_s, FAILOVER_S) + TOLERANCE_S
    took_s = 1e9 if failover.attacked_s is None else failover.attacked_s
    took = "no successor within 30 s" if took_s == 1e9 else f"{took_s:.1f} s"
    assert took_s <= bound_s, (
        f"failover under replay: {took}; without replay {failover.control_s:.1f} s; "
        f"bound {bound_s:.1f} s")  # fmt: skip


def test_a_dead_controller_is_never_named_again_by_replayed_notices(failover):
    """While the dead controller's renewals, and then for 15 s after the
    failover its notices, are replayed to the survivors, neither reports it
    as controller once it has declared it dead or agreed on a successor."""
    again, successor = len(failover.named_again), failover.successor
    first = [f"{s.host} at +{s.at - failover.killed_at:.1f} s" for s in failover.named_again[:4]]
    assert successor is not None and not again, (
        f"successor {successor}; {again} times a survivor reported the dead "
        f"{failover.dead} (epoch {failover.epoch}) as controller after declaring it dead or "
        f"agreeing on a successor; first {first}")  # fmt: skip


def test_every_copy_of_a_dead_controllers_datagrams_is_refused(failover):
    """Each copy sent to a survivor during the failover was counted as dropped."""
    report = failover.report
    assert report is None, f"{report}\n(copies of the dead controller's datagrams)"


def test_copies_from_before_a_restart_of_every_agent_are_refused_after_it(lab):
    """After a controller handover and then a restart of every agent on its
    data directory, all the traffic captured before (datagrams and frames),
    sent again to every member as soon as they see each other, is counted as
    dropped, and no member reports a controller epoch below the highest seen
    before the restart."""
    first, epoch = lab.settled()
    since = time.monotonic()
    # A graceful handover inside the capture, so that it holds notices of
    # two epochs: the older must not come back after the restart.
    leaver = lab.host_named(first)
    leaver.terminate_agent()
    assert wait_failover(lab.others(leaver), first, epoch, 10), "no successor after a leave"
    lab.start(leaver)
    lab.settled()
    wait_until(since + STEADY_CAPTURE_S)
    highest = max((c or {}).get("epoch") or 0 for c in map(controller_of, lab.members))
    restart_at = time.monotonic()
    datagrams = lab.attacker.captured_datagrams(until=restart_at)
    frames = lab.attacker.captured_frames(until=restart_at)
    for host in lab.members:
        host.stop_agent()  # SIGKILL
    for host in lab.members:
        lab.start(host)
    watch = ControllerWatch(lab.members)
    lab.settled(controller=False)  # they see each other: usually before they elect
    ledger = CopyLedger(lab.attacker, lab.members)
    ledger.send_datagrams(datagrams, lab.members)
    ledger.send_frames(frames, lab.members)
    report = ledger.verdict()
    lab.settled()
    seen = watch.stop()
    lower = [f"{s.host}: {s.controller} epoch {s.epoch} at +{s.at - restart_at:.1f} s"
             for s in seen if s.controller is not None and (s.epoch or 0) < highest]  # fmt: skip
    assert report is None and not lower, (
        f"{len(datagrams)} datagrams and {len(frames)} frames captured before the restart "
        "(all of the module's capture), sent to 3 members: "
        f"{report or '0 accepted'}\nreports of an epoch below {highest}: "
        f"{len(lower)}, first {lower[:3]}")  # fmt: skip
