"""A trace of one metadata-log swarm run, for debugging a violation.

`trace_run(seed, ...)` runs `meta_run` with every node's log and election
instrumented and returns, in virtual-time order, what decides which
history wins: who leads the log in which epoch (and from what log), each
commit advance (the voter sets and match indexes it counted), voter
changes proposed and elections won (with the configuration, its ids, and
who granted), grants as the candidate counted them, disks wiped, hosts
halted and booted. The seed 703 divergence (sessions=3) was found so: a
voter cut off before the renewal carrying the voters' ids campaigned
under the id-less configuration, and a wiped voter granted it by name.

    from shoal.sim.metatrace import trace_run
    print(*trace_run(703, sessions=3), sep="\n")

It wraps methods of the classes for the run's duration only (restored
after). Commits are left out unless `commits`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from shoal.election.campaign import Campaign
from shoal.election.controller import Controller
from shoal.metalog.core import MetaLog
from shoal.sim import cluster as simcluster
from shoal.sim import meta as simmeta
from shoal.sim import wipe as simwipe

Line = tuple[float, str, str]


@contextmanager
def _wrapped(owner: Any, name: str, wrapper: Callable[[Callable[..., Any]], Any]) -> Iterator[None]:
    original = getattr(owner, name)
    setattr(owner, name, wrapper(original))
    try:
        yield
    finally:
        setattr(owner, name, original)


def _ids(config: Any) -> list[str]:
    return [i.hex()[:6] for i in config.ids]


def trace_run(seed: int, commits: bool = False, **kwargs: Any) -> list[str]:
    """`meta_run(seed, **kwargs)`, traced (module docstring): one line per
    event, "time who what", then the run's faults and violations count."""
    lines: list[Line] = []
    clock: list[Any] = [None]

    def note(who: str, what: str) -> None:
        lines.append((-1.0 if clock[0] is None else clock[0].now, who, what))

    def init(f: Callable[..., Any]) -> Callable[..., Any]:
        def run(self: Any, *a: Any, **k: Any) -> None:
            f(self, *a, **k)
            clock[0] = self

        return run

    def lead(f: Callable[..., Any]) -> Callable[..., Any]:
        def run(self: MetaLog, epoch: int, now: float) -> None:
            f(self, epoch, now)
            note(self.name, f"LEAD epoch {epoch} last={self.log.last_index} commit={self.commit}")

        return run

    def down(f: Callable[..., Any]) -> Callable[..., Any]:
        def run(self: MetaLog) -> None:
            note(self.name, f"STEP DOWN epoch {self.epoch} last={self.log.last_index} "
                            f"commit={self.commit}")  # fmt: skip
            f(self)

        return run

    def advance(f: Callable[..., Any]) -> Callable[..., Any]:
        def run(self: MetaLog, now: float) -> None:
            before = self.commit
            f(self, now)
            if commits and self.commit != before:
                sets = self._votes.sets(self.commit)  # noqa: SLF001
                note(self.name, f"COMMIT e{self.epoch} {before}->{self.commit} "
                                f"sets={sets} match={self._match}")  # fmt: skip

        return run

    def forget(f: Callable[..., Any]) -> Callable[..., Any]:
        def run(self: MetaLog, name: str) -> None:
            note(self.name, f"FORGET {name} (match {self._match.get(name)})")
            f(self, name)

        return run

    def propose(f: Callable[..., Any]) -> Callable[..., Any]:
        def run(self: MetaLog, change: Any, now: float) -> bool:
            done = bool(f(self, change, now))
            note(self.name, f"PROPOSE VOTERS v{change.version} {change.voters} "
                            f"ids={_ids(change)}: {done} at {self.log.last_index}")  # fmt: skip
            return done

        return run

    def won(f: Callable[..., Any]) -> Callable[..., Any]:
        def run(self: Controller, req: Any, now: float) -> None:
            if self.lease_epoch != req.epoch or req.old is not None:
                note(self.name, f"WON epoch {req.epoch} granted={sorted(req.granted)} "
                                f"config v{req.config.version} {req.config.voters} "
                                f"ids={_ids(req.config)} old={req.old is not None}")  # fmt: skip
            f(self, req, now)

        return run

    def record(f: Callable[..., Any]) -> Callable[..., Any]:
        def run(self: Campaign, msg: Any) -> Any:
            req = self.request
            counted = f(self, msg)
            if type(msg).__name__ == "LeaseGrant" and req is not None and not req.renewal:
                note(self.name, f"GRANT from {msg.voter} id={msg.voter_id.hex()[:6]} "
                                f"epoch {req.epoch} counted={counted is not None}")  # fmt: skip
            return counted

        return run

    def wipe(f: Callable[..., Any]) -> Callable[..., Any]:
        def run(cluster: Any, i: int) -> None:
            old = cluster.idents[i].node_id.hex()[:6]
            f(cluster, i)
            note(f"host{i}", f"WIPED id {old} -> {cluster.idents[i].node_id.hex()[:6]}")

        return run

    def host(what: str) -> Callable[[Callable[..., Any]], Any]:
        def wrap(f: Callable[..., Any]) -> Callable[..., Any]:
            def run(self: Any, i: int, *a: Any, **k: Any) -> Any:
                note(f"host{i}", what)
                return f(self, i, *a, **k)

            return run

        return wrap

    SC = simcluster.SimCluster  # noqa: N806
    with (_wrapped(SC, "__init__", init), _wrapped(MetaLog, "_become_leader", lead),
          _wrapped(MetaLog, "_step_down", down), _wrapped(MetaLog, "_advance_commit", advance),
          _wrapped(MetaLog, "forget", forget), _wrapped(MetaLog, "propose_voters", propose),
          _wrapped(Controller, "won", won), _wrapped(Campaign, "record", record),
          _wrapped(simwipe, "wipe_host", wipe), _wrapped(SC, "_halt", host("HALT")),
          _wrapped(SC, "_boot", host("BOOT"))):  # fmt: skip
        run = simmeta.meta_run(seed, **kwargs)
    out = [f"{t:8.3f} {who} {what}" for t, who, what in sorted(lines, key=lambda x: x[0])]
    out.append(f"faults: {run.faults}")
    out.append(f"violations: {len(run.violations)}")
    out.extend(run.violations[:5])
    return out
