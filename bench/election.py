#!/usr/bin/env python3
"""Controller failover and handover: shoal against etcd and ZooKeeper.

Sections (all by default; pick with --only):

  sim        the simulator (5 nodes, LAN profile, default lease 2 s, clock
             drift within the bound): time from kill -9 of the controller to
             a successor holding the lease, and from a graceful leave to the
             successor; --sim-trials runs each.
  real       5 real agents on loopback (bootstrap_expect 5): kill -9 of the
             controller until every survivor reports the same new controller
             with a higher epoch (polled every 10 ms); SIGTERM likewise.
  etcd       a 3-member etcd cluster on loopback, 3 contenders running
             `etcdctl lock --ttl 2` (a session lease of 2 s, equal to our
             lease): kill -9 of the holder until the next one holds the lock.
  zookeeper  a 3-node ZooKeeper ensemble on loopback (tickTime 500 ms), 3
             contenders using kazoo's Election recipe (ephemeral sequential
             znodes, Kafka's mechanism) with a 2 s session timeout: kill -9
             of the leader until the next one leads.

    apt-get install etcd-server etcd-client zookeeper; pip install kazoo
    .venv/bin/python bench/election.py [--only sim real etcd zookeeper]
        [--sim-trials 50] [--trials 5]

Prints median and p99 (the maximum when there are fewer than 100 trials)
for each, and the ratios shoal / peer.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

from shoal.daemon.api.client import ApiClient  # noqa: E402
from shoal.election.config import LeaseConfig  # noqa: E402
from shoal.kernel.errors import ApiError  # noqa: E402
from shoal.membership.profiles import PROFILES  # noqa: E402
from shoal.sim.clock import NodeClock  # noqa: E402
from shoal.sim.cluster import SimCluster  # noqa: E402
from shoal.sim.elections import controllers  # noqa: E402
from shoal.sim.scenarios import form_cluster  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
LEASE_S = LeaseConfig().lease_s


def summary(values: list[float]) -> str:
    if not values:
        return "no data"
    ordered = sorted(values)
    p99 = ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]
    return (f"median {statistics.median(ordered):.3f} s, p99 {p99:.3f} s, "
            f"min {ordered[0]:.3f} s, n={len(ordered)}")  # fmt: skip


# -- simulator ----------------------------------------------------------------------


def sim_trial(seed: int, graceful: bool) -> float | None:
    rng = random.Random(seed)
    drift = LeaseConfig().drift_ratio_max * 0.9
    clocks = [NodeClock(rng.uniform(0, 50), rng.uniform(-drift, drift)) for _ in range(5)]
    cluster = SimCluster(5, seed, PROFILES["lan"], clocks=clocks, bootstrap_expect=5)
    form_cluster(cluster)
    if not cluster.run_until(30.0, lambda: len(controllers(cluster)) == 1):
        return None
    cluster.run_until(cluster.now + rng.uniform(2.0, 3.0))  # a random point between renewals
    (old,) = controllers(cluster)
    t0 = cluster.now
    if graceful:
        cluster.leave(old, t0)
    else:
        cluster.crash(old, t0)
    done = cluster.run_until(t0 + 30.0, lambda: any(i != old for i in controllers(cluster)))
    return cluster.now - t0 if done else None


def bench_sim(trials: int) -> dict[str, list[float]]:
    print(f"\n== simulator: 5 nodes, lease {LEASE_S} s, drift within the bound, {trials} trials")
    out = {}
    for graceful in (False, True):
        times = [t for s in range(trials) if (t := sim_trial(s, graceful)) is not None]
        label = "graceful leave -> successor" if graceful else "kill -9 -> successor"
        print(f"  {label:<30} {summary(times)}")
        out["leave" if graceful else "crash"] = times
    return out


# -- real agents -------------------------------------------------------------------


class Agents:
    def __init__(self, root: Path, n: int = 5) -> None:
        self.root = root
        self.ips = [f"127.0.0.{81 + i}" for i in range(n)]
        self.procs: dict[int, subprocess.Popen[bytes]] = {}

    def start(self, i: int) -> None:
        ip = self.ips[i]
        args = [sys.executable, "-m", "shoal.daemon.cli", "agent", "--node-name", f"bench-{i}",
                "--bind", f"{ip}:7946", "--api", f"{ip}:7947", "--data-dir",
                str(self.root / f"bench-{i}"), "--no-discovery", "--bootstrap-expect", "5",
                "--log-level", os.environ.get("BENCH_LOG_LEVEL", "warning")]  # fmt: skip
        for other in self.ips:
            if other != ip:
                args += ["--join", f"{other}:7946"]
        log = open(self.root / f"bench-{i}.log", "ab")
        self.procs[i] = subprocess.Popen(args, stdout=log, stderr=log, cwd=ROOT)
        log.close()

    def controller(self, i: int) -> tuple[str | None, int | None]:
        try:
            info = ApiClient((self.ips[i], 7947), timeout_s=1.0).get("/v1/controller")
        except ApiError:
            return (None, None)
        return info["controller"], info["epoch"]

    def agreed(self, among: list[int]) -> tuple[str, int] | None:
        seen = {self.controller(i) for i in among}
        if len(seen) == 1:
            (only,) = seen
            if only[0] is not None:
                return only  # type: ignore[return-value]
        return None

    def wait(self, predicate, timeout_s: float, interval_s: float = 0.01):
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            value = predicate()
            if value:
                return value
            time.sleep(interval_s)  # polling a live system for a benchmark figure
        raise TimeoutError("condition not reached")

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def bench_real(trials: int) -> dict[str, list[float]]:
    print(f"\n== real agents: 5 on loopback, lease {LEASE_S} s, {trials} trials each")
    root = Path(tempfile.mkdtemp(prefix="shoal-bench-el-"))
    agents = Agents(root)
    out: dict[str, list[float]] = {"crash": [], "leave": []}
    try:
        for i in range(5):
            agents.start(i)
        all_ = list(range(5))
        agents.wait(lambda: agents.agreed(all_), 60)
        rng = random.Random(1)
        for kind in ("crash", "leave"):
            for _ in range(trials):
                agents.wait(lambda: agents.agreed(all_), 60)
                # Kill at a random point of the renewal cycle, with every node
                # up for longer than a lease (as in steady state).
                time.sleep(rng.uniform(2.5, 3.5))
                name, epoch = agents.wait(lambda: agents.agreed(all_), 60)
                victim = int(name.split("-")[1])
                others = [i for i in all_ if i != victim]
                t0 = time.monotonic()
                agents.procs[victim].send_signal(signal.SIGKILL if kind == "crash"
                                                 else signal.SIGTERM)  # fmt: skip
                agents.wait(lambda o=others, e=epoch: (f := agents.agreed(o)) and f[1] > e, 30)
                out[kind].append(time.monotonic() - t0)
                agents.procs[victim].wait(20)
                agents.start(victim)
                agents.wait(lambda v=victim: agents.controller(v)[0] is not None, 60)
        print(f"  {'kill -9 -> all agree on successor':<38} {summary(out['crash'])}")
        print(f"  {'SIGTERM -> all agree on successor':<38} {summary(out['leave'])}")
    finally:
        agents.stop()
        shutil.rmtree(root, ignore_errors=True)
    return out


# -- etcd ------------------------------------------------------------------------------


def contenders_failover(start_contender, trials: int, label: str) -> list[float]:
    """Kill -9 the holder (the contender that printed ACQUIRED last) and time
    until another prints ACQUIRED; the killed one is replaced each time."""
    import selectors

    sel = selectors.DefaultSelector()
    procs: list[subprocess.Popen[str]] = []

    def spawn() -> None:
        p = start_contender(len(procs))
        procs.append(p)
        os.set_blocking(p.stdout.fileno(), False)
        sel.register(p.stdout, selectors.EVENT_READ, p)

    def next_acquired(timeout_s: float) -> subprocess.Popen[str] | None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for key, _ in sel.select(0.01):
                p = key.data
                data = p.stdout.read() or ""
                if "ACQUIRED" in data:
                    return p
        return None

    times: list[float] = []
    try:
        for _ in range(3):
            spawn()
        holder = next_acquired(30)
        rng = random.Random(1)
        for _ in range(trials):
            if holder is None:
                break
            time.sleep(rng.uniform(2.5, 3.5))  # a random point of the keep-alive cycle
            t0 = time.monotonic()
            os.killpg(holder.pid, signal.SIGKILL)
            sel.unregister(holder.stdout)
            holder.wait()
            new = next_acquired(30)
            if new is None:
                break
            times.append(time.monotonic() - t0)
            holder = new
            spawn()
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
    print(f"  {label:<38} {summary(times)}")
    return times


def bench_etcd(trials: int) -> list[float]:
    print(f"\n== etcd: 3 members on loopback, `etcdctl lock --ttl {LEASE_S:.0f}`, "
          f"{trials} trials")  # fmt: skip
    if not shutil.which("etcd") or not shutil.which("etcdctl"):
        print("  skipped: apt-get install etcd-server etcd-client")
        return []
    root = Path(tempfile.mkdtemp(prefix="shoal-bench-etcd-"))
    ips = [f"127.0.0.{91 + i}" for i in range(3)]
    cluster = ",".join(f"e{i}=http://{ip}:2380" for i, ip in enumerate(ips))
    servers = []
    try:
        for i, ip in enumerate(ips):
            log = open(root / f"e{i}.log", "wb")
            servers.append(subprocess.Popen(
                ["etcd", "--name", f"e{i}", "--data-dir", str(root / f"e{i}"),
                 "--listen-peer-urls", f"http://{ip}:2380",
                 "--initial-advertise-peer-urls", f"http://{ip}:2380",
                 "--listen-client-urls", f"http://{ip}:2379",
                 "--advertise-client-urls", f"http://{ip}:2379",
                 "--initial-cluster", cluster, "--initial-cluster-state", "new"],
                stdout=log, stderr=log))  # fmt: skip
        endpoints = ",".join(f"{ip}:2379" for ip in ips)
        env = {**os.environ, "ETCDCTL_API": "3"}
        deadline = time.monotonic() + 30
        while subprocess.run(["etcdctl", "--endpoints", endpoints, "endpoint", "health"],
                             env=env, capture_output=True).returncode != 0:  # fmt: skip
            if time.monotonic() > deadline:
                raise TimeoutError("etcd did not start")
            time.sleep(0.2)

        def contender(_: int) -> subprocess.Popen[str]:
            return subprocess.Popen(
                ["etcdctl", "--endpoints", endpoints, "lock", f"--ttl={LEASE_S:.0f}",
                 "shoal-bench", "--", "sh", "-c", "echo ACQUIRED; exec sleep 1000"],
                env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                start_new_session=True)  # fmt: skip

        return contenders_failover(contender, trials, "kill -9 of holder -> next holds")
    finally:
        for s in servers:
            s.kill()
            s.wait()
        shutil.rmtree(root, ignore_errors=True)


# -- ZooKeeper -----------------------------------------------------------------------

KAZOO_CONTENDER = textwrap.dedent("""
    import sys, time
    from kazoo.client import KazooClient
    zk = KazooClient(hosts=sys.argv[1], timeout=float(sys.argv[2]))
    zk.start()
    def lead():
        print("ACQUIRED", flush=True)
        time.sleep(1000)
    zk.Election("/shoal-bench", sys.argv[3]).run(lead)
""")


def bench_zookeeper(trials: int) -> list[float]:
    print(f"\n== ZooKeeper: 3-node ensemble on loopback, kazoo Election, session timeout "
          f"{LEASE_S} s, {trials} trials")  # fmt: skip
    jar = Path("/usr/share/java/zookeeper.jar")
    if not jar.exists() or not shutil.which("java"):
        print("  skipped: apt-get install zookeeper")
        return []
    try:
        import kazoo  # noqa: F401
    except ImportError:
        print("  skipped: pip install kazoo")
        return []
    root = Path(tempfile.mkdtemp(prefix="shoal-bench-zk-"))
    ips = [f"127.0.0.{101 + i}" for i in range(3)]
    servers = []
    try:
        for i, ip in enumerate(ips):
            data = root / f"z{i}"
            data.mkdir()
            (data / "myid").write_text(str(i + 1))
            cfg = root / f"z{i}.cfg"
            # tickTime 500 ms lets sessions be as short as 2 * tickTime = 1 s;
            # the clients ask for LEASE_S.
            cfg.write_text("\n".join([
                "tickTime=500", "initLimit=20", "syncLimit=5", f"dataDir={data}",
                "clientPort=2181", f"clientPortAddress={ip}",
                "admin.enableServer=false", "4lw.commands.whitelist=ruok",
                *(f"server.{j + 1}={ipj}:2888:3888" for j, ipj in enumerate(ips)),
            ]) + "\n")  # fmt: skip
            log = open(root / f"z{i}.log", "wb")
            servers.append(subprocess.Popen(
                ["java", "-Xmx256m", f"-Dzookeeper.log.dir={root}",
                 "-cp", f"/etc/zookeeper/conf:{jar}",
                 "org.apache.zookeeper.server.quorum.QuorumPeerMain", str(cfg)],
                stdout=log, stderr=log))  # fmt: skip
        hosts = ",".join(f"{ip}:2181" for ip in ips)
        from kazoo.client import KazooClient

        deadline = time.monotonic() + 60
        while True:
            probe = KazooClient(hosts=hosts, timeout=2.0)
            try:
                probe.start(timeout=5)
                probe.stop()
                break
            except Exception:
                if time.monotonic() > deadline:
                    raise TimeoutError("ZooKeeper did not start") from None
                time.sleep(0.5)

        def contender(i: int) -> subprocess.Popen[str]:
            return subprocess.Popen([sys.executable, "-c", KAZOO_CONTENDER, hosts, str(LEASE_S),
                                     f"c{i}"], stdout=subprocess.PIPE,
                                    stderr=subprocess.DEVNULL, text=True,
                                    start_new_session=True)  # fmt: skip

        return contenders_failover(contender, trials, "kill -9 of leader -> next leads")
    finally:
        for s in servers:
            s.kill()
            s.wait()
        shutil.rmtree(root, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--only", nargs="+", default=["sim", "real", "etcd", "zookeeper"])
    parser.add_argument("--sim-trials", type=int, default=50)
    parser.add_argument("--trials", type=int, default=5)
    args = parser.parse_args()
    print(f"shoal election benchmark: {os.cpu_count()} cores, lease {LEASE_S} s "
          f"(etcd TTL and ZooKeeper session timeout set to the same)")  # fmt: skip
    results: dict[str, list[float]] = {}
    if "sim" in args.only:
        sim = bench_sim(args.sim_trials)
        results["sim"] = sim["crash"]
    if "real" in args.only:
        results["real"] = bench_real(args.trials)["crash"]
    if "etcd" in args.only:
        results["etcd"] = bench_etcd(args.trials)
    if "zookeeper" in args.only:
        results["zookeeper"] = bench_zookeeper(args.trials)
    ours = results.get("real") or results.get("sim")
    if ours:
        for peer in ("etcd", "zookeeper"):
            if results.get(peer):
                ratio = statistics.median(ours) / statistics.median(results[peer])
                print(f"  failover ratio shoal / {peer} (medians): {ratio:.2f}x")


if __name__ == "__main__":
    main()
