"""The swarm's trace (sim/metatrace.py) tells who led, who granted what,
and what was wiped: seed 703 (sessions=3), the divergence behind
tests/sim/test_logged_voters.py, now ends with no violation, the epoch
after the wipe won only once the crashed controller is back."""

from shoal.metalog.core import MetaLog
from shoal.sim.metatrace import trace_run


def test_the_trace_of_seed_703_shows_the_wipe_and_who_won_after_it() -> None:
    become = MetaLog._become_leader  # noqa: SLF001
    lines = trace_run(703, sessions=3)
    assert MetaLog._become_leader is become  # noqa: SLF001 - put back after the run
    assert lines[-1] == "violations: 0"
    wiped = next(i for i, line in enumerate(lines) if "WIPED" in line)
    won = [line for line in lines[wiped:] if " WON epoch 3 " in line and "old=False" in line]
    assert len(won) == 1 and "node-00001" in won[0], won
    boot = next(i for i, line in enumerate(lines) if line.endswith("host1 BOOT") and i > wiped)
    assert lines.index(won[0]) > boot  # not before the controller holding the writes is back
