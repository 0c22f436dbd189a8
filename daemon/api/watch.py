"""The agent's side of the election: who the controller is, as the API
reports it, change notification for blocking API calls, and the
`controller_handler` command run on becoming or ceasing to be controller.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from typing import TYPE_CHECKING, Any

import structlog

from shoal.election.events import ControllerChanged

if TYPE_CHECKING:
    from shoal.node.composition import ShoalNode

log = structlog.get_logger("shoal")
HANDLER_TIMEOUT_S = 30.0


class ControllerWatch:
    """Wakes API callers waiting for the controller to change."""

    def __init__(self) -> None:
        self._changed = asyncio.Event()
        self.since_wall_ms = int(time.time() * 1000)

    def changed(self, event: Any, node: ShoalNode) -> None:
        """An election event was published."""
        if isinstance(event, ControllerChanged):
            self.since_wall_ms = int(time.time() * 1000)
            self._changed.set()
            self._changed = asyncio.Event()

    async def wait(self, timeout_s: float) -> None:
        """Return at the next controller change, or after `timeout_s`."""
        try:
            await asyncio.wait_for(self._changed.wait(), timeout_s)
        except TimeoutError:
            pass


def controller_info(node: ShoalNode, since_wall_ms: int, now: float) -> dict[str, Any]:
    """`GET /v1/controller`: who controls, with which epoch, for how long."""
    el = node.election
    known = el.known
    voters = el.voters
    info: dict[str, Any] = {
        "controller": known[0] if known else None,
        "epoch": known[1] if known else None,
        "is_self": el.is_controller,
        "since_wall_ms": since_wall_ms if known else None,
        "voters": list(voters.voters) if voters else [],
        "voters_version": voters.version if voters else 0,
    }
    if el.is_controller:
        info["lease_remaining_s"] = round(max(0.0, el.lease_end_at - now), 3)
    elif known:
        info["lease_remaining_s"] = None  # only the controller knows its lease exactly
    return info


async def run_handler(command: str, env: dict[str, str], record: dict[str, Any]) -> None:
    """Run `command` in a shell with the event in `env` and as JSON on
    stdin; log its output; a failure or a timeout is logged, never fatal."""
    try:
        proc = await asyncio.create_subprocess_shell(
            command, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT, env={**os.environ, **env},
        )  # fmt: skip
    except OSError as exc:
        log.error("controller handler could not start", command=command, error=str(exc))
        return
    try:
        out, _ = await asyncio.wait_for(
            proc.communicate(json.dumps(record).encode()), HANDLER_TIMEOUT_S
        )
    except TimeoutError:
        proc.kill()
        await proc.wait()
        log.error("controller handler timed out", command=command, timeout_s=HANDLER_TIMEOUT_S)
        return
    level = log.info if proc.returncode == 0 else log.error
    level("controller handler ran", command=command, exit_code=proc.returncode,
          output=out.decode(errors="replace")[-2000:])  # fmt: skip
