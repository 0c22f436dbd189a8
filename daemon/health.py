"""Runs this agent's health checks and says the result: the IO half.

The checks' state machines (statuses, `passing_after` / `critical_after`,
TTL deadlines, the member's health) are pure: services/checks.py, held by
the node's platform core (`node.services.checks`), whose TTL deadlines the
agent's one timer serves. This module probes: a script, HTTP or TCP check
runs every `interval_s` (one asyncio task each; HTTP in a worker thread
with urllib, a script as a subprocess, so nothing blocks the loop) and
hands each result to the machines, then flushes the node: a change of
status comes out of its drain as `CheckChanged`.

The member's health is the worst of its checks. The agent publishes it in
gossip as the tag `shoal:health` (passing/warning/critical), so every agent
can answer `shoal members --healthy` and fire `member-health-changed`
(daemon/publisher.py); a member without checks has no such tag and counts
as passing.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from shoal.daemon.handlers import run_command
from shoal.services.checkconfig import CheckConfig
from shoal.services.checks import CRITICAL as CRITICAL
from shoal.services.checks import HEALTH_TAG as HEALTH_TAG
from shoal.services.checks import OUTPUT_CHARS, CheckMachines, CheckState
from shoal.services.checks import PASSING as PASSING
from shoal.services.checks import WARNING as WARNING


class HealthChecks:
    """The running checks of one agent (module docstring)."""

    def __init__(self, machines: CheckMachines, flush: Callable[[], None]) -> None:
        self.machines = machines
        self._flush = flush
        self._tasks: dict[str, asyncio.Task[None]] = {}

    @property
    def checks(self) -> dict[str, CheckState]:
        """Each check's state, by id."""
        return self.machines.checks

    @property
    def health(self) -> str | None:
        """The worst status of all checks; None when there are none."""
        return self.machines.health

    def configure(self, configs: tuple[CheckConfig, ...]) -> None:
        """Run exactly `configs` (at start and on reload): a check whose
        definition did not change keeps its status; others start critical."""
        loop = asyncio.get_running_loop()
        gone, probed = self.machines.configure(configs, loop.time())
        for check_id in gone:
            task = self._tasks.pop(check_id, None)
            if task is not None:
                task.cancel()
        for state in probed:
            self._tasks[state.config.id] = loop.create_task(self._run(state.config))
        self._flush()

    def update_ttl(self, check_id: str, status: str, note: str) -> CheckState:
        """The application says how it is (`PUT /v1/check/ID/pass|warn|fail`).

        Raises:
            KeyError: no TTL check `check_id` (the API answers 404).
        """
        state = self.machines.update_ttl(check_id, status, note, asyncio.get_running_loop().time())
        self._flush()
        return state

    def stop(self) -> None:
        """Stop every check (the agent is exiting)."""
        for task in self._tasks.values():
            task.cancel()
        self._tasks.clear()

    # -- running ----------------------------------------------------------------------

    async def _run(self, config: CheckConfig) -> None:
        while True:
            try:
                status, output = await asyncio.wait_for(_probe(config), config.timeout_s)
            except TimeoutError:
                status, output = CRITICAL, f"timed out after {config.timeout_s:g} s"
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # a probe's failure is the check's result, never fatal
                status, output = CRITICAL, f"{type(exc).__name__}: {exc}"
            self.machines.result(config.id, status, output)
            self._flush()
            await asyncio.sleep(config.interval_s)


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
            body = resp.read(OUTPUT_CHARS).decode(errors="replace")
            return PASSING, f"HTTP {resp.status}: {body}"
    except urllib.error.HTTPError as exc:
        status = WARNING if exc.code == 429 else CRITICAL
        return status, f"HTTP {exc.code}: {exc.reason}"
    except (urllib.error.URLError, OSError) as exc:
        return CRITICAL, f"{config.target}: {getattr(exc, 'reason', exc)}"
