"""Health checks' state machines: what each check says, and the member's health.

Theory of operation (Consul's check states). Each check is passing,
warning or critical, and starts critical (nothing is known yet). A probed
check (script, HTTP, TCP) reports each run's result through `result`; its
status changes after `passing_after` consecutive passes or
`critical_after` consecutive failures, and at once on a warning, which
also resets both counts. A TTL check is what the application last said
(`update_ttl`), and turns critical when `ttl_s` passes without an update:
that is a deadline of this core, not a timer of the driver.

The member's health is the worst status of its checks (passing with none);
it goes out in gossip as the tag `HEALTH_TAG`. Every change of a check's
status is a `CheckChanged` event. Probing is IO and stays in the driver
(daemon/health.py); this core is told each result and the time.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import msgspec

from shoal.election.config import HEALTH_TAG as HEALTH_TAG  # its home: the election reads it
from shoal.kernel.contract import Output
from shoal.kernel.deadlines import Deadlines
from shoal.kernel.outbox import Outbox
from shoal.services.checkconfig import CheckConfig

PASSING, WARNING, CRITICAL = "passing", "warning", "critical"
_RANK = {PASSING: 0, WARNING: 1, CRITICAL: 2}
OUTPUT_CHARS = 1000


@dataclass(slots=True)
class CheckState:
    """One check and what it last said."""

    config: CheckConfig
    status: str = CRITICAL
    output: str = "not run yet"
    passes: int = 0  # consecutive
    failures: int = 0  # consecutive
    ttl_deadline: float | None = None
    runs: int = 0

    def to_json(self) -> dict[str, Any]:
        """The check as `GET /v1/checks` shows it."""
        c = self.config
        return {"id": c.id, "kind": c.kind, "target": c.target, "status": self.status,
                "output": self.output, "interval_s": c.interval_s, "ttl_s": c.ttl_s,
                "runs": self.runs}  # fmt: skip


class CheckChanged(msgspec.Struct, frozen=True):
    """Check `check` went from `old` to `new`; `output` says why."""

    check: str
    old: str
    new: str
    output: str


def worst(statuses: list[str]) -> str:
    """The member's health: the worst of its checks' (passing if none)."""
    return max(statuses, key=_RANK.__getitem__, default=PASSING)


def starting_health(configs: tuple[CheckConfig, ...]) -> str | None:
    """The health of a member whose checks have not run yet: critical, as
    every new check starts; None without checks."""
    return CRITICAL if configs else None


class CheckMachines:
    """The state of every check of one member (module docstring).

    Args:
        out: where the events go (the façade's outbox; a new one if None).
        deadlines: where the TTL deadlines go (the façade's heap; a new
            one if None).
    """

    def __init__(self, out: Outbox | None = None, deadlines: Deadlines | None = None) -> None:
        self.checks: dict[str, CheckState] = {}
        self.out = Outbox() if out is None else out
        self._deadlines = Deadlines() if deadlines is None else deadlines

    @property
    def health(self) -> str | None:
        """The worst status of all checks; None when there are none."""
        return worst([s.status for s in self.checks.values()]) if self.checks else None

    # -- the core contract -----------------------------------------------------

    def tick(self, now: float) -> None:
        """Turn critical the TTL checks whose time ran out."""
        self._deadlines.run_due(now)

    def next_deadline(self) -> float | None:
        """The earliest TTL deadline (None: no TTL check waits)."""
        return self._deadlines.next_at()

    def drain(self) -> Output:
        """The `CheckChanged` events since the last drain."""
        return self.out.drain()

    # -- commands ----------------------------------------------------------------

    def configure(self, configs: tuple[CheckConfig, ...],
                  now: float) -> tuple[list[str], list[CheckState]]:  # fmt: skip
        """Hold exactly `configs` (at start and on reload): a check whose
        definition did not change keeps its status; others start critical.

        Returns:
            The ids of the checks removed or replaced (the driver stops
            probing them), and the new probed checks (it starts probing).
        """
        keep = {c.id for c in configs if (old := self.checks.get(c.id)) and old.config == c}
        gone = [check_id for check_id in self.checks if check_id not in keep]
        for check_id in gone:
            del self.checks[check_id]
        probed: list[CheckState] = []
        for config in configs:
            if config.id in keep:
                continue
            self.checks[config.id] = state = CheckState(config)
            if config.kind == "ttl":
                state.output = "no update yet"
                self._arm_ttl(state, now)
            else:
                probed.append(state)
        return gone, probed

    def result(self, check_id: str, status: str, output: str) -> None:
        """One run of a probed check said `status` (ignored once removed)."""
        state = self.checks.get(check_id)
        if state is None:
            return
        state.runs += 1
        state.output = output[:OUTPUT_CHARS]
        config = state.config
        if status == PASSING:
            state.passes, state.failures = state.passes + 1, 0
            if state.passes >= config.passing_after:
                self._set(state, PASSING)
        elif status == CRITICAL:
            state.passes, state.failures = 0, state.failures + 1
            if state.failures >= config.critical_after:
                self._set(state, CRITICAL)
        else:
            state.passes = state.failures = 0
            self._set(state, WARNING)

    def update_ttl(self, check_id: str, status: str, note: str, now: float) -> CheckState:
        """The application says how it is (`PUT /v1/check/ID/pass|warn|fail`).

        Raises:
            KeyError: no TTL check `check_id` (the API answers 404).
        """
        state = self.checks.get(check_id)
        if state is None or state.config.kind != "ttl":
            raise KeyError(check_id)
        state.runs += 1
        state.output = note[:OUTPUT_CHARS] or f"set {status} by the application"
        self._set(state, status)
        self._arm_ttl(state, now)
        return state

    # -- transitions --------------------------------------------------------------

    def _arm_ttl(self, state: CheckState, now: float) -> None:
        state.ttl_deadline = now + state.config.ttl_s
        self._deadlines.push(state.ttl_deadline, self._due_ttl, state)

    def _due_ttl(self, state: CheckState, now: float) -> None:
        if self.checks.get(state.config.id) is not state:
            return  # removed or replaced meanwhile
        if state.ttl_deadline is None or state.ttl_deadline > now:
            return  # updated since: a later deadline is in the heap
        state.ttl_deadline = None
        state.output = f"no update within ttl_s = {state.config.ttl_s:g} s"
        self._set(state, CRITICAL)

    def _set(self, state: CheckState, status: str) -> None:
        old = state.status
        if status != old:
            state.status = status
            self.out.event(CheckChanged(state.config.id, old, status, state.output))
