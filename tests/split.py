"""`make test`: the suite in two processes at once, on a 2-core machine.

The tests that start agents, network namespaces and real peers
(tests/integration, tests/lan: "io", mostly waiting on the agents' timers)
run in this process's child at normal priority, their output live; the
simulator's, unit and Spark tests (every other folder of tests/: "cpu",
they compute) beside them at nice 10, their output printed after. The
kernel's scheduler gives a nice-0 task about 9/10 of a contended core
against a nice-10 one (weights 1024 and 110, kernel/sched/core.c's
sched_prio_to_weight), so an agent under test is not starved by a
simulation. Two agents' tests never run at once: agents on loopback find
each other by mDNS. (pytest-xdist's `--dist loadgroup` would do this split,
but with pytest 9.2 and xdist 3.8 it spread one group over both workers.)

    python tests/split.py [pytest options...]    exit status: 0 if both passed
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TESTS = Path(__file__).resolve().parent
IO = ["integration", "lan"]


def main(options: list[str]) -> int:
    cpu = sorted(p.name for p in TESTS.iterdir()
                 if p.is_dir() and p.name not in IO
                 and not p.name.startswith((".", "_")))  # fmt: skip
    pytest = [sys.executable, "-m", "pytest", *options]
    started = time.monotonic()
    with tempfile.TemporaryFile(mode="w+") as log:
        beside = subprocess.Popen([*pytest, *(str(TESTS / d) for d in cpu)],
                                  stdout=log, stderr=subprocess.STDOUT,
                                  preexec_fn=lambda: os.nice(10))  # fmt: skip
        print(
            f"split: {', '.join(cpu)} beside (nice 10, output after); {', '.join(IO)} here",
            flush=True,
        )
        io_rc = subprocess.call([*pytest, *(str(TESTS / d) for d in IO)])
        cpu_rc = beside.wait()
        log.seek(0)
        print(f"\n===== split: the tests beside ({', '.join(cpu)}) =====", flush=True)
        sys.stdout.write(log.read())
    print(
        f"\nsplit: {', '.join(IO)} exit {io_rc}; {', '.join(cpu)} exit {cpu_rc}; "
        f"{time.monotonic() - started:.0f} s in all",
        flush=True,
    )
    return io_rc or cpu_rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
