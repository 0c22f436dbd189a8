"""Voter changes through the metadata log with real agents, under writes
(issue 37; docs/metadata.md, "Voter changes"): a voter leaves for good
and stays a voter for `left_voter_grace_s` (8 s here, 60 s by default: a
restart within it changes nothing); then the controller commits its removal
and then the observer's addition as log entries, the observer becomes a
voter only once it holds the log, and every write acknowledged meanwhile is
there afterwards, on every agent."""

import threading
import time

from shoal.client import Client, ShoalError
from tests.conftest import poll_until
from tests.integration.metaagents import META, voter_roles, writable

GRACE_S = 8.0  # above the leave itself (up to leave_timeout_s, 5 s)


def test_a_voter_leaves_and_an_observer_takes_its_place_under_writes(agents, figure, tmp_path):
    config = tmp_path / "grace.toml"
    config.write_text(f"[election]\nleft_voter_grace_s = {GRACE_S}\n")
    # at most 5 voters: one observes
    started = agents.start(6, extra=[*META, "--config", str(config)])
    agents.wait_all_see([a.name for a in started], "alive", started)

    def roles():
        r = voter_roles(started[0])
        voters = sorted(n for n, v in r.items() if v == "voter")
        others = [n for n, v in r.items() if v == "non-voter"]
        return (voters, others) if len(voters) == 5 and len(others) == 1 else None

    voters, (observer,) = poll_until(roles, 60, interval_s=0.2)
    controller = started[0].api.get("/v1/controller")["controller"]
    leaving = next(a for a in started if a.name in voters and a.name != controller)
    writer = next(a for a in started if a.name not in (leaving.name,))
    poll_until(lambda: writable(writer), 30)
    acknowledged: dict[str, tuple[str, int]] = {}
    stop = threading.Event()

    def write() -> None:
        with Client(f"{writer.ip}:7947", timeout=10) as client:
            i = 0
            while not stop.is_set():
                key, value = f"topics/t{i}", f"v{i}"
                try:
                    acknowledged[key] = (value, client.meta.put(key, value).revision)
                except ShoalError:
                    pass  # not applied or unknown: not counted as acknowledged
                i += 1

    thread = threading.Thread(target=write)
    thread.start()
    try:
        poll_until(lambda: len(acknowledged) >= 20, 30)
        left_at = time.monotonic()
        leaving.stop()  # SIGTERM: a graceful leave
        # Within the grace it is still a voter, and the observer is not.
        assert voter_roles(writer).get(leaving.name) == "voter"
        assert voter_roles(writer).get(observer) == "non-voter"

        def replaced():
            r = voter_roles(writer)
            return r.get(observer) == "voter" and leaving.name not in {
                n for n, v in r.items() if v == "voter"
            }

        poll_until(replaced, 60, interval_s=0.1)
        took = time.monotonic() - left_at
        assert took >= GRACE_S  # not before its grace ran out
        during = len(acknowledged)
        poll_until(lambda: len(acknowledged) >= during + 20, 30)  # writes go on after
    finally:
        stop.set()
        thread.join(30)
    new_voters = sorted(n for n, v in voter_roles(writer).items() if v == "voter")
    assert new_voters == sorted([*(set(voters) - {leaving.name}), observer])
    figure(
        f"[meta voters] {leaving.name} left (SIGTERM) -> {observer} a voter in its place: "
        f"{took:.2f} s with a grace of {GRACE_S:.0f} s (both changes committed in the log); "
        f"{len(acknowledged)} writes acknowledged meanwhile, all found on every agent"
    )
    # Every acknowledged write, read linearizably through every remaining agent.
    for agent in (a for a in started if a is not leaving):
        with Client(f"{agent.ip}:7947", timeout=10) as client:
            listing = {item.key: (item.value.decode(), item.mod_revision)
                       for item in client.meta.list("topics/").items}  # fmt: skip
        missing = {k: v for k, v in acknowledged.items() if listing.get(k) != v}
        assert missing == {}, (agent.name, sorted(missing)[:5])
    # The observer's log holds the writes from before it voted (it caught up).
    with Client(f"{next(a for a in started if a.name == observer).ip}:7947") as client:
        assert client.meta.get("topics/t0", stale=True).value == b"v0"
