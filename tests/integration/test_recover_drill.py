"""The lost-majority drill on real agents (issue 39; docs/operations.md,
"When most voters are lost"): five voters, three killed (-9) with their
data directories deleted; `shoal recover plan` and `apply` on the two
survivors; a controller within a stated bound, at an epoch above every
earlier one, with every write committed before the loss; the three started
again empty join as new non-voters and are promoted one at a time; every
agent's saved voter configuration is the current one, after a restart
too. And the recovery refused, nothing written, while a voter left off the
list runs."""

import hashlib
import re
import shutil
import time
from pathlib import Path

from shoal.daemon.disk.datadir import DataDir
from tests.conftest import poll_until
from tests.integration.metaagents import client_of, controller_name, meta_cluster, shoal_cli

WRITES = 40
# From the survivors' start to a controller that commits a write: their
# voter grants bind for lease_s * (1 + drift) after a restart (2.2 s), then
# one campaign; generous for a loaded machine.
CONTROLLER_BOUND_S = 15.0


def controller_info(agent) -> dict:
    try:
        info: dict = agent.api.get("/v1/controller")
    except Exception:
        return {}
    return info


def voters_with_ids(agent) -> list[str]:
    """The voters `agent` names, once each has its data directory's id."""
    info = controller_info(agent)
    ids = info.get("voter_ids", [])
    if len(ids) != len(info.get("voters", ())) or not all(ids):
        return []
    return sorted(info["voters"])


def stored(directory: Path) -> tuple:
    """What a data directory holds (its agent stopped): identity, election
    state, metadata log and snapshot."""
    data = DataDir(directory, 4, "shoal")
    try:
        return (data.load_identity(), data.load_election(), data.load_log(),
                data.load_snapshot())  # fmt: skip
    finally:
        data.close()


def applied(agent, key: str) -> bytes | None:
    """`key`'s value in `agent`'s own applied state (None: not there yet)."""
    try:
        return client_of(agent).meta.get(key, stale=True).value
    except Exception:
        return None


def served(agent, key: str) -> bool:
    """A linearizable read of `key` through `agent` is served."""
    try:
        client_of(agent).meta.get(key)
    except Exception:
        return False
    return True


def digest(directory: Path) -> str:
    """Every file's bytes under `directory` (a data directory unchanged?)."""
    h = hashlib.sha256()
    for path in sorted(p for p in directory.rglob("*") if p.is_file() and p.name != "LOCK"):
        h.update(str(path.relative_to(directory)).encode() + path.read_bytes())
    return h.hexdigest()


def saved_configs_are(members, version: int, names: list[str]) -> None:
    """Once every agent names configuration `version`, each one's data
    directory holds it (voters `names`, recovery 1), and again after all
    of them are killed and started again."""
    for restarted in (False, True):
        poll_until(lambda: all(controller_info(a).get("voters_version") == version
                               for a in members), 60, interval_s=0.2)  # fmt: skip
        for a in members:  # -9: a stop would leave, and a voter that leaves is removed
            a.kill()
        for a in members:
            saved = stored(a.data_dir)[1][1]
            assert (saved.version, saved.recovery, sorted(saved.voters)) == (version, 1, names), (
                a.name, restarted, saved)  # fmt: skip
            a.start()


def recover(verb: str, agent, survivors: str, *extra: str):
    return shoal_cli("recover", verb, "--survivors", survivors, "--data-dir", str(agent.data_dir),
                     "--node-name", agent.name, "--no-discovery", *extra)  # fmt: skip


def test_most_voters_lost_for_good_and_the_survivors_recovered(agents):
    members = meta_cluster(agents, 5)
    names = sorted(a.name for a in members)
    poll_until(lambda: voters_with_ids(members[0]) == names, 60, interval_s=0.2)
    client = client_of(members[-1])
    written = {f"k{i}": client.meta.put(f"k{i}", f"v{i}").revision for i in range(WRITES)}
    before = controller_info(members[0])
    old_ids = {a.name: a.api.get("/v1/self")["node_id"] for a in members}
    ctl = controller_name(members[0])
    # The controller and two others are lost; the two left survive.
    lost = [a for a in members if a.name == ctl][:1]
    lost += [a for a in members if a.name != ctl][: 3 - len(lost)]
    s1, s2 = [a for a in members if a not in lost]
    for s in (s1, s2):  # each survivor has applied the last write
        poll_until(lambda: applied(s, f"k{WRITES - 1}") == f"v{WRITES - 1}".encode(), 30,
                   interval_s=0.1)  # fmt: skip
    for a in lost:
        a.kill()
        shutil.rmtree(a.data_dir)
    lost_at = time.monotonic()
    probes = [x for a in lost for x in ("--probe", a.gossip)]

    # s2, left off the list, still runs: refused, nothing written.
    s1.stop()
    unchanged = digest(s1.data_dir)
    refused = recover("plan", s1, s1.name, *probes, "--probe", s2.gossip)
    assert refused.returncode == 2, refused
    err = refused.stderr.decode().strip()
    assert len(err.splitlines()) == 1 and s2.gossip in err and "still runs" in err, err
    assert refused.stdout == b"" and digest(s1.data_dir) == unchanged

    s2.stop()
    survivors = f"{s1.name},{s2.name}"
    words = []
    for s in (s1, s2):
        out = recover("plan", s, survivors, *probes)
        assert out.returncode == 0, out
        words += re.findall(r"^summary: (\S+)$", out.stdout.decode(), re.M)
    assert len(words) == 2
    bases = set()
    for s in (s1, s2):
        out = recover("apply", s, survivors, *probes, "--summaries", ",".join(words))
        assert out.returncode == 0, out
        bases |= set(re.findall(r"^base: (\S+)", out.stdout.decode(), re.M))
    assert len(bases) == 1 and bases <= {s1.name, s2.name}  # printed, and the same on both
    # Each survivor saved the recovered configuration: the survivors, one
    # version above the old one, recovery 1 (a report said a follower's
    # stayed at version 1: not so, here and after the restarts below).
    recovered = [stored(s.data_dir)[1] for s in (s1, s2)]
    assert recovered[0] == recovered[1], recovered
    epoch, config = recovered[0]
    assert config.version == before["voters_version"] + 1 and config.recovery == 1
    assert sorted(config.voters) == sorted([s1.name, s2.name]) and epoch > before["epoch"]
    # Applied once, the survivors are a majority of their configuration: a
    # second recovery is refused.
    again = recover("plan", s1, survivors, "--summaries", ",".join(words))
    assert again.returncode == 2 and b"run `shoal recover plan`" in again.stderr

    for s in (s1, s2):
        s.join = [o.gossip for o in (s1, s2) if o is not s]
        s.start()
    started = time.monotonic()
    poll_until(lambda: controller_info(s1).get("controller") in bases, CONTROLLER_BOUND_S,
               interval_s=0.1)  # fmt: skip
    elected_s = time.monotonic() - started
    after = controller_info(s1)
    assert after["epoch"] > before["epoch"] and sorted(after["voters"]) == sorted(
        [s1.name, s2.name]
    )
    assert after["voters_version"] == config.version
    # Every write committed before the loss is there, at its revision.
    fresh = client_of(s1)
    poll_until(lambda: served(s1, "k0"), CONTROLLER_BOUND_S, interval_s=0.1)
    for key, revision in written.items():
        got = fresh.meta.get(key)
        assert got.value == f"v{key[1:]}".encode() and got.mod_revision == revision
    writable_s = time.monotonic() - started
    assert fresh.meta.put("after", "recovery").revision > max(written.values())
    # Both survivors, the follower too, still hold the recovered
    # configuration once it has led and after a restart.
    saved_configs_are([s1, s2], config.version, sorted([s1.name, s2.name]))
    poll_until(lambda: served(s1, "k0"), CONTROLLER_BOUND_S * 2, interval_s=0.1)

    # The three lost machines, started again empty: new members, promoted
    # one change at a time (one version per voter added).
    for a in lost:
        a.join = [s1.gossip, s2.gossip]
        a.start()
    poll_until(lambda: sorted(controller_info(s1).get("voters", [])) == names, 120,
               interval_s=0.2)  # fmt: skip
    promoted_s = time.monotonic() - started
    final = controller_info(s1)
    assert final["voters_version"] == after["voters_version"] + 3
    ids = dict(zip(final["voters"], final["voter_ids"], strict=True))
    assert all(ids[a.name] != old_ids[a.name] for a in lost)
    # Caught up from nothing: the earlier writes are in its own state.
    poll_until(lambda: applied(lost[0], f"k{WRITES - 1}") == f"v{WRITES - 1}".encode(), 30,
               interval_s=0.1)  # fmt: skip
    # Every agent's saved voter configuration is the final one, the
    # followers' too, and again after all five restart.
    saved_configs_are(members, final["voters_version"], names)
    print(f"\ndrill: loss to start of survivors {started - lost_at:.1f} s (two plans, two "
          f"applies); controller {elected_s:.1f} s after the start; every earlier write read "
          f"back by {writable_s:.1f} s; all five voters again by {promoted_s:.1f} s; "
          f"epoch {before['epoch']} -> {after['epoch']}")  # fmt: skip


def test_recovery_is_refused_while_multicast_dns_finds_a_voter_left_off(agents):
    """Agents with discovery on (the default): the voters left off the list
    that still run answer multicast DNS, and `plan` refuses, naming them,
    with no --probe given."""
    started = list(agents.start(3, extra=["--meta"]))
    agents.wait_all_see([a.name for a in started], "alive", started)
    poll_until(lambda: served(started[-1], "none") or writable_meta(started[-1]), 60,
               interval_s=0.2)  # fmt: skip
    lone = started[0]
    lone.kill()
    unchanged = stored(lone.data_dir)  # (the database is opened to read it: compared by content)
    out = shoal_cli("recover", "plan", "--survivors", lone.name, "--data-dir", str(lone.data_dir),
                    "--node-name", lone.name)  # fmt: skip
    assert out.returncode == 2, out
    err = out.stderr.decode().strip()
    assert len(err.splitlines()) == 1 and "still runs (multicast DNS)" in err, err
    assert all(a.name in err for a in started[1:]) and stored(lone.data_dir) == unchanged


def writable_meta(agent) -> bool:
    try:
        client_of(agent).meta.put("ready", "1")
    except Exception:
        return False
    return True


def test_voters_back_with_their_old_data_after_a_recovery_are_fenced(agents):
    """Three voters stop with their disks intact and are recovered around;
    started again with their old configuration (five voters, no recovery)
    and old epochs, they adopt the recovered one: none leads, the survivors'
    controller stays, every write is there, and they become voters again
    only through the controller, one change at a time."""
    members = meta_cluster(agents, 5)
    names = sorted(a.name for a in members)
    poll_until(lambda: voters_with_ids(members[0]) == names, 60, interval_s=0.2)
    client = client_of(members[-1])
    written = {f"k{i}": client.meta.put(f"k{i}", f"v{i}").revision for i in range(20)}
    ctl = controller_name(members[0])
    lost = [a for a in members if a.name == ctl][:1]
    lost += [a for a in members if a.name != ctl][: 3 - len(lost)]
    s1, s2 = [a for a in members if a not in lost]
    for s in (s1, s2):
        poll_until(lambda: applied(s, "k19") == b"v19", 30, interval_s=0.1)
    for a in (*lost, s1, s2):
        a.kill()  # the lost three keep their data directories
    survivors = f"{s1.name},{s2.name}"
    probes = [x for a in lost for x in ("--probe", a.gossip)]
    words = [re.findall(r"^summary: (\S+)$", recover("plan", s, survivors, *probes).stdout
                        .decode(), re.M)[0] for s in (s1, s2)]  # fmt: skip
    mark = {a.name: len(a.log()) for a in members}  # each log from the restart on
    for s in (s1, s2):
        assert recover("apply", s, survivors, "--summaries", ",".join(words)).returncode == 0
        s.join = [o.gossip for o in (s1, s2) if o is not s]
        s.start()
    poll_until(lambda: served(s1, "k0"), 30, interval_s=0.1)
    recovered = controller_info(s1)
    base = recovered["controller"]
    assert base in (s1.name, s2.name)
    leader = s1 if base == s1.name else s2
    assert "controller-elected" in leader.log()[mark[base] :]
    for a in lost:  # all three at once: a majority of their old configuration
        a.join = [s1.gossip, s2.gossip]
        a.start()
    poll_until(lambda: sorted(controller_info(s1).get("voters", [])) == names, 120,
               interval_s=0.2)  # fmt: skip
    for a in lost:
        seen = controller_info(a)
        # A survivor leads (the base, or on a loaded machine a survivor that
        # re-won a lapsed lease at a later epoch): never an old voter.
        assert seen["controller"] in (s1.name, s2.name) and seen["epoch"] >= recovered["epoch"], (
            seen
        )
        assert "controller-elected" not in a.log()[mark[a.name] :]
    assert controller_info(s1)["voters_version"] == recovered["voters_version"] + 3
    poll_until(lambda: served(lost[0], "k0"), 30, interval_s=0.1)
    for key, revision in written.items():
        assert client_of(lost[0]).meta.get(key).mod_revision == revision
    # The three came back with the old configuration saved: each has the
    # recovered one's successor saved now, as the survivors have.
    saved_configs_are(members, recovered["voters_version"] + 3, names)


def test_bad_input_to_recover_is_one_line_and_exit_2(tmp_path):
    """A list, a directory, a summary or a probe that cannot be used: one
    line, exit 2, nothing printed to stdout, the directory as it was."""
    directory = tmp_path / "d"
    DataDir(directory, 4, "shoal").close()  # a data directory no cluster ever formed in
    d = ["--data-dir", str(directory), "--node-name", "a", "--no-discovery"]
    plain = shoal_cli("recover", "plan", "--survivors", "a", *d)
    assert plain.returncode == 0, plain
    (word,) = re.findall(r"^summary: (\S+)$", plain.stdout.decode(), re.M)
    before = stored(directory)
    cases = [
        (["plan", "--survivors", ",", *d], "expected distinct node names"),
        (["plan", "--survivors", "a,a", *d], "expected distinct node names"),
        (["plan", "--survivors", "a", "--data-dir", str(tmp_path / "none")], "no shoal data"),
        (["plan", "--survivors", "b", *d], "is not on the list"),
        (["plan", "--survivors", "a", *d, "--probe", "no such host:1"], "--probe"),
        (["apply", "--survivors", "a", *d, "--summaries", "garbage"], "is not a summary"),
        (["apply", "--survivors", "a", *d, "--summaries", word], "no voter configuration"),
        (["apply", "--survivors", "a,b", *d, "--summaries", word], "one summary for each"),
    ]
    for args, why in cases:
        out = shoal_cli("recover", *args)
        err = out.stderr.decode().strip()
        assert out.returncode == 2 and out.stdout == b"", (args, out)
        assert len(err.splitlines()) == 1 and why in err, (args, err)
    assert stored(directory) == before
