"""The lost-majority drill on real agents (issue 39; docs/operations.md,
"When most voters are lost"): five voters, three killed (-9) with their
data directories deleted; `shoal recover plan` and `apply` on the two
survivors; a controller within a stated bound, at an epoch above every
earlier one, with every write committed before the loss; the three started
again empty join as new non-voters and are promoted one at a time. And the
recovery refused, nothing written, while a voter left off the list runs."""

import hashlib
import re
import shutil
import time
from pathlib import Path

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


def recover(verb: str, agent, survivors: str, *extra: str):
    return shoal_cli("recover", verb, "--survivors", survivors, "--data-dir", str(agent.data_dir),
                     "--no-discovery", *extra)  # fmt: skip


def test_most_voters_lost_for_good_and_the_survivors_recovered(agents):
    members = meta_cluster(agents, 5)
    names = sorted(a.name for a in members)
    poll_until(lambda: sorted(controller_info(members[0]).get("voters", [])) == names
               and all(controller_info(members[0])["voter_ids"]), 60, interval_s=0.2)  # fmt: skip
    client = client_of(members[-1])
    written = {f"k{i}": client.meta.put(f"k{i}", f"v{i}").revision for i in range(WRITES)}
    before = controller_info(members[0])
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
    # Every write committed before the loss is there, at its revision.
    fresh = client_of(s1)
    poll_until(lambda: served(s1, "k0"), CONTROLLER_BOUND_S, interval_s=0.1)
    for key, revision in written.items():
        got = fresh.meta.get(key)
        assert got.value == f"v{key[1:]}".encode() and got.mod_revision == revision
    writable_s = time.monotonic() - started
    assert fresh.meta.put("after", "recovery").revision > max(written.values())

    # The three lost machines, started again empty: new members, promoted
    # one change at a time (one version per voter added).
    old_ids = dict(zip(before["voters"], before["voter_ids"], strict=True))
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
    assert client_of(lost[0]).meta.get("k0").mod_revision == written["k0"]
    print(f"\ndrill: loss to start of survivors {started - lost_at:.1f} s (two plans, two "
          f"applies); controller {elected_s:.1f} s after the start; every earlier write read "
          f"back by {writable_s:.1f} s; all five voters again by {promoted_s:.1f} s; "
          f"epoch {before['epoch']} -> {after['epoch']}")  # fmt: skip
