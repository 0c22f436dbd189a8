"""Health checks as the config file declares them: `[[checks]]` tables.

    enable_script_checks = false        # script checks are refused unless true
    [[checks]]
    id = "broker-port"                  # letters, digits, . _ - (1-64)
    kind = "tcp"                        # script | http | tcp | ttl
    target = "127.0.0.1:9092"           # script: a shell command; http: a URL;
                                        # tcp: ADDR:PORT; ttl: none
    interval_s = 5                      # at least 1 (not for ttl)
    timeout_s = 2                       # at most interval_s
    passing_after = 1                   # consecutive passes before passing (Consul's
                                        #   success_before_passing)
    critical_after = 1                  # consecutive failures before critical (Consul's
                                        #   failures_before_critical)
    ttl_s = 15                          # ttl only: critical unless updated within it

Results follow Consul's: an HTTP check passes on 2xx, warns on 429, fails
otherwise; a TCP check passes when a connection opens; a script check
passes on exit 0, warns on exit 1, fails on anything else or its timeout; a
TTL check is what the application last said through `PUT
/v1/check/ID/pass|warn|fail`, and critical when it stopped saying it. A new
check starts critical (nothing is known yet). The state machines are
services/checks.py, the runner daemon/health.py.

Script checks run any command the config names as the agent's user, so
they are off unless `enable_script_checks = true` (docs/security.md).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

import msgspec

from shoal.kernel.errors import ConfigError

KINDS = ("script", "http", "tcp", "ttl")
MIN_INTERVAL_S = 1.0
MAX_CHECKS = 64
_ID = re.compile(r"[A-Za-z0-9._-]{1,64}")
_KEYS = {"id", "kind", "target", "interval_s", "timeout_s", "passing_after", "critical_after",
         "ttl_s"}  # fmt: skip


class CheckConfig(msgspec.Struct, frozen=True):
    """One declared check (module docstring)."""

    id: str
    kind: str
    target: str = ""
    interval_s: float = 10.0
    timeout_s: float = 5.0
    passing_after: int = 1
    critical_after: int = 1
    ttl_s: float = 0.0


def parse_checks(value: Any, scripts_enabled: bool) -> tuple[CheckConfig, ...]:
    """The `[[checks]]` tables, validated.

    Raises:
        ConfigError: naming the check and the setting.
    """
    if isinstance(value, Mapping):
        value = [value]
    if not isinstance(value, list):
        raise ConfigError("checks: expected [[checks]] tables")
    if len(value) > MAX_CHECKS:
        raise ConfigError(f"checks: at most {MAX_CHECKS} checks")
    out: list[CheckConfig] = []
    for n, raw in enumerate(value):
        check = _one(n, raw, scripts_enabled)
        if any(c.id == check.id for c in out):
            raise ConfigError(f"check {check.id!r}: declared twice")
        out.append(check)
    return tuple(out)


def _one(n: int, raw: Any, scripts_enabled: bool) -> CheckConfig:
    if not isinstance(raw, Mapping):
        raise ConfigError(f"check #{n + 1}: expected a table")
    check_id = raw.get("id")
    if not isinstance(check_id, str) or not _ID.fullmatch(check_id):
        raise ConfigError(f"check #{n + 1}: id must be 1-64 letters, digits, '.', '_' or '-', "
                          f"got {check_id!r}")  # fmt: skip
    where = f"check {check_id!r}"
    unknown = sorted(set(raw) - _KEYS)
    if unknown:
        raise ConfigError(f"{where}: unknown setting {unknown[0]!r}")
    kind = raw.get("kind")
    if kind not in KINDS:
        raise ConfigError(f"{where}: kind must be one of {', '.join(KINDS)}, got {kind!r}")
    if kind == "script" and not scripts_enabled:
        raise ConfigError(f"{where}: script checks are off; set enable_script_checks = true "
                          "to run commands from the config (docs/security.md)")  # fmt: skip
    target = raw.get("target", "")
    if not isinstance(target, str):
        raise ConfigError(f"{where}: target must be a string")
    _check_target(where, kind, target)
    interval = _seconds(where, "interval_s", raw.get("interval_s", 10.0))
    timeout = _seconds(where, "timeout_s", raw.get("timeout_s", min(5.0, interval)))
    ttl = _seconds(where, "ttl_s", raw.get("ttl_s", 0.0)) if "ttl_s" in raw else 0.0
    if kind == "ttl":
        if ttl < MIN_INTERVAL_S:
            raise ConfigError(f"{where}: a ttl check needs ttl_s of at least {MIN_INTERVAL_S:g}")
    else:
        if interval < MIN_INTERVAL_S:
            raise ConfigError(f"{where}: interval_s must be at least {MIN_INTERVAL_S:g} s")
        if not 0 < timeout <= interval:
            raise ConfigError(f"{where}: timeout_s must be above 0 and at most interval_s")
    counts = {}
    for name in ("passing_after", "critical_after"):
        count = raw.get(name, 1)
        if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= 100:
            raise ConfigError(f"{where}: {name} must be 1 to 100, got {count!r}")
        counts[name] = count
    return CheckConfig(check_id, kind, target, interval, timeout, counts["passing_after"],
                       counts["critical_after"], ttl)  # fmt: skip


def _check_target(where: str, kind: str, target: str) -> None:
    if kind == "ttl":
        if target:
            raise ConfigError(f"{where}: a ttl check has no target")
        return
    if not target:
        raise ConfigError(f"{where}: a {kind} check needs a target")
    if kind == "http":
        parts = urlsplit(target)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ConfigError(f"{where}: target must be an http:// or https:// URL")
    elif kind == "tcp":
        host, sep, port = target.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ConfigError(f"{where}: target must be ADDR:PORT")


def _seconds(where: str, name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 86400:
        raise ConfigError(f"{where}: {name} must be seconds (0 to 86400), got {value!r}")
    return float(value)
