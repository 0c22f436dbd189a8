"""Agent configuration: TOML file, then SHOAL_* environment, then flags.

Everything ends in one frozen `AgentConfig`. Each layer overrides the one
before; every value is validated once, and a bad one raises `ConfigError`
whose message names the setting and says what was expected, e.g.
``bind: expected ADDR:PORT, got 'localhost'``.
"""

from __future__ import annotations

import ipaddress
import os
import socket
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import msgspec
import msgspec.structs

from shoal.daemon.api.access import ApiAccess, parse_access
from shoal.daemon.dns.config import DnsConfig, parse_dns
from shoal.daemon.keys import EncryptionConfig, parse_encryption
from shoal.daemon.network.addresses import parse_address
from shoal.election.config import LeaseConfig
from shoal.kernel.contract import Address
from shoal.kernel.errors import ConfigError
from shoal.membership.member import Tags, make_tags
from shoal.membership.profiles import PROFILES, SwimConfig
from shoal.services.checkconfig import CheckConfig, parse_checks
from shoal.storage.config import SyncConfig
from shoal.storage.history import HistoryConfig

DEFAULT_GOSSIP_PORT = 7946
DEFAULT_API_PORT = 7947
DEFAULT_DATA_DIR = "/var/lib/shoal"


class FaultConfig(msgspec.Struct, frozen=True):
    """Fault injection in the agent's own transport, for tests and benchmarks
    only (this kernel has no netem). Off unless a probability is set."""

    drop: float = 0.0
    duplicate: float = 0.0
    delay_s: float = 0.0
    seed: int = 0
    # Each group-commit fsync takes this much longer: a slow or busy disk.
    fsync_delay_s: float = 0.0

    @property
    def enabled(self) -> bool:
        """Whether any fault is switched on."""
        return bool(self.drop or self.duplicate or self.delay_s or self.fsync_delay_s)


class MetaSettings(msgspec.Struct, frozen=True):
    """`[meta]`: the metadata log (docs/metadata.md)."""

    # Off by default in this release: the log is a preview. Turn it on on
    # every agent of a cluster (the voters' changes then go through it).
    enabled: bool = False
    heartbeat_s: float = 0.1  # the controller's heartbeat (metalog/core.py, MetaConfig)
    answer_timeout_s: float = 3.0  # a forwarded write unanswered: unknown (504)
    snapshot_every: int = 10_000  # applied entries between snapshots (metalog/snapshot.py)
    keep_entries: int = 1_000  # entries kept behind a snapshot for followers slightly behind
    # The largest snapshot this agent takes from its controller (held in
    # memory as it arrives, as its state is once installed): chunks of a
    # larger one are refused and counted (meta_snapshot_chunks_too_large).
    max_snapshot_bytes: int = 512 * 1024 * 1024

    def __post_init__(self) -> None:
        if not 10 <= self.snapshot_every <= 10_000_000:
            raise ValueError("snapshot_every must be 10 to 10,000,000 entries")
        if not 1 << 20 <= self.max_snapshot_bytes <= 1 << 40:
            raise ValueError("max_snapshot_bytes must be 1 MiB (1048576) to 1 TiB")
        if not 0 <= self.keep_entries <= 10_000_000:
            raise ValueError("keep_entries must be 0 to 10,000,000 entries")
        if not 0.01 <= self.heartbeat_s <= 5.0:
            raise ValueError("heartbeat_s must be 0.01 to 5 seconds")
        if not 0.1 <= self.answer_timeout_s <= 60.0:
            raise ValueError("answer_timeout_s must be 0.1 to 60 seconds")


class AgentConfig(msgspec.Struct, frozen=True):
    """Everything `shoal agent` needs, validated."""

    node_name: str
    cluster: str = "shoal"
    bind: Address = ("0.0.0.0", DEFAULT_GOSSIP_PORT)
    advertise: Address | None = None
    join: tuple[Address, ...] = ()
    data_dir: Path = Path(DEFAULT_DATA_DIR)
    api: Address = ("127.0.0.1", DEFAULT_API_PORT)
    tags: Tags = ()
    profile: str = "lan"
    swim: SwimConfig = msgspec.field(default_factory=SwimConfig)
    store: SyncConfig = msgspec.field(default_factory=SyncConfig)
    election: LeaseConfig = msgspec.field(default_factory=LeaseConfig)
    history: HistoryConfig = msgspec.field(default_factory=HistoryConfig)
    bootstrap_expect: int = 3
    controller_handler: str = ""
    # (event type or "" for all, shell command): Serf's event handlers.
    event_handlers: tuple[tuple[str, str], ...] = ()
    log_level: str = "info"
    log_format: str = "auto"
    leave_timeout_s: float = 5.0
    faults: FaultConfig = msgspec.field(default_factory=FaultConfig)
    discovery: bool = True
    discovery_interfaces: tuple[str, ...] = ()
    discovery_service: str = "_shoal._udp.local."
    encryption: EncryptionConfig = msgspec.field(default_factory=EncryptionConfig)
    access: ApiAccess = msgspec.field(default_factory=ApiAccess)
    checks: tuple[CheckConfig, ...] = ()  # [[checks]] tables (services/checkconfig.py)
    enable_script_checks: bool = False
    dns: DnsConfig = msgspec.field(default_factory=DnsConfig)  # [dns] (daemon/dns/config.py)
    meta: MetaSettings = msgspec.field(default_factory=MetaSettings)


# -- parsing single values ------------------------------------------------------


def parse_tags(setting: str, items: list[str] | Mapping[str, Any]) -> Tags:
    """Tags from `k=v` strings or a TOML table."""
    if isinstance(items, str):
        items = [items]  # `tags = "web"`: one item, not its characters
    if isinstance(items, Mapping):
        pairs = {str(k): v for k, v in items.items()}
    else:
        pairs = {}
        for item in items:
            key, sep, value = str(item).partition("=")
            if not sep or not key:
                raise ConfigError(f"{setting}: expected KEY=VALUE, got {item!r}")
            pairs[key] = value
    for key, value in pairs.items():
        if not isinstance(value, str):
            raise ConfigError(f"{setting}: value of tag {key!r} must be a string")
    return make_tags(pairs)


def _swim(profile: str, overrides: Mapping[str, Any]) -> SwimConfig:
    if profile not in PROFILES:
        names = ", ".join(sorted(PROFILES))
        raise ConfigError(f"profile: unknown profile {profile!r} (choose from {names})")
    swim: SwimConfig = _section("swim", PROFILES[profile], overrides)
    return swim


def _section(name: str, base: Any, overrides: Any) -> Any:
    """`base` (a frozen struct of numbers and switches) with the
    `overrides` of the config table `[name]` applied and validated."""
    if not isinstance(overrides, Mapping):
        raise ConfigError(f"{name}: expected a table of settings")
    known = {f.name: f.type for f in msgspec.structs.fields(base)}
    for key, value in overrides.items():
        if key not in known:
            raise ConfigError(f"{name}.{key}: unknown setting")
        if known[key] in (bool, "bool"):
            if not isinstance(value, bool):
                raise ConfigError(f"{name}.{key}: expected true or false, got {value!r}")
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{name}.{key}: expected a number, got {value!r}")
        if known[key] is int and not isinstance(value, int):
            raise ConfigError(f"{name}.{key}: expected a whole number, got {value!r}")
        if value < 0:  # no setting of these tables is negative
            raise ConfigError(f"{name}.{key}: must not be negative, got {value!r}")
    try:
        return msgspec.structs.replace(base, **overrides)
    except ValueError as exc:
        # A rule between settings: name the ones the user wrote, and the rule.
        wrote = ", ".join(f"{name}.{k} = {v!r}" for k, v in overrides.items())
        raise ConfigError(f"{wrote}: {exc}" if wrote else f"{name}: {exc}") from None


# -- layering ---------------------------------------------------------------------

_TOP_KEYS = {
    "node_name", "cluster", "bind", "advertise", "join", "data_dir", "api", "tags",
    "profile", "swim", "store", "log_level", "log_format", "leave_timeout_s", "faults",
    "discovery", "discovery_interfaces", "discovery_service", "election", "bootstrap_expect",
    "controller_handler", "event_handlers", "history", "encryption", "encrypt", "api_token",
    "api_token_file", "api_socket", "checks", "enable_script_checks", "dns", "meta",
}  # fmt: skip

_ENV = {
    "SHOAL_NODE_NAME": "node_name",
    "SHOAL_CLUSTER": "cluster",
    "SHOAL_BIND": "bind",
    "SHOAL_ADVERTISE": "advertise",
    "SHOAL_JOIN": "join",
    "SHOAL_DATA_DIR": "data_dir",
    "SHOAL_API": "api",
    "SHOAL_TAGS": "tags",
    "SHOAL_PROFILE": "profile",
    "SHOAL_LOG_LEVEL": "log_level",
    "SHOAL_LOG_FORMAT": "log_format",
    "SHOAL_DISCOVERY": "discovery",
    "SHOAL_DISCOVERY_INTERFACES": "discovery_interfaces",
    "SHOAL_BOOTSTRAP_EXPECT": "bootstrap_expect",
    "SHOAL_ENCRYPT": "encrypt",
    "SHOAL_API_TOKEN_FILE": "api_token_file",
    "SHOAL_API_SOCKET": "api_socket",
}


def read_file(path: Path) -> dict[str, Any]:
    """The settings of a TOML config file.

    Raises:
        ConfigError: unreadable file, bad TOML, or an unknown setting.
    """
    import tomllib  # only when there is a file: start-up time matters

    try:
        with open(path, "rb") as f:
            raw = tomllib.load(f)
    except OSError as exc:
        raise ConfigError(f"config: cannot read {path}: {exc.strerror}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config: {path} is not valid TOML: {exc}") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"config: {path} is not UTF-8 text (byte {exc.start}: "
                          f"{exc.object[exc.start:exc.start + 1]!r})") from None  # fmt: skip
    unknown = sorted(set(raw) - _TOP_KEYS)
    if unknown:
        raise ConfigError(f"{unknown[0]}: unknown setting in {path}")
    return raw


def read_env(env: Mapping[str, str]) -> dict[str, Any]:
    """Settings from SHOAL_* variables (lists are comma-separated)."""
    out: dict[str, Any] = {}
    for var, key in _ENV.items():
        if var in env and env[var] != "":
            value: Any = env[var]
            if key in ("join", "tags", "discovery_interfaces"):
                value = [v.strip() for v in value.split(",") if v.strip()]
            out[key] = value
    return out


def build(layers: list[Mapping[str, Any]]) -> AgentConfig:
    """Merge layers (later wins) into a validated `AgentConfig`."""
    merged: dict[str, Any] = {}
    for layer in layers:
        for key, value in layer.items():
            if value is None:
                continue
            sections = ("swim", "store", "election", "faults", "history", "encryption", "dns",
                        "meta")  # fmt: skip
            if key in sections and isinstance(value, Mapping):
                merged[key] = {**merged.get(key, {}), **value}
            else:
                merged[key] = value
    return _validate(merged)


def _text(raw: Mapping[str, Any], key: str, default: str) -> str:
    value = raw.get(key, default)
    if not isinstance(value, str) or not value:
        raise ConfigError(f"{key}: expected a non-empty string, got {value!r}")
    return value


def _validate(raw: Mapping[str, Any]) -> AgentConfig:
    name = _text(raw, "node_name", socket.gethostname())
    if len(name) > 128:
        raise ConfigError("node_name: at most 128 characters")
    profile = _text(raw, "profile", "lan")
    swim_overrides = raw.get("swim", {})
    if not isinstance(swim_overrides, Mapping):
        raise ConfigError("swim: expected a table of settings")
    bind = parse_address("bind", raw.get("bind", f"0.0.0.0:{DEFAULT_GOSSIP_PORT}"))
    advertise = raw.get("advertise")
    join = raw.get("join", [])
    if isinstance(join, str):
        join = [join]
    if not isinstance(join, list):
        raise ConfigError("join: expected a list of ADDR:PORT")
    log_level = _text(raw, "log_level", "info").lower()
    if log_level not in ("debug", "info", "warning", "error"):
        raise ConfigError(f"log_level: expected debug, info, warning or error, got {log_level!r}")
    log_format = _text(raw, "log_format", "auto")
    if log_format not in ("auto", "json", "console"):
        raise ConfigError(f"log_format: expected auto, json or console, got {log_format!r}")
    leave_timeout = raw.get("leave_timeout_s", 5.0)
    if isinstance(leave_timeout, bool) or not isinstance(leave_timeout, (int, float)):
        raise ConfigError(f"leave_timeout_s: expected seconds, got {leave_timeout!r}")
    if not 0 <= leave_timeout <= 300:
        raise ConfigError("leave_timeout_s: expected 0 to 300 seconds")
    api = parse_address("api", raw.get("api", f"127.0.0.1:{DEFAULT_API_PORT}"))
    scripts = _flag(raw.get("enable_script_checks", False), "enable_script_checks")
    encryption = raw.get("encryption", {})
    if raw.get("encrypt") and isinstance(encryption, Mapping):  # --encrypt KEY, $SHOAL_ENCRYPT
        encryption = {**encryption, "key": raw["encrypt"]}
    return AgentConfig(
        node_name=name,
        cluster=_text(raw, "cluster", "shoal"),
        bind=bind,
        advertise=parse_address("advertise", advertise, bind[1]) if advertise else None,
        join=tuple(parse_address("join", j, DEFAULT_GOSSIP_PORT) for j in join),
        data_dir=Path(_text(raw, "data_dir", DEFAULT_DATA_DIR)),
        api=api,
        tags=parse_tags("tags", raw.get("tags", [])),
        profile=profile,
        swim=_swim(profile, swim_overrides),
        store=_section("store", SyncConfig(), raw.get("store", {})),
        election=_section("election", LeaseConfig(), raw.get("election", {})),
        history=_section("history", HistoryConfig(), raw.get("history", {})),
        bootstrap_expect=_bootstrap_expect(raw.get("bootstrap_expect", 3)),
        controller_handler=_handler(raw.get("controller_handler", "")),
        event_handlers=_event_handlers(raw.get("event_handlers", [])),
        log_level=log_level,
        log_format=log_format,
        leave_timeout_s=float(leave_timeout),
        faults=_faults(raw.get("faults", {})),
        discovery=_flag(raw.get("discovery", True), "discovery"),
        discovery_interfaces=_interfaces(raw.get("discovery_interfaces", [])),
        discovery_service=_service(raw.get("discovery_service", "_shoal._udp.local.")),
        encryption=parse_encryption(encryption),
        access=parse_access(dict(raw), api),
        checks=parse_checks(raw.get("checks", []), scripts),
        enable_script_checks=scripts,
        dns=parse_dns(raw.get("dns", {})),
        meta=_section("meta", MetaSettings(), raw.get("meta", {})),
    )


def _bootstrap_expect(value: Any) -> int:
    if isinstance(value, str) and value.isdigit():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 64:
        raise ConfigError(f"bootstrap_expect: expected a number of nodes from 1 to 64, "
                          f"got {value!r}")  # fmt: skip
    return value


_EVENT_TYPES = ("member-joined", "member-left", "member-failed", "member-updated",
                "member-suspected", "member-refuted", "member-reaped", "controller-elected",
                "controller-lost", "controller-changed", "voters-changed",
                "member-health-changed")  # fmt: skip


# Serf's event names, accepted in handlers for the same events: a Serf
# handler configuration works unchanged (`member-join=...`).
_SERF_EVENTS = {"member-join": "member-joined", "member-leave": "member-left",
                "member-update": "member-updated", "member-reap": "member-reaped"}  # fmt: skip


def valid_event_name(name: str) -> bool:
    """Whether `name` may name a user event or a query."""
    return 0 < len(name) <= 128 and name.isprintable() and not any(c.isspace() for c in name)


def _event_handlers(value: Any) -> tuple[tuple[str, str], ...]:
    """`["member-joined=cmd", "cmd-for-all", "user:deploy=cmd", "query:load=cmd"]`
    (Serf's -event-handler forms)."""
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list):
        raise ConfigError('event_handlers: expected a list of "[EVENT=]COMMAND" strings')
    out = []
    for item in value:
        if not isinstance(item, str) or not item.strip():
            raise ConfigError(f'event_handlers: expected "[EVENT=]COMMAND", got {item!r}')
        event, sep, command = item.partition("=")
        event = _SERF_EVENTS.get(event, event) if sep else event
        if sep and event in _EVENT_TYPES:
            out.append((event, command))
        elif sep and (event == "user" or event.startswith(("user:", "query:"))):
            name = event.partition(":")[2]
            if event != "user" and not valid_event_name(name):
                raise ConfigError(f"event_handlers: {event!r}: a user event or query name is "
                                  "1 to 128 printable characters without spaces")  # fmt: skip
            out.append((event, command))
        elif sep and " " not in event and event.startswith(("member-", "controller-")):
            raise ConfigError(f"event_handlers: unknown event {event!r} "
                              f"(one of {', '.join(_EVENT_TYPES)})")  # fmt: skip
        else:
            out.append(("", item))
    return tuple(out)


def _handler(value: Any) -> str:
    if not isinstance(value, str):
        raise ConfigError(f"controller_handler: expected a shell command, got {value!r}")
    return value


def _flag(value: Any, setting: str) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("1", "true", "yes", "on", "0", "false",
                                                     "no", "off"):  # fmt: skip
        return value.lower() in ("1", "true", "yes", "on")
    raise ConfigError(f"{setting}: expected true or false, got {value!r}")


def _interfaces(value: Any) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list):
        raise ConfigError("discovery_interfaces: expected a list of IPv4 addresses")
    out = []
    for item in value:
        try:
            out.append(str(ipaddress.IPv4Address(item)))
        except (ValueError, TypeError):
            raise ConfigError(
                f"discovery_interfaces: expected IPv4 addresses of this host, got {item!r}"
            ) from None
    return tuple(out)


def _service(value: Any) -> str:
    valid = isinstance(value, str) and value.startswith("_") and value.endswith("._udp.local.")
    if not valid:
        raise ConfigError(
            f"discovery_service: expected a DNS-SD type like _shoal._udp.local., got {value!r}"
        )
    return str(value)


def _faults(raw: Any) -> FaultConfig:
    if not isinstance(raw, Mapping):
        raise ConfigError("faults: expected a table")
    values: dict[str, Any] = {}
    for key, value in raw.items():
        if key not in ("drop", "duplicate", "delay_s", "seed", "fsync_delay_s"):
            raise ConfigError(f"faults.{key}: unknown setting")
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"faults.{key}: expected a number")
        values[key] = value
    for key in ("drop", "duplicate"):
        if not 0 <= values.get(key, 0) < 1:
            raise ConfigError(f"faults.{key}: expected a probability in [0, 1)")
    for key in ("delay_s", "fsync_delay_s"):
        if values.get(key, 0) < 0:
            raise ConfigError(f"faults.{key}: expected seconds >= 0")
    return FaultConfig(**values)


def load(flags: Mapping[str, Any], env: Mapping[str, str] | None = None) -> AgentConfig:
    """The agent's config from an optional file, the environment and flags.

    The file is `flags["config"]`, else $SHOAL_CONFIG, else none.
    """
    env = os.environ if env is None else env
    path = flags.get("config") or env.get("SHOAL_CONFIG")
    file_layer = read_file(Path(path)) if path else {}
    flag_layer = {k: v for k, v in flags.items() if k != "config"}
    return build([file_layer, read_env(env), flag_layer])
