#!/usr/bin/env python3
"""The metadata log against etcd and ZooKeeper, three members each, in the same run.

Each system runs in turn on loopback (three shoal agents started with
`--meta`; three etcd members from Debian's etcd-server; a three-server
ZooKeeper ensemble from Debian's zookeeper), with its defaults, and each is
measured the same way, 100-byte values over a key space of --keys keys
written once before the timed phases:

  put     sequential puts from one client talking to the leader (etcd's
          leader, ZooKeeper's leader, shoal's controller): p50 and p99.
  load    32 clients, each its own connection (keep-alive HTTP for shoal
          and etcd, one ZooKeeper session each), spread evenly over the three
          members, putting as fast as each is answered: puts/s.
  cas     one client, compare-and-set on one key with the revision the last
          write returned: etcd `txn` comparing mod_revision, ZooKeeper
          `set(version=v)`, shoal `PUT ?cas=R`.
  read    linearizable reads of one key from one client: etcd's default
          range (not `serializable`), ZooKeeper `sync()` then `get()`, shoal
          `GET` (ReadIndex through the controller).
  disk    a steady load of --disk-rate puts/s (8 clients) over the key space
          for --disk-seconds: the members' data directories (bytes allocated,
          all three together) before, at most during, and after.

etcd is driven through its own HTTP/JSON API (the gRPC gateway, `/v3/kv/put`,
`/v3/kv/range`, `/v3/kv/txn`) with keep-alive connections: the same client
code and the same protocol as shoal's, so the client costs the same on both
sides. etcdctl would start a process per operation (tens of ms of Go start-up
measured in every figure). The gateway does add one hop inside etcd (it
relays to etcd's gRPC server over loopback), so etcd's gRPC clients see a
little less latency than this; the figures say what an HTTP client gets.
ZooKeeper is driven through kazoo, its usual Python client.

Nothing is tuned: etcd fsyncs its WAL before acknowledging and ZooKeeper its
transaction log (forceSync=yes), as shoal makes an entry durable on a
majority before it answers. etcd keeps every revision (no auto-compaction by
default) and ZooKeeper every log and snapshot (autopurge off by default):
the disk rows show those defaults.

    make bench                        # installs the peers (root) and kazoo
    apt-get install etcd-server etcd-client zookeeper; pip install kazoo
    .venv/bin/python bench/meta.py [--only shoal etcd zookeeper] [--seconds 5]
        [--disk-seconds 20] [--disk-rate 300] [--keys 1000] [--quick]

--quick runs a second of each phase (a check that the bench runs, not a
figure). A system whose tools are missing is skipped with a line that says
so; a build of shoal without the metadata API prints that for its rows and
the peers are measured all the same. Every process and temp directory is
removed at exit, Ctrl-C included. All traffic stays on 127.77.x.y.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import http.client
import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Protocol

from storage import flush_cost_us, pct  # bench/storage.py, beside this file

ROOT = Path(__file__).resolve().parents[1]
VALUE = b"v" * 100
LOAD_CLIENTS = 32
DISK_CLIENTS = 8
CAS_KEY = "bench/cas"
UNAVAILABLE = "shoal: metadata API not available in this build (404 from /v1/meta)"
# A block of loopback addresses of this run's own (127.77.<pid>.x): the same
# ports serve every member and a second run never collides with this one.
NET = f"127.77.{os.getpid() % 250 + 1}"


class Unavailable(Exception):
    """A system that cannot be measured in this run (the reason is the message)."""


class Client(Protocol):
    """One connection to one member; put and cas return the token the next cas needs."""

    def put(self, key: str, value: bytes) -> int: ...
    def cas(self, key: str, value: bytes, token: int) -> int | None: ...
    def read(self, key: str) -> int: ...
    def close(self) -> None: ...


# -- processes -----------------------------------------------------------------------


class Members:
    """Three server processes and their logs; stopped by stop() whatever happens."""

    def __init__(self, name: str, first: int) -> None:
        self.name = name
        self.ips = [f"{NET}.{first + i}" for i in range(3)]
        self.procs: list[subprocess.Popen[bytes]] = []
        self.dirs: list[Path] = []

    def spawn(self, args: list[str], log: Path, cwd: Path | None = None,
              env: dict[str, str] | None = None) -> None:  # fmt: skip
        with open(log, "wb") as out:
            self.procs.append(subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT,
                                               cwd=cwd, env=env))  # fmt: skip

    def check_alive(self) -> None:
        for i, proc in enumerate(self.procs):
            if proc.poll() is not None:
                raise Unavailable(f"{self.name} member {i} exited ({proc.returncode}); "
                                  f"its log: {self.dirs[i]}.log")  # fmt: skip

    def disk_bytes(self) -> int:
        total = 0
        for top in self.dirs:
            for base, _, files in os.walk(top):
                for f in files:
                    with contextlib.suppress(FileNotFoundError):
                        total += os.lstat(os.path.join(base, f)).st_blocks * 512
        return total

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.terminate()
        for proc in self.procs:
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def wait_for(what: str, probe: Callable[[], Any], members: Members, timeout_s: float) -> Any:
    """Poll `probe` until it returns something true (errors count as not yet)."""
    deadline = time.monotonic() + timeout_s
    while True:
        members.check_alive()
        try:
            value = probe()
            if value:
                return value
        except (OSError, http.client.HTTPException, ValueError, KeyError):
            pass
        if time.monotonic() > deadline:
            raise Unavailable(f"{members.name}: {what} not within {timeout_s:.0f} s")
        time.sleep(0.2)  # polling a starting cluster


class Cluster:
    """Three members of one system, the leader's index among them, clients to any."""

    name = ""

    def __init__(self, first: int) -> None:
        self.members = Members(self.name, first)
        self.leader = 0

    def start(self, root: Path, quick: bool) -> None:
        raise NotImplementedError

    def connect(self, ip: str) -> Client:
        raise NotImplementedError

    def _leader(self) -> int:
        """1 + the index of the member that leads now, 0 while none does."""
        raise NotImplementedError

    def find_leader(self, timeout_s: float = 30) -> None:
        """Which member leads (it may have changed under load): the one-client phases use it."""
        self.leader = wait_for("a leader", self._leader, self.members, timeout_s) - 1

    def client(self, member: int | None) -> Client:
        """A new connection to `member`, or to the leader when it is None."""
        return self.connect(self.members.ips[self.leader if member is None else member])

    def disk_bytes(self) -> int:
        return self.members.disk_bytes()

    def stop(self) -> None:
        self.members.stop()


class Http:
    """A keep-alive HTTP/1.1 connection (http.client), reopened after an error."""

    def __init__(self, host: str, port: int) -> None:
        self.conn = http.client.HTTPConnection(host, port, timeout=10)

    def call(self, method: str, path: str, body: bytes | None = None) -> tuple[int, Any]:
        try:
            self.conn.request(method, path, body=body)
            resp = self.conn.getresponse()
            data = resp.read()
        except (OSError, http.client.HTTPException):
            self.conn.close()
            raise
        return resp.status, json.loads(data) if data else None

    def close(self) -> None:
        self.conn.close()


# -- shoal ---------------------------------------------------------------------------


class ShoalClient:
    def __init__(self, host: str) -> None:
        self.http = Http(host, 7947)

    def put(self, key: str, value: bytes) -> int:
        token = self.cas(key, value, None)
        assert token is not None
        return token

    def cas(self, key: str, value: bytes, token: int | None) -> int | None:
        path = f"/v1/meta/{key}" + ("" if token is None else f"?cas={token}")
        status, doc = self.http.call("PUT", path, value)
        if status == 409 and token is not None:
            return None
        if status != 200:
            raise RuntimeError(f"shoal PUT {status}: {doc}")
        return int(doc["revision"])

    def read(self, key: str) -> int:
        status, doc = self.http.call("GET", f"/v1/meta/{key}")
        if status != 200:
            raise RuntimeError(f"shoal GET {status}: {doc}")
        return int(doc["mod_revision"])

    def close(self) -> None:
        self.http.close()


def agent_python(tree: Path, link_dir: Path) -> tuple[list[str], dict[str, str]]:
    """How to run `python -m shoal...` from checkout `tree`: its .venv's Python
    (else this one), with `shoal` on PYTHONPATH pointing at the checkout, so
    that the checkout is what runs whichever tree a venv was installed from."""
    link = link_dir / "shoal"
    if not link.exists():
        link.symlink_to(tree.resolve())
    venv = tree / ".venv" / "bin" / "python"
    env = {**os.environ, "PYTHONPATH": str(link_dir), "PYTHONDONTWRITEBYTECODE": "1"}
    return [str(venv if venv.exists() else sys.executable)], env


class Shoal(Cluster):
    name = "shoal"

    def __init__(self, tree: Path, link_dir: Path) -> None:
        super().__init__(11)
        self.tree = tree
        self.python, self.env = agent_python(tree, link_dir)
        self.meta_flag = "--meta" in subprocess.run(
            [*self.python, "-m", "shoal.daemon.cli", "agent", "--help"], cwd=tree, env=self.env,
            capture_output=True, text=True).stdout  # fmt: skip

    def start(self, root: Path, quick: bool) -> None:
        ips = self.members.ips
        for i, ip in enumerate(ips):
            data = root / f"shoal-{i}"
            self.members.dirs.append(data)
            args = [*self.python, "-m", "shoal.daemon.cli", "agent", "--node-name",
                    f"meta-{i}", "--bind", f"{ip}:7946", "--api", f"{ip}:7947", "--data-dir",
                    str(data), "--no-discovery", "--bootstrap-expect", "3", "--log-level",
                    "warning", *(["--meta"] if self.meta_flag else [])]  # fmt: skip
            for other in ips:
                args += ["--join", f"{other}:7946"] if other != ip else []
            self.members.spawn(args, root / f"shoal-{i}.log", cwd=self.tree, env=self.env)
        self.find_leader(60)
        for ip in ips:  # each agent takes writes (forwarding them) before the clock starts
            probe = ShoalClient(ip)
            try:
                wait_for("a committed write", partial(self._probe, probe), self.members, 30)
            finally:
                probe.close()

    def _leader(self) -> int:
        names = set()
        for ip in self.members.ips:
            http = Http(ip, 7947)
            try:
                status, doc = http.call("GET", "/v1/controller")
            finally:
                http.close()
            names.add(doc.get("controller") if status == 200 else None)
        (only,) = names if len(names) == 1 else (None,)
        return int(only.rsplit("-", 1)[1]) + 1 if only else 0  # agents are meta-<i>

    def _probe(self, probe: ShoalClient) -> bool:
        status, _ = probe.http.call("PUT", "/v1/meta/bench/probe", b"x")
        if status in (404, 405):
            raise Unavailable(UNAVAILABLE)
        return status == 200

    def connect(self, ip: str) -> Client:
        return ShoalClient(ip)


# -- etcd ----------------------------------------------------------------------------


def b64(text: str | bytes) -> str:
    return base64.b64encode(text.encode() if isinstance(text, str) else text).decode()


class EtcdClient:
    """etcd's JSON API (the gRPC gateway), keep-alive: what an HTTP client of etcd uses."""

    def __init__(self, host: str) -> None:
        self.http = Http(host, 2379)

    def post(self, path: str, doc: dict[str, Any]) -> dict[str, Any]:
        status, out = self.http.call("POST", path, json.dumps(doc).encode())
        if status != 200:
            raise RuntimeError(f"etcd {path} {status}: {out}")
        return dict(out)

    def put(self, key: str, value: bytes) -> int:
        doc = self.post("/v3/kv/put", {"key": b64(key), "value": b64(value)})
        return int(doc["header"]["revision"])

    def cas(self, key: str, value: bytes, token: int) -> int | None:
        compare = {"key": b64(key), "target": "MOD", "result": "EQUAL", "mod_revision": token}
        put = {"request_put": {"key": b64(key), "value": b64(value)}}
        doc = self.post("/v3/kv/txn", {"compare": [compare], "success": [put]})
        return int(doc["header"]["revision"]) if doc.get("succeeded") else None

    def read(self, key: str) -> int:
        return int(self.post("/v3/kv/range", {"key": b64(key)})["kvs"][0]["mod_revision"])

    def close(self) -> None:
        self.http.close()


class Etcd(Cluster):
    name = "etcd"

    def __init__(self) -> None:
        super().__init__(21)
        if not shutil.which("etcd"):
            raise Unavailable("etcd: skipped (apt-get install etcd-server)")

    def start(self, root: Path, quick: bool) -> None:
        ips = self.members.ips
        cluster = ",".join(f"e{i}=http://{ip}:2380" for i, ip in enumerate(ips))
        for i, ip in enumerate(ips):
            data = root / f"etcd-{i}"
            self.members.dirs.append(data)
            self.members.spawn(
                ["etcd", "--name", f"e{i}", "--data-dir", str(data),
                 "--listen-peer-urls", f"http://{ip}:2380",
                 "--initial-advertise-peer-urls", f"http://{ip}:2380",
                 "--listen-client-urls", f"http://{ip}:2379",
                 "--advertise-client-urls", f"http://{ip}:2379",
                 "--initial-cluster", cluster, "--initial-cluster-state", "new",
                 "--initial-cluster-token", f"shoal-bench-{os.getpid()}"],
                root / f"etcd-{i}.log")  # fmt: skip
        self.find_leader(60)

    def _leader(self) -> int:
        for i, ip in enumerate(self.members.ips):
            client = EtcdClient(ip)
            try:
                doc = client.post("/v3/maintenance/status", {})
            finally:
                client.close()
            if doc.get("leader") and doc["leader"] == doc["header"]["member_id"]:
                return i + 1  # true for member 0 too
        return 0

    def connect(self, ip: str) -> Client:
        return EtcdClient(ip)


# -- ZooKeeper -----------------------------------------------------------------------

ZK_JAR = Path("/usr/share/java/zookeeper.jar")


class ZkClient:
    """One kazoo session pinned to one server; keys are znodes under /bench."""

    def __init__(self, host: str) -> None:
        from kazoo.client import KazooClient

        self.zk = KazooClient(hosts=f"{host}:2181", timeout=10.0)
        self.zk.start(timeout=30)

    def put(self, key: str, value: bytes) -> int:
        path = "/" + key
        try:
            return int(self.zk.set(path, value).version)
        except self._errors().NoNodeError:
            self.zk.create(path, value, makepath=True)
            return 0

    def cas(self, key: str, value: bytes, token: int) -> int | None:
        try:
            return int(self.zk.set("/" + key, value, version=token).version)
        except self._errors().BadVersionError:
            return None

    def read(self, key: str) -> int:
        self.zk.sync("/" + key)
        return int(self.zk.get("/" + key)[1].mzxid)

    @staticmethod
    def _errors() -> Any:
        from kazoo import exceptions

        return exceptions

    def close(self) -> None:
        self.zk.stop()
        self.zk.close()


class ZooKeeper(Cluster):
    name = "ZooKeeper"

    def __init__(self) -> None:
        super().__init__(31)
        if not ZK_JAR.exists() or not shutil.which("java"):
            raise Unavailable("ZooKeeper: skipped (apt-get install zookeeper)")
        try:
            import kazoo  # noqa: F401
        except ImportError:
            raise Unavailable("ZooKeeper: skipped (pip install kazoo)") from None
        logging.getLogger("kazoo").setLevel(logging.CRITICAL)

    def start(self, root: Path, quick: bool) -> None:
        ips = self.members.ips
        for i, ip in enumerate(ips):
            data = root / f"zk-{i}"
            data.mkdir()
            self.members.dirs.append(data)
            (data / "myid").write_text(f"{i + 1}\n")
            cfg = root / f"zk-{i}.cfg"
            # Debian's zoo.cfg (tickTime 2000, initLimit 10, syncLimit 5) and
            # ZooKeeper's defaults otherwise (forceSync, snapCount, no purge);
            # the admin server (port 8080) off, `srvr` to find the leader.
            cfg.write_text("\n".join([
                "tickTime=2000", "initLimit=10", "syncLimit=5", f"dataDir={data}",
                "clientPort=2181", f"clientPortAddress={ip}", "admin.enableServer=false",
                "4lw.commands.whitelist=srvr", "maxClientCnxns=0",
                *(f"server.{j + 1}={other}:2888:3888" for j, other in enumerate(ips)),
            ]) + "\n")  # fmt: skip
            self.members.spawn(
                ["java", "-Xmx512m", f"-Dzookeeper.log.dir={root}", "-cp",
                 f"/etc/zookeeper/conf:{ZK_JAR}",
                 "org.apache.zookeeper.server.quorum.QuorumPeerMain", str(cfg)],
                root / f"zk-{i}.log")  # fmt: skip
        self.find_leader(90)

    def _leader(self) -> int:
        for i, ip in enumerate(self.members.ips):
            with socket.create_connection((ip, 2181), timeout=2) as sock:
                sock.sendall(b"srvr")
                reply = sock.makefile("rb").read()
            if b"Mode: leader" in reply:
                return i + 1
        return 0

    def connect(self, ip: str) -> Client:
        return ZkClient(ip)


# -- the phases ----------------------------------------------------------------------


@dataclass
class Run:
    """What one phase measured: operations, their latencies (s), errors, our CPU."""

    seconds: float
    lat: list[float] = field(default_factory=list)
    errors: int = 0
    first_error: str = ""
    client_cpu_s: float = 0.0

    @property
    def rate(self) -> float:
        return len(self.lat) / self.seconds


Op = Callable[[Client, int, int], None]


def drive(system: Cluster, op: Op, clients: int, seconds: float, *,
          leader: bool = False, rate: float = 0.0, ops: int = 0) -> Run:  # fmt: skip
    """`clients` threads, each with its own connection (to the leader, or
    spread over the members), calling `op` back to back, or paced to `rate`
    operations per second in all, until `seconds` have passed (or each has
    called it `ops` times)."""
    if leader:
        system.find_leader()
    conns = [system.client(None if leader else w % 3) for w in range(clients)]
    run = Run(seconds)
    lock = threading.Lock()
    start = threading.Barrier(clients + 1)

    def worker(w: int) -> None:
        start.wait()
        t_end, n = run_until, 0
        while (now := time.perf_counter()) < t_end and run.errors < 100 and n != (ops or -1):
            if rate:
                due = t_begin + n * clients / rate
                if due > now:
                    time.sleep(due - now)  # pacing the steady load
            t0 = time.perf_counter()
            try:
                op(conns[w], w, n)
            except Exception as exc:  # a failed operation is a counted error
                with lock:
                    run.errors += 1
                    run.first_error = run.first_error or f"{type(exc).__name__}: {exc}"
            else:
                with lock:
                    run.lat.append(time.perf_counter() - t0)
            n += 1

    threads = [threading.Thread(target=worker, args=(w,), daemon=True) for w in range(clients)]
    try:
        for t in threads:
            t.start()
        cpu0 = time.process_time()
        t_begin = time.perf_counter()
        run_until = t_begin + seconds
        start.wait()
        for t in threads:
            t.join()
        run.client_cpu_s = time.process_time() - cpu0
    finally:
        for c in conns:
            c.close()
    return run


def measure(system: Cluster, args: argparse.Namespace) -> dict[str, float]:
    """The five phases against a started system; prints each as it ends."""
    keys = [f"bench/k/{i}" for i in range(args.keys)]
    seconds = 1.0 if args.quick else args.seconds
    disk_s = 1.0 if args.quick else args.disk_seconds
    out: dict[str, float] = {"disk_start": system.disk_bytes() / 1e6}

    def fill(c: Client, w: int, n: int) -> None:
        c.put(keys[(w + LOAD_CLIENTS * n) % len(keys)], VALUE)

    def put(c: Client, w: int, n: int) -> None:
        c.put(keys[n % len(keys)], VALUE)

    def read(c: Client, w: int, n: int) -> None:
        c.read(keys[n % len(keys)])

    fill_up = drive(system, fill, LOAD_CLIENTS, 600, ops=-(-len(keys) // LOAD_CLIENTS))
    if fill_up.errors:
        report(system.name, "writing every key once", fill_up)
    drive(system, fill, LOAD_CLIENTS, 1.0 if args.quick else 3.0)  # warm-up (the JVM's JIT)
    runs = {"put": drive(system, put, 1, seconds, leader=True),
            "load": drive(system, fill, LOAD_CLIENTS, seconds),
            "cas": drive(system, cas_op(), 1, seconds, leader=True),
            "read": drive(system, read, 1, seconds, leader=True)}  # fmt: skip
    labels = ("put, 1 client", f"put, {LOAD_CLIENTS} clients", "cas, 1 client",
              "linearizable read")  # fmt: skip
    for label, (name, run) in zip(labels, runs.items()):
        report(system.name, label, run)
        out[f"{name}_p50"], out[f"{name}_p99"] = ms(run.lat, 0.5), ms(run.lat, 0.99)
    out["load"] = runs["load"].rate
    out.update(steady_disk(system, fill, disk_s, args.disk_rate, out["disk_start"]))
    return out


def ms(lat: list[float], q: float) -> float:
    return pct(lat, q) if lat else float("nan")


def cas_op() -> Op:
    """Compare-and-set after compare-and-set, each with the token the last returned."""
    token: dict[int, int] = {}

    def op(c: Client, w: int, n: int) -> None:
        if w not in token:
            token[w] = c.put(CAS_KEY, VALUE)
        new = c.cas(CAS_KEY, VALUE, token.pop(w))
        if new is None:
            raise RuntimeError("cas refused with the current revision")
        token[w] = new

    return op


def steady_disk(system: Cluster, fill: Op, seconds: float, rate: float,
                start_mb: float) -> dict[str, float]:  # fmt: skip
    """Disk use (MB, all members) under a paced load, sampled every 0.5 s."""
    peak = [system.disk_bytes()]
    before = peak[0] / 1e6
    done = threading.Event()

    def sample() -> None:
        while not done.wait(0.5):
            peak.append(system.disk_bytes())

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        run = drive(system, fill, DISK_CLIENTS, seconds, rate=rate)
    finally:
        done.set()
        sampler.join()
    end = system.disk_bytes() / 1e6
    peak.append(int(end * 1e6))
    report(system.name, f"steady load, {rate:.0f}/s asked", run)
    print(f"  {system.name:<10} disk: {start_mb:.1f} MB at start, {before:.1f} MB before the "
          f"steady load, at most {max(peak) / 1e6:.1f} MB during it, {end:.1f} MB after",
          flush=True)  # fmt: skip
    growth = (end - before) * 1e3 / max(len(run.lat), 1) * 1000
    return {"disk_end": end, "disk_peak": max(peak) / 1e6, "disk_writes": len(run.lat),
            "disk_kb_per_1k": growth}  # fmt: skip


def report(name: str, label: str, run: Run) -> None:
    errors = f", {run.errors} errors (first: {run.first_error[:160]})" if run.errors else ""
    if not run.lat:
        print(f"  {name:<10} {label:<24} no operation succeeded{errors}", flush=True)
        return
    print(f"  {name:<10} {label:<24} {len(run.lat):>7,} ops {run.rate:>9,.0f}/s  "
          f"p50 {ms(run.lat, 0.5):7.3f} ms  p99 {ms(run.lat, 0.99):7.3f} ms  "
          f"client CPU {run.client_cpu_s / run.seconds:4.0%}{errors}", flush=True)  # fmt: skip


# -- configuration, table, main ------------------------------------------------------


def versions(tree: Path, link_dir: Path) -> list[str]:
    """One line per system: its version and its durability settings (all defaults)."""

    def first_line(cmd: list[str]) -> str:
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
            return (done.stdout or done.stderr).splitlines()[0].strip()
        return "not installed"

    python, env = agent_python(tree, link_dir)
    shoal = subprocess.run([*python, "-c", "import shoal, shoal.native as n; "
                            "print(shoal.__version__, n.describe(), sep=', ')"],
                           capture_output=True, text=True, env=env).stdout.strip()  # fmt: skip
    rev = first_line(["git", "-C", str(tree), "describe", "--always", "--dirty"])
    try:
        import kazoo

        kazoo_version = kazoo.__version__
    except ImportError:
        kazoo_version = "not installed"
    zk = first_line(["dpkg-query", "-W", "-f", "${Version}", "zookeeper"])
    return [
        f"shoal {shoal} ({tree}, {rev}): defaults; an entry is "
        "answered once a majority has it durable (synced RocksDB writes)",
        f"{first_line(['etcd', '--version'])}: defaults; WAL fdatasync before a proposal "
        "is acknowledged, snapshot-count 100000, no auto-compaction; client: JSON gateway",
        f"ZooKeeper {zk} ({first_line(['java', '-version'])}, -Xmx512m): defaults; "
        f"forceSync=yes, snapCount 100000, autopurge off; client: kazoo {kazoo_version}",
    ]


ROWS = [  # (label, key)
    ("put p50, 1 client (ms)", "put_p50"),
    ("put p99, 1 client (ms)", "put_p99"),
    (f"puts/s, {LOAD_CLIENTS} clients", "load"),
    (f"put p50, {LOAD_CLIENTS} clients (ms)", "load_p50"),
    ("CAS p50 (ms)", "cas_p50"),
    ("CAS p99 (ms)", "cas_p99"),
    ("linearizable read p50 (ms)", "read_p50"),
    ("linearizable read p99 (ms)", "read_p99"),
    ("disk at start (MB)", "disk_start"),
    ("disk after the steady load (MB)", "disk_end"),
    ("disk at most during it (MB)", "disk_peak"),
    ("writes in the steady load", "disk_writes"),
    ("disk growth per 1k writes (KB)", "disk_kb_per_1k"),
]


def table(results: dict[str, dict[str, float]]) -> None:
    """The figures side by side, and shoal's as a ratio of each peer's."""
    names = ["shoal", "etcd", "ZooKeeper"]
    print(f"\n  {'':<34}" + "".join(f"{n:>11}" for n in names)
          + f"{'shoal/etcd':>12}{'shoal/ZK':>10}")  # fmt: skip
    for label, key in ROWS:
        cells = [results.get(n, {}).get(key) for n in names]
        line = "".join(f"{'-':>11}" if c is None else f"{c:>11,.3f}" if c < 100
                       else f"{c:>11,.0f}" for c in cells)  # fmt: skip
        ours = cells[0]
        for peer, width in ((cells[1], 12), (cells[2], 10)):
            line += (
                f"{ours / peer:>{width - 1}.3g}x"
                if ours is not None and peer
                else f"{'-':>{width}}"
            )
        print(f"  {label:<34}{line}")
    print("  (ratios are shoal / peer: below 1 is better for shoal in latency and disk rows, "
          "above 1 in puts/s and writes)")  # fmt: skip
    if "shoal" in results and "etcd" in results:
        p50 = results["shoal"]["put_p50"] / results["etcd"]["put_p50"]
        load = results["shoal"]["load"] / results["etcd"]["load"]
        print(f"  issue 37's aim: put p50 no worse than etcd's ({p50:.2f}x), "
              f"{LOAD_CLIENTS}-client throughput at least etcd's ({load:.2f}x)")  # fmt: skip


def bench_one(make: Callable[[], Cluster], args: argparse.Namespace,
              root: Path) -> dict[str, dict[str, float]]:  # fmt: skip
    """Start one system, measure it, stop it: {its name: its figures}, or
    nothing (and a line saying why) when it cannot run."""
    system: Cluster | None = None
    try:
        system = make()
        print(f"\n== {system.name}: starting 3 members", flush=True)
        t0 = time.monotonic()
        system.start(root, args.quick)
        print(f"  up in {time.monotonic() - t0:.1f} s", flush=True)
        return {system.name: measure(system, args)}
    except Unavailable as why:
        print(f"\n  {why}", flush=True)
    except Exception as exc:  # one system failing must not lose the others' figures
        print(f"\n  {getattr(system, 'name', '?')}: failed: {type(exc).__name__}: {exc}")
    finally:
        if system is not None:
            system.stop()
    return {}


@contextlib.contextmanager
def interrupts_as_exit() -> Iterator[None]:
    """SIGTERM, SIGHUP and SIGINT (even where a shell started us with it
    ignored, in the background) unwind like Ctrl-C: every finally clause runs."""

    def stop(signum: int, _: object) -> None:
        raise KeyboardInterrupt(signal.Signals(signum).name)

    old = {s: signal.signal(s, stop) for s in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)}
    try:
        yield
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--only", nargs="+", default=["shoal", "etcd", "zookeeper"],
                        choices=["shoal", "etcd", "zookeeper"])  # fmt: skip
    parser.add_argument("--seconds", type=float, default=5.0, help="per timed phase")
    parser.add_argument("--disk-seconds", type=float, default=20.0, help="the steady load")
    parser.add_argument("--disk-rate", type=float, default=300.0, help="puts/s, steady load")
    parser.add_argument("--keys", type=int, default=1000, help="the key space")
    parser.add_argument("--quick", action="store_true", help="a second of each phase")
    parser.add_argument("--tree", type=Path, default=ROOT,
                        help="run the agents of this checkout (its .venv's Python if it has "
                             "one), e.g. a worktree of a branch not merged yet")  # fmt: skip
    args = parser.parse_args()
    if args.quick:
        args.keys = min(args.keys, 100)
    try:
        run_all(args)
    except KeyboardInterrupt as why:
        print(f"\ninterrupted ({why or 'SIGINT'}): every process stopped, temp files removed")
        sys.exit(130)


def run_all(args: argparse.Namespace) -> None:
    """Each system in turn in one temp directory, then the table."""
    with interrupts_as_exit(), tempfile.TemporaryDirectory(prefix="shoal-bench-meta-",
                                                           dir="/var/tmp") as tmp:  # fmt: skip
        root = Path(tmp)
        makers: dict[str, Callable[[], Cluster]] = {
            "shoal": lambda: Shoal(args.tree, root),
            "etcd": Etcd,
            "zookeeper": ZooKeeper,
        }
        print(f"shoal metadata benchmark: {os.cpu_count()} cores, load {os.getloadavg()[0]:.2f}, "
              f"one fdatasync {flush_cost_us(root, 50):.0f} us (median), Python "
              f"{sys.version.split()[0]}, loopback {NET}.x, {args.keys} keys, "
              f"{len(VALUE)}-byte values")  # fmt: skip
        for line in versions(args.tree, root):
            print(f"  {line}")
        results: dict[str, dict[str, float]] = {}
        for name in args.only:
            results.update(bench_one(makers[name], args, root))
        table(results)


if __name__ == "__main__":
    main()
