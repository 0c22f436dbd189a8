#!/usr/bin/env python3
"""The metadata log's disk use under a steady write load, with and without compaction.

Three real agents (`--meta`, on loopback) take --writes puts of
--value-bytes random bytes over --keys keys at a steady --rate puts/s (8 clients spread
over the three agents); every --every seconds the three data directories'
size (bytes allocated, all three together) is printed. It runs twice: once
with snapshots effectively off (`[meta] snapshot_every` at its maximum: the
log grows with every write, as before snapshots), once with
`snapshot_every = --snapshot-every` and `keep_entries = --keep` (every
agent snapshots its state and range-deletes its log behind it). With
compaction, disk use levels off once RocksDB compacts the deleted ranges
away; without it, it grows with the number of writes.

    .venv/bin/python bench/meta_disk.py [--writes 20000] [--rate 400]
        [--snapshot-every 1000] [--keep 100] [--keys 100] [--every 2]

Every process and temp directory is removed at exit, Ctrl-C included.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

from meta import ROOT, Shoal, drive, interrupts_as_exit  # bench/meta.py, beside this file

OFF = 10_000_000  # snapshot_every's maximum: no snapshot in this run


def config_file(root: Path, every: int, keep: int) -> Path:
    path = root / f"shoal-{every}.toml"
    path.write_text(f"[meta]\nsnapshot_every = {every}\nkeep_entries = {keep}\n")
    return path


def metric(ip: str, name: str) -> float:
    import urllib.request

    with urllib.request.urlopen(f"http://{ip}:7947/metrics", timeout=5) as r:
        for line in r.read().decode().splitlines():
            if line.startswith(name + " "):
                return float(line.split()[-1])
    return 0.0


def one_run(label: str, args: argparse.Namespace, root: Path, every: int) -> list[float]:
    """Start three agents, write at a steady rate, print the disk use over
    time; the samples (MB)."""
    run_root = root / label.replace(" ", "-")
    run_root.mkdir()
    shoal = Shoal(args.tree, root)
    shoal.env = {**shoal.env, "SHOAL_CONFIG": str(config_file(run_root, every, args.keep))}
    samples: list[float] = []
    try:
        shoal.start(run_root, quick=False)
        seconds = args.writes / args.rate
        print(f"\n{label}: {args.writes:,} puts at {args.rate:.0f}/s over {args.keys} keys "
              f"(~{seconds:.0f} s)", flush=True)  # fmt: skip
        print(f"  {'t (s)':>6} {'MB (3 dirs)':>12}", flush=True)
        done = threading.Event()
        t0 = time.monotonic()

        def sample() -> None:
            while True:
                mb = shoal.disk_bytes() / 1e6
                samples.append(mb)
                print(f"  {time.monotonic() - t0:6.1f} {mb:12.2f}", flush=True)
                if done.wait(args.every):
                    return

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        per_client = -(-args.writes // 8)

        def put(client, w: int, n: int) -> None:  # type: ignore[no-untyped-def]
            # Random bytes: RocksDB compresses its tables, and a value
            # repeated would measure the compression, not the log.
            client.put(f"bench/k{(w * per_client + n) % args.keys}", os.urandom(args.value_bytes))

        run = drive(shoal, put, 8, seconds * 3 + 30, rate=args.rate, ops=per_client)
        done.set()
        sampler.join()
        end = shoal.disk_bytes() / 1e6
        samples.append(end)
        taken = sum(metric(ip, "shoal_meta_snapshots_taken_total") for ip in shoal.members.ips)
        errors = f"{run.errors} errors"
        if run.errors:
            errors += f", first: {run.first_error[:120]}"
        print(f"  {label}: {len(run.lat):,} puts acknowledged ({errors}), "
              f"{taken:.0f} snapshots taken, disk {samples[0]:.1f} MB at start, at most "
              f"{max(samples):.1f} MB, {end:.1f} MB at the end", flush=True)  # fmt: skip
    finally:
        shoal.stop()
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--writes", type=int, default=20_000)
    parser.add_argument("--rate", type=float, default=400.0, help="puts/s, all clients")
    parser.add_argument("--keys", type=int, default=100)
    parser.add_argument("--value-bytes", type=int, default=100)
    parser.add_argument("--snapshot-every", type=int, default=1_000)
    parser.add_argument("--keep", type=int, default=100)
    parser.add_argument("--every", type=float, default=2.0, help="seconds between samples")
    parser.add_argument("--tree", type=Path, default=ROOT,
                        help="run the agents of this checkout (its .venv's Python)")  # fmt: skip
    args = parser.parse_args()
    try:
        with interrupts_as_exit(), tempfile.TemporaryDirectory(prefix="shoal-bench-disk-",
                                                               dir="/var/tmp") as tmp:  # fmt: skip
            root = Path(tmp)
            print(f"shoal metadata log disk use: {os.cpu_count()} cores, load "
                  f"{os.getloadavg()[0]:.2f}, {args.value_bytes}-byte values")  # fmt: skip
            off = one_run("without compaction", args, root, OFF)
            on = one_run("with compaction", args, root, args.snapshot_every)
            print(
                f"\nat the end: {off[-1]:.1f} MB without compaction, {on[-1]:.1f} MB with "
                f"(snapshot_every {args.snapshot_every}, keep_entries {args.keep})"
            )
    except KeyboardInterrupt as why:
        print(f"\ninterrupted ({why or 'SIGINT'}): every process stopped, temp files removed")
        sys.exit(130)


if __name__ == "__main__":
    main()
