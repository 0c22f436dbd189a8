"""The metadata log on an agent that is not a voter: it observes the log
(the controller replicates to it without counting it in any majority), so
a write, a linearizable and a stale read, a listing and a watch all work
through it as through a voter (issue 37: "every other agent as a
non-voting observer")."""

from shoal.client import Client
from tests.conftest import poll_until
from tests.integration.metaagents import META, voter_roles, writable


def test_an_agent_that_is_not_a_voter_serves_writes_reads_listings_and_watches(agents):
    started = agents.start(6, extra=META)  # at most 5 voters: one observes
    agents.wait_all_see([a.name for a in started], "alive", started)

    def the_observer():
        roles = voter_roles(started[0])
        voters = [n for n, r in roles.items() if r == "voter"]
        others = [n for n, r in roles.items() if r == "non-voter"]
        return others[0] if len(voters) == 5 and len(others) == 1 else None

    name = poll_until(the_observer, 60, interval_s=0.2)
    observer = next(a for a in started if a.name == name)
    poll_until(lambda: writable(observer), 30, interval_s=0.2)
    voter = next(a for a in started if a.name != name)
    with Client(f"{observer.ip}:7947", timeout=10) as mine, \
            Client(f"{voter.ip}:7947", timeout=10) as theirs:  # fmt: skip
        watch = mine.meta.watch("topics/", from_revision=1)
        written = [theirs.meta.put(f"topics/t{i}", f"v{i}") for i in range(5)]
        written.append(mine.meta.put("topics/t5", "v5"))
        # Linearizable: through the controller, then this agent's own state.
        assert mine.meta.get("topics/t4").value == b"v4"
        got = mine.meta.get("topics/t0")
        assert got.value == b"v0" and got.mod_revision == written[0].revision
        # Its own applied state holds the entries too (it observes the log).
        poll_until(lambda: mine.meta.get("topics/t5", stale=True).value == b"v5", 5)
        listing = mine.meta.list("topics/")
        assert [item.key for item in listing.items] == [f"topics/t{i}" for i in range(6)]
        seen = [next(watch) for _ in range(6)]
        watch.close()
        assert [(e.key, e.revision) for e in seen] == [
            (f"topics/t{i}", w.revision) for i, w in enumerate(written)
        ]
    assert voter_roles(started[0])[name] == "non-voter"  # it observed, never voted
