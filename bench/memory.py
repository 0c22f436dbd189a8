#!/usr/bin/env python3
"""What an agent's memory is made of, and its RSS in a cluster beside Serf's.

Two parts, in the same run:

1. Layers: a fresh interpreter takes the agent's start-up steps one at a
   time (the interpreter, the command line, the configuration and the cores,
   the agent module, zeroconf, the API server, the RocksDB database opened
   with shoal's options) and reports its RSS after each, split into
   anonymous memory (Python objects: mostly code objects and module
   dictionaries) and file-backed pages (the interpreter and the shared
   libraries it maps; shared between agents, counted in each one's RSS).
2. Cluster: N agents (default 20) on loopback join one seed; once all see
   all and discovery has started (6 s later), each agent's RSS, anonymous
   and file-backed parts, PSS and thread count, then its working set: the
   resident pages it touched in the next 10 s (/proc/PID/clear_refs, then
   smaps' Referenced); Serf's agents the same way when `serf` is
   installed. Medians.

`--before PYTHON` measures a second shoal, another checkout's venv (e.g.
/work/before/.venv/bin/python), in the same run. Agents and layers run with
up-to-date bytecode caches (bench/bytecode.py), as an installed agent does.

    .venv/bin/python bench/memory.py [--agents 20] [--settle 6] [--before PYTHON]
        [--subnet 62] [--cluster bench-memory]
    .venv/bin/python bench/memory.py --by-library
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bytecode import agent_python  # noqa: E402
from detect_vs_serf import (  # noqa: E402 (the bench folder is not a package)
    Agents,
    SerfAgents,
    ShoalAgents,
    all_joined,
    interpreter,
    wait_for,
)

# Each step runs after the ones before it, in the agent's own order.
STEPS = [
    ("interpreter (python, site)", "pass"),
    ("command line", "import shoal.daemon.cli.app"),
    ("configuration, cores, structlog, msgspec", "import shoal.daemon.config"),
    ("agent module (uvloop, rocksdict, cbor2, sealing)", "import shoal.daemon.agent"),
    ("zeroconf", "import shoal.daemon.network.mdns"),
    ("API server", "import shoal.daemon.api.server"),
    (
        "RocksDB opened (shoal's options)",
        "import tempfile, pathlib\n"
        "from shoal.storage.engine import Engine\n"
        "_e = Engine(pathlib.Path(tempfile.mkdtemp()) / 'db', 8)",
    ),
]

# The same imports by library, each after the ones before it (a module two
# libraries share counts for the first): whose Python objects the anonymous
# memory is (`--by-library`).
LIBRARY_STEPS = [
    ("interpreter (python, site)", "pass"),
    ("argparse (with shutil, gettext, bz2, lzma)", "import argparse, shutil"),
    ("OpenSSL (_hashlib, _ssl, ssl)", "import _hashlib, _ssl, ssl"),
    ("subprocess, concurrent.futures, logging", "import subprocess, concurrent.futures, logging"),
    ("asyncio", "import asyncio"),
    ("structlog", "import structlog"),
    ("msgspec (typing_extensions, inspect, ast, uuid, decimal)", "import msgspec"),
    ("cbor2", "import cbor2"),
    ("uvloop", "import uvloop"),
    ("rocksdict", "import rocksdict"),
    ("ctypes, ctypes.util (tempfile)", "import ctypes.util"),
    ("zeroconf (ifaddr)", "import zeroconf.asyncio"),
    (
        "shoal: kernel, cores, composition",
        "import shoal.kernel.sealing, shoal.membership.swim, shoal.election.lease, "
        "shoal.storage.antientropy, shoal.node.composition",
    ),
    (
        "shoal: command line, configuration, agent, discovery",
        "import shoal.daemon.cli.app, shoal.daemon.config, shoal.daemon.agent, "
        "shoal.daemon.network.mdns",
    ),
    ("shoal: API server", "import shoal.daemon.api.server"),
]

_CHILD = """
import json, sys
def status():
    out = {}
    for line in open('/proc/self/status'):
        key, _, value = line.partition(':')
        if key in ('VmRSS', 'RssAnon', 'RssFile', 'Threads'):
            out[key] = int(value.split()[0])
    return out
steps = json.loads(sys.argv[1])
scope = {}
for name, code in steps:
    exec(code, scope)
    print(json.dumps([name, status(), len(sys.modules)]), flush=True)
"""


def shoal_of(python: str, cluster_name: str) -> type[ShoalAgents]:
    """ShoalAgents that run `python` (its checkout's shoal) with fresh caches,
    in cluster `cluster_name` (so that discovery ignores other benches' agents)."""

    class Shoal(ShoalAgents):
        def command(self, name: str, ip: str, seed: str | None) -> list[str]:  # type: ignore[override]
            return [*agent_python(python), *super().command(name, ip, seed)[1:],
                    "--cluster", cluster_name]  # fmt: skip

    return Shoal


def layers(python: str = sys.executable, steps: list[tuple[str, str]] = STEPS
           ) -> list[tuple[str, dict[str, int], int]]:  # fmt: skip
    """(step, /proc status fields in kB, modules loaded) after each step."""
    for _ in range(2):  # a first run after the caches are written held ~3 MB more anonymous
        out = subprocess.run([*agent_python(python), "-c", _CHILD, json.dumps(steps)],
                             capture_output=True, text=True, check=True, timeout=60)  # fmt: skip
    return [tuple(json.loads(line)) for line in out.stdout.splitlines()]  # type: ignore[misc]


_ROLLUP = ("Pss", "Shared_Clean", "Shared_Dirty", "Private_Clean", "Private_Dirty")


def proc_memory(pid: int) -> dict[str, int]:
    """VmRSS, RssAnon, RssFile (kB), Threads, Pss and the shared/private,
    clean/dirty split (kB, smaps_rollup), and the resident `[heap]` (malloc's
    main arena) of a process."""
    out: dict[str, int] = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "RssAnon", "RssFile", "Threads"):
            out[key] = int(value.split()[0])
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in _ROLLUP:
            out[key] = int(value.split()[0])
    out["heap"] = dict(top_mappings(pid, 1000)).get("[heap]", 0)
    return out


WORKING_SET_S = 10.0


def clear_referenced(pid: int) -> None:
    """Clear the referenced bit of every page of `pid` (/proc/PID/clear_refs)."""
    Path(f"/proc/{pid}/clear_refs").write_text("1")


def referenced_kb(pid: int) -> tuple[int, int]:
    """kB of `pid`'s resident pages touched since `clear_referenced`, split
    (file-backed, anonymous): its working set, what it needs in memory to
    run. The rest of its RSS is pages the start touched once: the kernel
    reclaims the file-backed ones first (clean, re-read on demand); the
    anonymous ones stay without swap."""
    touched = [0, 0]
    file_backed = False
    for line in Path(f"/proc/{pid}/smaps").read_text().splitlines():
        parts = line.split()
        if parts and "-" in parts[0] and not parts[0].endswith(":"):
            file_backed = len(parts) > 5 and parts[5].startswith("/")
        elif parts and parts[0] == "Referenced:":
            touched[0 if file_backed else 1] += int(parts[1])
    return touched[0], touched[1]


def top_mappings(pid: int, count: int = 8) -> list[tuple[str, int]]:
    """The mappings with the most resident kB (anonymous ones summed)."""
    sizes: dict[str, int] = {}
    current = "[anon]"
    for line in Path(f"/proc/{pid}/smaps").read_text().splitlines():
        parts = line.split()
        if parts and "-" in parts[0] and not parts[0].endswith(":"):
            current = parts[5] if len(parts) > 5 else "[anon]"
        elif parts and parts[0] == "Rss:":
            sizes[current] = sizes.get(current, 0) + int(parts[1])
    return sorted(sizes.items(), key=lambda kv: -kv[1])[:count]


def cluster(cls: type[Agents], agents: int, settle_s: float, subnet: int
            ) -> tuple[list[dict[str, int]], list[tuple[str, int]]]:  # fmt: skip
    """Per-agent memory once all see all and `settle_s` has passed."""
    workdir = Path(tempfile.mkdtemp(prefix=f"bench-memory-{cls.system}-"))
    a = cls(workdir, subnet)
    try:
        a.launch("n000", None)
        time.sleep(0.5)
        for k in range(1, agents):
            a.launch(f"n{k:03d}", a.ip(0))
        if not wait_for(lambda: all_joined(a), 90):
            raise SystemExit(f"bench: {cls.system}: not all joined within 90 s")
        time.sleep(settle_s)
        rows = [proc_memory(p.pid) for p in a.procs.values()]
        for p in a.procs.values():
            clear_referenced(p.pid)
        time.sleep(WORKING_SET_S)
        for row, p in zip(rows, a.procs.values(), strict=True):
            row["RefFile"], row["RefAnon"] = referenced_kb(p.pid)
            row["Referenced"] = row["RefFile"] + row["RefAnon"]
        return rows, top_mappings(a.procs["n001"].pid)
    finally:
        a.stop_all()
        shutil.rmtree(workdir, ignore_errors=True)


def by_library(python: str) -> None:
    """Print what each library's import adds (LIBRARY_STEPS)."""
    print(f"{interpreter()}; one fresh interpreter importing library by library; MB = MiB")
    print("library (each after those above)                          anon   file   modules")
    previous: dict[str, int] = {"RssAnon": 0, "RssFile": 0}
    for name, fields, modules in layers(python, LIBRARY_STEPS):
        anon, file = (_mb(fields[k] - previous[k]).strip() for k in ("RssAnon", "RssFile"))
        print(f"  {name:56.56} +{anon:>5} +{file:>5}  {modules:4}")
        previous = fields
    print(f"  total                                                    {_mb(previous['RssAnon'])} "
          f"{_mb(previous['RssFile'])}")  # fmt: skip


def _mb(kb: float) -> str:
    return f"{kb / 1024:5.1f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--agents", type=int, default=20)
    parser.add_argument(
        "--settle",
        type=float,
        default=6.0,
        help="seconds after all see all (discovery starts 5 s after a join)",
    )
    parser.add_argument(
        "--before", metavar="PYTHON", help="also measure the shoal of this interpreter's checkout"
    )
    parser.add_argument(
        "--subnet",
        type=int,
        default=62,
        help="agents bind 127.SUBNET.x.y (one more subnet per system)",
    )
    parser.add_argument("--cluster", default="bench-memory", help="the agents' cluster name")
    parser.add_argument(
        "--by-library",
        action="store_true",
        help="only the layers, by library instead of by start-up step",
    )
    args = parser.parse_args()
    if args.by_library:
        by_library(sys.executable)
        return
    print(f"configuration: {interpreter()}; layers in one fresh interpreter; cluster of "
          f"{args.agents} agents on loopback joining one seed, measured {args.settle:g} s "
          "after all see all; MB = MiB")  # fmt: skip
    pythons = {"shoal": sys.executable}
    if args.before:
        pythons["shoal-before"] = args.before
    for label, python in pythons.items():
        print(f"layers of {label} (cumulative)          RSS   anon   file  threads modules")
        previous = 0
        for name, fields, modules in layers(python):
            print(f"  {name:48.48} {_mb(fields['VmRSS'])} {_mb(fields['RssAnon'])} "
                  f"{_mb(fields['RssFile'])}  {fields['Threads']:3}  {modules:4}  "
                  f"(+{_mb(fields['VmRSS'] - previous).strip()})")  # fmt: skip
            previous = fields["VmRSS"]
    systems: dict[str, type[Agents]] = {
        label: shoal_of(py, args.cluster) for label, py in pythons.items()
    }
    if shutil.which("serf"):
        systems["serf"] = SerfAgents
    medians: dict[str, float] = {}
    for subnet, (label, cls) in enumerate(systems.items(), start=args.subnet):
        rows, top = cluster(cls, args.agents, args.settle, subnet)
        med = {key: statistics.median(r[key] for r in rows) for key in rows[0]}
        medians[label] = med["VmRSS"]
        print(f"  {label:12} median RSS {_mb(med['VmRSS'])} MB (anon {_mb(med['RssAnon'])}, "
              f"file {_mb(med['RssFile'])}), PSS {_mb(med['Pss'])} MB, threads "
              f"{med['Threads']:.0f}; max RSS {_mb(max(r['VmRSS'] for r in rows))} MB; "
              f"working set {_mb(med['Referenced']).strip()} MB (file "
              f"{_mb(med['RefFile']).strip()}, anon {_mb(med['RefAnon']).strip()}: pages "
              f"touched in {WORKING_SET_S:g} s of running)")  # fmt: skip
        print(f"         shared clean {_mb(med['Shared_Clean']).strip()}, shared dirty "
              f"{_mb(med['Shared_Dirty']).strip()}, private clean "
              f"{_mb(med['Private_Clean']).strip()}, private dirty "
              f"{_mb(med['Private_Dirty']).strip()} MB; malloc's [heap] "
              f"{_mb(med['heap']).strip()} MB")  # fmt: skip
        print("         largest mappings of one agent: " + ", ".join(
            f"{Path(name).name} {_mb(kb).strip()}" for name, kb in top[:6]))  # fmt: skip
    for label in pythons:
        if "serf" in medians:
            print(f"  RSS {label}/serf: {medians[label] / medians['serf']:.2f}")


if __name__ == "__main__":
    main()
