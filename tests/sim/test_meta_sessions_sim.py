"""Sessions in the metadata log's swarm (sim/metasessions.py, issue 38):
clients open sessions of 1 to 3 s, write ephemeral keys under them,
renew every third of the TTL through their agent or another, close them,
crash or pause, under the swarm's faults (partitions, crashes before
fsync, lost disks, clock rates, a paused controller, loss). No key
outlives its session's committed end on any node or in any read, none
vanishes but by its end, a delete or an overwrite, no session expires
before the TTL its renewals (or a new controller's start) gave it, and
the histories, with each end an operation deleting its keys and the
swarm's online restores among them (sim/metarestore.py), are
linearizable: the checker decides every seed."""

import functools
import os

import pytest

from shoal.sim.meta import MetaRun, meta_run

# Each run is about 30 virtual seconds (1 to 3 s of CPU on a quiet core);
# SHOAL_SESSION_SEEDS widens the range.
SEEDS = range(1, int(os.environ.get("SHOAL_SESSION_SEEDS", "8")) + 1)
SESSION_CLIENTS = 3


@functools.cache
def run(seed: int) -> MetaRun:
    """One seed's run, once per session of tests (runs are deterministic),
    with the swarm's restores (3 a run)."""
    return meta_run(seed, sessions=SESSION_CLIENTS)


@pytest.mark.parametrize("seed", SEEDS)
def test_session_keys_go_with_their_session_and_only_then(seed):
    """Every check of sim/sessioncheck.py holds and the history, ends and
    restores included, is decided linearizable; the run did open, renew
    and end sessions, and restore."""
    r = run(seed)
    assert r.violations == [], (r.faults, r.violations)
    verdict = r.linearizable()
    assert verdict.ok, (r.faults, verdict.explanation)
    assert r.sessions is not None
    stats = r.sessions.stats
    assert stats.opened > 0 and stats.renewed > 0, stats
    assert stats.expired + stats.closed > 0, stats
    assert r.sessions.ends(), "no end in the history: the model checked no deletion"
    assert r.restores is not None and r.restores.stats.proposed > 0, "no restore in the history"


def test_sessions_expire_close_and_refuse_writes_across_seeds():
    """Over a few seeds the clients exercise what is checked: sessions
    expire (crashed and paused clients, renewals cut off) and are closed,
    ephemeral puts commit, and a client woken from a pause longer than its
    TTL is refused the write it makes under its old session (issue 38) or
    told its session ended."""
    runs = [run(seed) for seed in range(1, 7)]
    stats = [r.sessions.stats for r in runs if r.sessions is not None]
    assert sum(s.expired for s in stats) >= 8
    assert sum(s.closed for s in stats) >= 8
    assert sum(s.told_ended for s in stats) >= 1
    woken = [c.outcome for r in runs if r.sessions is not None for c in r.sessions.woken]
    assert "no_session" in woken, woken
    puts = [c for r in runs for c in r.calls if c.session and c.outcome == "ok"]
    assert len(puts) >= 100
