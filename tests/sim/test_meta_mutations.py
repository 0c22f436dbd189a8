"""The swarm's checks are trusted because they catch deliberate bugs: each
of four mutations of the metadata log, put in on purpose and taken out
again, is caught within the first 40 seeds (usually the first ten); so are
four of its sessions (issue 38), by the swarm with session clients."""

from collections.abc import Iterator

import pytest

from shoal.election.voter import Voter
from shoal.metalog.core import MetaLog
from shoal.metalog.sessionclock import SessionClock
from shoal.metalog.state import MetaState
from shoal.sim.meta import meta_run

MAX_SEEDS = 40


def first_caught(sessions: int = 0) -> int | None:
    """The first seed whose run the checks reject (None: none of MAX_SEEDS)."""
    for seed in range(1, MAX_SEEDS + 1):
        r = meta_run(seed, sessions=sessions)
        if r.violations or not r.linearizable().ok:
            return seed
    return None


@pytest.fixture
def restored() -> Iterator[None]:
    yield
    MetaLog.mutation = None
    MetaState.mutation = None
    SessionClock.mutation = None
    Voter.check_log = True


@pytest.mark.parametrize("mutation", ["commit_alone", "read_without_quorum"])
def test_the_checks_catch_a_mutated_log(mutation, restored):
    """Acknowledging a write once only the leader's disk holds it, or
    serving reads without confirming the leadership (a deposed controller
    answers stale), breaks a history or loses an acknowledged write."""
    MetaLog.mutation = mutation
    assert first_caught() is not None


def test_the_checks_catch_a_snapshot_one_entry_short(restored):
    """A snapshot that claims index S but holds the state before entry S
    (what a node restarted from it, or a follower that installed it, then
    serves): the states at equal revisions differ."""
    MetaLog.mutation = "snapshot_short"
    seed = first_caught()
    assert seed is not None
    r = meta_run(seed)
    assert any("is not the committed entries' state" in v for v in r.violations), r.violations


def test_the_checks_catch_a_transaction_that_ignores_its_compares(restored):
    """A transaction that runs its success branch though a compare failed
    (a transfer over a balance another client changed) is caught by the
    model's transactions, checked over both of their keys at once."""
    MetaState.mutation = "txn_ignores_compares"
    assert first_caught() is not None


def test_the_checks_catch_a_vote_without_the_up_to_date_check(restored):
    """Granting a new epoch to a candidate whose log is behind elects a
    controller without entries a majority acknowledged."""
    Voter.check_log = False
    assert first_caught() is not None


def test_without_a_mutation_the_same_seeds_pass():
    """The seeds the mutations are caught on pass as the code is."""
    for seed in range(1, 11):
        r = meta_run(seed)
        assert r.violations == [] and r.linearizable().ok, seed


@pytest.mark.parametrize("mutation", ["no_grace", "renewal_ignored"])
def test_the_checks_catch_a_session_expired_before_its_ttl(mutation, restored):
    """A new controller that counts a session's TTL from long ago instead
    of from its own start, or one that answers renewals without moving the
    deadline, expires sessions whose clients renewed in time."""
    SessionClock.mutation = mutation
    seed = first_caught(sessions=3)
    assert seed is not None
    r = meta_run(seed, sessions=3)
    assert any("before its TTL" in v for v in r.violations), r.violations


def test_the_checks_catch_a_renewal_served_past_the_lease(restored):
    """Seed 83 pauses its controller past its lease; woken, it finds
    renewals queued while it slept. Served before its election's timers
    tell the log the lease is gone (the bug the swarm found), they are
    caught; the run passes as the code is."""
    assert meta_run(83, sessions=3).violations == []
    SessionClock.mutation = "serve_past_lease"
    r = meta_run(83, sessions=3)
    assert any("after its lease ended" in v for v in r.violations), r.violations


def test_the_checks_catch_a_session_end_that_keeps_its_keys(restored):
    """A session's end that leaves its keys: the nodes hold keys of an
    ended session, and, apart from that, the model finds a read after
    the end that still sees one (or a write that meets it)."""
    MetaState.mutation = "end_keeps_keys"
    seed = first_caught(sessions=3)
    assert seed is not None
    r = meta_run(seed, sessions=3)
    assert any("after its end" in v for v in r.violations), r.violations
    runs = (meta_run(seed, sessions=3) for seed in range(1, 11))
    assert any(not r.linearizable().ok for r in runs)
