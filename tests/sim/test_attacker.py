"""A replaying attacker (sim/attacker.py) against the real cores: it copies
captured traffic to any member, inside the stamp window and beyond, and
every safety property, and the liveness bounds, must hold as without it.

The simulator has no sealing layer, so every copy reaches the cores: these
tests hold the cores' own rules (incarnations, epochs, request sequence
numbers, record versions) to account, whatever the sealing refuses."""

import random

import pytest
from msgspec.structs import replace

from shoal.membership.profiles import PROFILES
from shoal.sim.attacker import HORIZON_S, STAMP_WINDOW_S, Replayer
from shoal.sim.checks import FalsePositives, IncarnationMonotonic, converged, sees_dead
from shoal.sim.cluster import SimCluster
from shoal.sim.elections import swarm_run
from shoal.sim.failover import failover_run
from shoal.sim.network import LinkProfile
from shoal.sim.scenarios import form_cluster, run_simulation, run_until_converged
from tests.sim.conftest import seeds

LAN = PROFILES["lan"]
SWARM_SEEDS = 100
SWARM_REPLAYS_S = 10.0  # about a tenth of a 7-node cluster's datagrams, half of them election ones


def attacked(n: int, seed: int, rate: float, config=LAN, **kw) -> tuple[SimCluster, Replayer]:
    cluster = SimCluster(n, seed, config, **kw)
    return cluster, Replayer(cluster, rate)


def test_the_replayer_copies_old_and_new_traffic_to_any_member_in_bounded_memory():
    """Replays are inside the stamp window and beyond it, to the original
    receiver and to others, from a memory that stays bounded; the same seed
    gives the same attack."""

    def run(seed: int) -> tuple[Replayer, SimCluster]:
        cluster, replayer = attacked(10, seed, 20.0)
        form_cluster(cluster)
        cluster.run_until(400.0)
        return replayer, cluster

    replayer, cluster = run(5)
    assert replayer.replayed > 5_000 and replayer.short > 2_000 and replayer.long > 2_000
    delays = [r.delay_s for r in replayer.trace]
    assert min(delays) < 1.0 and max(delays) > 0.8 * HORIZON_S
    assert any(r.delay_s < STAMP_WINDOW_S for r in replayer.trace)
    own = [r for r in replayer.trace if cluster.idents[r.dst].addr == r.capture.to]
    assert 0.2 < len(own) / len(replayer.trace) < 0.5  # own_share 0.25, plus chance
    assert replayer.memory() <= replayer.per_second * (HORIZON_S + 2)
    assert replayer.captured > 5 * replayer.memory()
    again, _ = run(5)
    assert [(r.at, r.dst, r.capture.at) for r in again.trace] == [
        (r.at, r.dst, r.capture.at) for r in replayer.trace
    ]
    assert converged(cluster)


def test_a_replayer_that_only_captures_changes_nothing_in_the_run():
    """A run with a replayer that never replays is the run without one, event
    for event: figures with and without an attack compare the same schedule."""

    def events(with_replayer: bool) -> list:
        cluster = SimCluster(20, 3, LAN, LinkProfile(loss=0.05))
        seen = []

        class Trace:
            def on_event(self, now, node, event):
                seen.append((now, node, repr(event)))

        cluster.observers.append(Trace())
        if with_replayer:
            Replayer(cluster, 0.0)
        form_cluster(cluster)
        cluster.crash(4, 10.0)
        cluster.run_until(30.0)
        return seen

    assert events(True) == events(False)


# -- the election ------------------------------------------------------------------


def test_no_two_controllers_and_epochs_grow_across_swarm_runs_under_replay():
    """The election swarm (crashes, restarts, partitions, leaves, drift, slow
    disks) with copies of any traffic and of election messages replayed
    throughout: no overlapping leases, epochs grow, no grant before its
    epoch is durable, a controller within 20 s of healing, and no node ever
    reporting as controller a member its view holds dead or left."""
    bad, stuck, named = [], [], []
    for seed in range(SWARM_SEEDS):
        run = swarm_run(seed, replay_rate=SWARM_REPLAYS_S)
        assert run.replays > 150
        if run.violations:
            bad.append((seed, run.violations[:2], run.faults))
        if run.recovered_after_s is None:
            stuck.append((seed, run.faults))
        if run.named_dead:
            named.append((seed, run.named_dead[:2], run.faults))
    assert not bad, f"SHOAL_SIM_SEED={bad[0][0]}: {bad[0]}"
    assert not stuck, f"SHOAL_SIM_SEED={stuck[0][0]}: no controller after healing: {stuck[0]}"
    assert not named, f"SHOAL_SIM_SEED={named[0][0]}: {named[0]}"


@pytest.mark.slow
def test_swarm_safety_under_replay_over_2000_more_seeds():
    for seed in range(10_000, 12_000):
        run = swarm_run(seed, replay_rate=SWARM_REPLAYS_S)
        assert not run.violations, f"SHOAL_SIM_SEED={seed}: {run.violations[:2]} {run.faults}"
        assert run.recovered_after_s is not None, f"SHOAL_SIM_SEED={seed}: {run.faults}"
        assert not run.named_dead, f"SHOAL_SIM_SEED={seed}: {run.named_dead[:2]} {run.faults}"


@pytest.mark.parametrize("rate", [1.25, 20.0])
def test_replayed_renewals_of_a_dead_controller_do_not_delay_failover(rate):
    """kill -9 of the controller while its captured renewals and notices are
    replayed to the survivors (the issue's attack: one every 0.8 s; and 20 a
    second): on every seed, a successor is elected and known to every
    survivor within the failover time of the same seed without the attack,
    plus 1 s; no lease overlaps; no survivor names the dead one again."""
    slower = []
    for seed in range(40):
        normal = failover_run(seed)
        run = failover_run(seed, replay_rate=rate)
        assert normal.known_s is not None and run.replays > 0
        assert not run.violations, f"SHOAL_SIM_SEED={seed}: {run.violations[:2]}"
        assert not run.named_dead, f"SHOAL_SIM_SEED={seed}: {run.named_dead[:2]}"
        if run.known_s is None or run.known_s > normal.known_s + 1.0:
            slower.append((seed, normal.known_s, run.known_s))
    assert not slower, f"failover later than normal + 1 s (seed, normal, attacked): {slower}"


def test_replayed_notices_never_name_a_dead_controller_again():
    """The controller and two more of five voters are killed, so nobody can
    succeed it; its captured notices, replayed to the two survivors for 30 s
    after they have declared it dead, never make them report it again."""
    for seed in range(20):
        run = failover_run(seed, replay_rate=4.0, lost_voters=2)
        assert run.replays > 60 and run.elected_s is None
        assert not run.named_dead, f"SHOAL_SIM_SEED={seed}: {run.named_dead[:2]}"


def test_the_failover_attack_sends_the_dead_controllers_renewals_to_other_voters():
    """The failover attack really is the issue's: copies of the dead
    controller's lease requests, most to voters other than the one each was
    sent to."""
    run = failover_run(3, replay_rate=20.0)
    assert run.renewal_copies > 200
    assert run.renewal_copies_elsewhere > run.renewal_copies / 2


# -- membership ------------------------------------------------------------------


@pytest.mark.parametrize("seed", seeds())
def test_a_crashed_node_is_still_marked_dead_by_every_survivor_under_replay(seed):
    """kill -9 of one node of 100 while 100 copies a second are replayed: every
    survivor marks it dead within the usual 30 s, nobody marks a live node
    dead, and nobody sees an incarnation go down."""
    result = run_simulation(100, 60.0, crash=1, seed=seed, replay_rate=100.0)
    (crash,) = result.crashes
    assert result.replays > 4_000
    assert crash.all_detect_s is not None and crash.all_detect_s < 30.0
    assert result.false_positive_events == 0
    assert result.incarnation_violations == []


@pytest.mark.parametrize("seed", seeds())
def test_at_10_percent_loss_with_crashes_replays_add_no_false_positive(seed):
    """The lossy membership scenario (100 nodes, 10 % loss, two silent
    crashes, 2 minutes) with 50 replays a second: at most one live node is
    ever declared dead by one observer, the bound without the attacker."""
    result = run_simulation(100, 120.0, loss=0.10, crash=2, seed=seed, replay_rate=50.0)
    assert result.replays > 4_000
    assert result.false_positive_events <= 1
    assert result.incarnation_violations == []
    assert all(c.all_detect_s is not None for c in result.crashes)


@pytest.mark.parametrize("seed", seeds())
def test_a_partition_into_halves_heals_into_one_view_under_replay(seed):
    """Copies do not cross the partition (the attacker is on the LAN as it
    is), but old copies of the other half's traffic arrive after the heal:
    each side still declares the other dead, and the halves still merge."""
    config = replace(LAN, reconnect_interval_s=10.0)
    cluster, replayer = attacked(40, seed, 40.0, config)
    form_cluster(cluster)
    assert run_until_converged(cluster, 20.0) is not None
    start = cluster.now
    cluster.net.partition([list(range(20)), list(range(20, 40))])
    cluster.run_until(start + 60.0)
    assert sees_dead(cluster, 0) == list(range(20))
    cluster.net.heal()
    assert run_until_converged(cluster, start + 60.0 + 120.0) is not None
    assert replayer.long > 0


def test_incarnations_never_go_down_and_restarts_rejoin_under_replay():
    """Crashes and restarts (one at a new address) under 5 % loss while copies
    up to 5 minutes old are replayed: no observer sees an incarnation go
    down, no live node is declared dead, and the cluster converges with the
    restarted nodes alive above their old incarnations."""
    cluster, replayer = attacked(60, 9, 60.0, link=LinkProfile(loss=0.05, duplicate=0.02))
    incs, fps = IncarnationMonotonic(), FalsePositives(cluster)
    cluster.observers += [incs, fps]
    form_cluster(cluster)
    cluster.run_until(9.0)
    before = {v: cluster.disks[v].incarnation for v in (5, 17, 33)}
    for k, victim in enumerate(before):
        cluster.crash(victim, 10.0 + k * 5)
        cluster.restart(victim, 40.0 + k * 5, join=[0], new_address=victim == 17)
    cluster.run_until(360.0)
    assert incs.violations == []
    assert fps.events == []
    assert converged(cluster)
    assert replayer.long > 1_000
    for victim, inc in before.items():
        seen = cluster.nodes[3].swim.table.get(cluster.idents[victim].name)
        assert seen.incarnation > inc and seen.ident.addr == cluster.idents[victim].addr


def test_replicas_converge_to_the_newest_writes_under_replay():
    """Writes on every node while copies of old pushes, trees and records are
    replayed: every replica ends identical, holding each key's newest write."""
    cluster, replayer = attacked(20, 3, 50.0, link=LinkProfile(loss=0.02))
    form_cluster(cluster)
    assert run_until_converged(cluster, 30.0) is not None
    t0 = cluster.now
    rng = random.Random(3)
    newest: dict[bytes, tuple[float, bytes | None]] = {}
    for _ in range(400):
        key, at = b"k%d" % rng.randrange(60), t0 + rng.uniform(0, 60)
        value = None if rng.random() < 0.2 else rng.randbytes(8)
        cluster.write(rng.randrange(20), key, value, at)
        if key not in newest or newest[key][0] < at:
            newest[key] = (at, value)
    cluster.run_until(t0 + 60)

    def identical() -> bool:
        return len({cluster.nodes[i].sync.replica.tree.node(0, 0) for i in range(20)}) == 1

    assert cluster.run_until(t0 + 180, identical)
    for key, (_, value) in newest.items():
        records = {cluster.nodes[i].read(key) for i in range(20)}
        assert len(records) == 1
        (record,) = records
        assert record.value == value
    kinds = replayer.kinds
    assert kinds["SyncRecords"] > 0 and kinds["RecordPush"] > 0
    assert replayer.long > 500 and replayer.short > 500
