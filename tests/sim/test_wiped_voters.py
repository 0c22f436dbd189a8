"""Lost disks in the metadata log's swarm (sim/wipe.py): voters that held
committed entries come back with empty data directories while the voters
that lack those entries return from a cut. A voter is its name and its
data directory's id (election/voters.py, "Identity"): the checks catch the
bug where a wiped voter votes as its old self, the same seeds pass as the
code is, and the wiped voters end up voters again under their new ids."""

from collections.abc import Iterator

import pytest

from shoal.election.voters import VoterConfig
from shoal.sim.meta import meta_run

MAX_SEEDS = 40
# Seeds whose run loses disks (the fault needs a controller and enough
# live voters when it comes; in other runs it is skipped).
WIPED_SEEDS = (2, 7, 15, 17)


@pytest.fixture
def identity_ignored() -> Iterator[None]:
    VoterConfig.check_identity = False
    yield
    VoterConfig.check_identity = True


def test_the_checks_catch_a_wiped_voter_voting_as_its_old_self(identity_ignored):
    """Ignoring the id, a wiped voter (empty log: any candidate is up to
    date to it) grants as its old self, a voter that missed committed
    entries is elected with its grant, and acknowledged writes are lost."""
    caught = None
    for seed in range(1, MAX_SEEDS + 1):
        r = meta_run(seed)
        if r.violations or not r.linearizable().ok:
            caught = seed
            break
    assert caught is not None


@pytest.mark.parametrize("seed", WIPED_SEEDS)
def test_wiped_voters_never_vote_as_their_old_selves_and_come_back_as_new(seed):
    r = meta_run(seed, duration_s=60.0)
    assert any("wipe: cut" in f for f in r.faults), r.faults  # the fault happened
    assert r.violations == [], (r.faults, r.violations)
    verdict = r.linearizable()
    assert verdict.ok, (r.faults, verdict.explanation)
    cluster = r.cluster
    assert cluster is not None
    wiped = [i for i in range(cluster.n) if cluster.disks[i].wiped]
    assert wiped
    # In a run with 3 voters of 5 (sim/meta.py: the other two observe the
    # log) a host may end as an observer; every voter is still its current self.
    observed = "3 voters, 2 observers" in r.faults
    for i, node in enumerate(cluster.nodes):
        assert node is not None
        voters = node.election.voters
        assert voters is not None
        # Every host is a voter under the id of the data directory it runs on now.
        for j, ident in enumerate(cluster.idents):
            if observed and ident.name not in voters.voters:
                continue
            assert voters.identifies(ident.name, ident.node_id), (i, j, voters)
            assert voters.id_of(ident.name) == ident.node_id
    replaced = sum(n.election.counters.voters_replaced for n in cluster.nodes if n is not None)
    assert observed or replaced >= len(wiped)


# Seeds in which a wiped voter, back while the controller is down, sees
# enough members to bootstrap a lineage of its own with the same voters.
REBOOTSTRAP_SEEDS = (865, 1082)


def _by_ids_first(self: VoterConfig, other: VoterConfig | None) -> bool:
    """The rule before: two lineages with as many voters, the larger id wins."""
    if other is None:
        return True
    if self.lineage == other.lineage:
        return self.version > other.version
    return (len(self.voters), self.lineage) > (len(other.voters), other.lineage)


def test_a_wiped_voter_bootstrapping_a_new_lineage_does_not_replace_the_cluster(monkeypatch):
    """A lineage bootstrapped by a wiped voter (version 1) never replaces the
    cluster's own (election/voters.py): with the ids deciding, as before,
    the swarm's checks catch the lost entries; with the version first, the
    same seeds pass."""
    with monkeypatch.context() as m:
        m.setattr(VoterConfig, "supersedes", _by_ids_first)
        runs = [meta_run(s) for s in REBOOTSTRAP_SEEDS]
    assert any(r.violations or not r.linearizable().ok for r in runs)
    for seed in REBOOTSTRAP_SEEDS:
        r = meta_run(seed)
        assert r.violations == [] and r.linearizable().ok, (seed, r.faults)
