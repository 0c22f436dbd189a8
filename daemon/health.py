"""Runs this agent's health checks (daemon/checks.py) and says the result.

Each check has a status, passing, warning or critical, starting critical.
A script, HTTP or TCP check runs every `interval_s` (one asyncio task each;
HTTP in a worker thread with urllib, a script as a subprocess, so nothing
blocks the loop); its status changes after `passing_after` consecutive
passes or `critical_after` consecutive failures (a warning changes it at
once). A TTL check is set by the application and turns critical when
`ttl_s` passes without an update.

The member's health is the worst of its checks. The agent publishes it in
gossip as the tag `shoal:health` (passing/warning/critical), so every agent
can answer `shoal members --healthy` and fire `member-health-changed`
(daemon/publisher.py); a member without checks has no such tag and counts
as passing. On every change the agent's `on_change(check, old, new)` runs.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import structlog

from shoal.daemon.checks import CheckConfig
from shoal.daemon.handlers import run_command
from shoal.election.config import HEALTH_TAG as HEALTH_TAG  # its home: the election reads it

PASSING, WARNING, CRITICAL = "passing", "warning", "critical"
_RANK = {PASSING: 0, WARNING: 1, CRITICAL: 2}
_OUTPUT_CHARS = 1000
log = structlog.get_logger("shoal")


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


def worst(statuses: list[str]) -> str:
    """The member's health: the worst of its checks' (passing if none)."""
    return max(statuses, key=_RANK.__getitem__, default=PASSING)


class HealthChecks:
    """The running checks of one agent (module docstring)."""

    def __init__(self, on_change: Callable[[str, str, str], None]) -> None:
        self._on_change = on_change
        self.checks: dict[str, CheckState] = {}
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._ttl_timers: dict[str, asyncio.TimerHandle] = {}

    @property
    def health(self) -> str | None:
        """The worst status of all checks; None when there are none."""
        return worst([s.status for s in self.checks.values()]) if self.checks else None

    def configure(self, configs: tuple[CheckConfig, ...]) -> None:
        """Run exactly `configs` (at start and on reload): a check whose
        definition did not change keeps its status; others start critical."""
        keep = {c.id for c in configs if (old := self.checks.get(c.id)) and old.config == c}
        for check_id in list(self.checks):
            if check_id not in keep:
                self._stop(check_id)
                del self.checks[check_id]
        for config in configs:
            if config.id in keep:
                continue
            self.checks[config.id] = state = CheckState(config)
            loop = asyncio.get_running_loop()
            if config.kind == "ttl":
                state.output = "no update yet"
                self._arm_ttl(state, loop)
            else:
                self._tasks[config.id] = loop.create_task(self._run(state))

    def update_ttl(self, check_id: str, status: str, note: str) -> CheckState:
        """The application says how it is (`PUT /v1/check/ID/pass|warn|fail`).

        Raises:
            KeyError: no TTL check `check_id` (the API answers 404).
        """
        state = self.checks.get(check_id)
        if state is None or state.config.kind != "ttl":
            raise KeyError(check_id)
        state.runs += 1
        state.output = note[:_OUTPUT_CHARS] or f"set {status} by the application"
        self._set(state, status)
        self._arm_ttl(state, asyncio.get_running_loop())
        return state

    def stop(self) -> None:
        """Stop every check (the agent is exiting)."""
        for check_id in list(self.checks):
            self._stop(check_id)

    # -- running ----------------------------------------------------------------------

    def _stop(self, check_id: str) -> None:
        task = self._tasks.pop(check_id, None)
        if task is not None:
            task.cancel()
        timer = self._ttl_timers.pop(check_id, None)
        if timer is not None:
            timer.cancel()

    def _arm_ttl(self, state: CheckState, loop: asyncio.AbstractEventLoop) -> None:
        old = self._ttl_timers.pop(state.config.id, None)
        if old is not None:
            old.cancel()
        self._ttl_timers[state.config.id] = loop.call_later(state.config.ttl_s, self._ttl_expired,
                                                            state)  # fmt: skip

    def _ttl_expired(self, state: CheckState) -> None:
        self._ttl_timers.pop(state.config.id, None)
        state.output = f"no update within ttl_s = {state.config.ttl_s:g} s"
        self._set(state, CRITICAL)

    async def _run(self, state: CheckState) -> None:
        config = state.config
        while True:
            try:
                status, output = await asyncio.wait_for(_probe(config), config.timeout_s)
            except TimeoutError:
                status, output = CRITICAL, f"timed out after {config.timeout_s:g} s"
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # a probe's failure is the check's result, never fatal
                status, output = CRITICAL, f"{type(exc).__name__}: {exc}"
            state.runs += 1
            state.output = output[:_OUTPUT_CHARS]
            self._result(state, status)
            await asyncio.sleep(config.interval_s)

    def _result(self, state: CheckState, status: str) -> None:
        """Count consecutive results; change status past the thresholds."""
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

    def _set(self, state: CheckState, status: str) -> None:
        old = state.status
        if status != old:
            state.status = status
            log.info("check changed", check=state.config.id, status=status, previous=old,
                     output=state.output)  # fmt: skip
            self._on_change(state.config.id, old, status)


async def _probe(config: CheckConfig) -> tuple[str, str]:
    """Run one check once: (status, output)."""
    if config.kind == "tcp":
        host, _, port = config.target.rpartition(":")
        _, writer = await asyncio.open_connection(host.strip("[]"), int(port))
        writer.close()
        return PASSING, f"connected to {config.target}"
    if config.kind == "http":
        return await asyncio.get_running_loop().run_in_executor(None, _http_get, config)
    done = await run_command(config.target, {}, b"", config.timeout_s)  # kills it at the timeout
    if done.returncode is None:
        return CRITICAL, f"timed out after {config.timeout_s:g} s"
    text = done.stdout.decode(errors="replace").strip() or f"exit {done.returncode}"
    return {0: PASSING, 1: WARNING}.get(done.returncode, CRITICAL), text


def _http_get(config: CheckConfig) -> tuple[str, str]:
    """GET the URL (in a worker thread): 2xx passing, 429 warning, else critical."""
    # Imported here, not at start: urllib.request brings http.client, email
    # and hashlib (25 modules, about 6 ms of every agent's start), and only
    # an agent with an HTTP check needs them.
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(config.target, timeout=config.timeout_s) as resp:
            body = resp.read(_OUTPUT_CHARS).decode(errors="replace")
            return PASSING, f"HTTP {resp.status}: {body}"
    except urllib.error.HTTPError as exc:
        status = WARNING if exc.code == 429 else CRITICAL
        return status, f"HTTP {exc.code}: {exc.reason}"
    except (urllib.error.URLError, OSError) as exc:
        return CRITICAL, f"{config.target}: {getattr(exc, 'reason', exc)}"
