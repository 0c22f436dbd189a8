#!/usr/bin/env python3
"""The linearizability checker's speed on a large metadata history.

A history of the reference store (shoal.sim.metaworkload, correct: the
checker must answer OK) of --operations operations over --keys keys by
--clients concurrent clients, --timeouts of them timed out; then the same
with a stale read now and then (it must answer ILLEGAL). Prints the
history's shape, what `prepare` kept, the steps and the wall time of each
check (best of --repeat), and of the first without `prepare`; one core,
pure Python.

    .venv/bin/python bench/linearizability.py [--operations 10000] [--keys 50]
        [--clients 10] [--timeouts 0.05] [--seed 1] [--repeat 3]
"""

from __future__ import annotations

import argparse
import platform
import random
import time

from shoal.sim.linearizability import CheckResult, Operation, check
from shoal.sim.metahistory import check_meta, prepare
from shoal.sim.metamodel import MetaModel
from shoal.sim.metaworkload import random_history


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--operations", type=int, default=10_000)
    parser.add_argument("--keys", type=int, default=50)
    parser.add_argument("--clients", type=int, default=10)
    parser.add_argument("--timeouts", type=float, default=0.05)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    print(f"python {platform.python_version()} on {platform.machine()}, one core")
    for bug in (None, "stale-read"):
        history = random_history(
            random.Random(args.seed),
            operations=args.operations,
            keys=args.keys,
            clients=args.clients,
            timeout_p=args.timeouts,
            bug=bug,
        )
        timed_out = sum(op.indeterminate for op in history)
        kept = sum(op.indeterminate for op in prepare(history))
        best, result = _best_of(args.repeat, history)
        print(
            f"{'correct store' if bug is None else bug:>13}: {len(history)} operations, "
            f"{args.keys} keys, {args.clients} clients, {timed_out} timed out "
            f"({kept} kept by prepare): {result.verdict.value} in {result.steps} steps, "
            f"{best:.3f} s ({len(history) / best:,.0f} operations/s)"
        )
        if bug is None:
            best, result = _best_of(args.repeat, history, prepared=False)
            print(
                f"{'not prepared':>13}: {result.verdict.value} in {result.steps} steps, "
                f"{best:.3f} s"
            )


def _best_of(
    repeat: int, history: list[Operation], prepared: bool = True
) -> tuple[float, CheckResult]:
    """The shortest wall time of `repeat` checks, and the result."""
    best = float("inf")
    result = None
    for _ in range(repeat):
        started = time.perf_counter()
        result = check_meta(history) if prepared else check(history, MetaModel())
        best = min(best, time.perf_counter() - started)
    assert result is not None
    return best, result


if __name__ == "__main__":
    main()
