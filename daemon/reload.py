"""SIGHUP: read the configuration again and apply what can change now.

Tags, logging, the handlers, the health checks and the history log's
limits apply at once;
any other changed setting is logged as needing a restart and keeps its
running value. A configuration that does not load is logged and the
running one kept. systemd hears RELOADING=1, then READY=1 (Type=notify-reload).
Loaded only when the signal comes.
"""

from __future__ import annotations

import time
from typing import Any, Protocol

import msgspec.structs
import structlog

from shoal.daemon import config as config_mod
from shoal.daemon import logging as shoal_logging
from shoal.daemon.config import AgentConfig
from shoal.daemon.systemd import Notifier
from shoal.kernel.contract import Tags
from shoal.kernel.errors import ConfigError
from shoal.services.checkconfig import CheckConfig
from shoal.storage.history import HistoryWriter

# The settings a running agent applies without a restart.
LIVE = {
    "tags",
    "log_level",
    "log_format",
    "controller_handler",
    "event_handlers",
    "history",
    "checks",
    "enable_script_checks",
}
log = structlog.get_logger("shoal")


class Reloadable(Protocol):
    """What a reload reads and changes on the agent."""

    config: AgentConfig
    flags: dict[str, Any] | None  # what the config was built from
    notifier: Notifier

    @property
    def history(self) -> HistoryWriter | None:
        """The history log, once the agent runs."""

    def set_tags(self, tags: Tags) -> None:
        """Replace this node's tags."""

    def set_checks(self, checks: tuple[CheckConfig, ...]) -> None:
        """Run these health checks from now on."""

    def status_text(self) -> str:
        """systemd's STATUS line."""


def reload(agent: Reloadable) -> None:
    """Read the configuration again; apply what can change now."""
    agent.notifier.notify("RELOADING=1", f"MONOTONIC_USEC={time.monotonic_ns() // 1000}")
    try:
        new = config_mod.load(agent.flags or {"node_name": agent.config.node_name})
    except ConfigError as exc:
        log.error("reload failed; keeping the running configuration", error=str(exc))
        agent.notifier.notify("READY=1", f"STATUS=reload failed: {exc}")
        return
    old = agent.config
    restart = [f for f in old.__struct_fields__
               if f not in LIVE and getattr(old, f) != getattr(new, f)]  # fmt: skip
    if restart:
        log.warning("changed settings need a restart to apply", settings=restart)
    changes = {f: getattr(new, f) for f in LIVE if getattr(old, f) != getattr(new, f)}
    agent.config = msgspec.structs.replace(old, **changes)
    if "tags" in changes:
        agent.set_tags(new.tags)
    if "checks" in changes:
        agent.set_checks(new.checks)
    if "history" in changes and agent.history is not None:
        agent.history.reconfigure(new.history)
    if "log_level" in changes or "log_format" in changes:
        shoal_logging.configure(new.log_level, new.log_format)
    log.info("configuration reloaded", applied=sorted(changes), need_restart=restart)
    agent.notifier.notify("READY=1", f"STATUS={agent.status_text()}")
