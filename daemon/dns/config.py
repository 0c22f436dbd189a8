"""The DNS interface's settings: the `[dns]` table.

    [dns]
    bind = "127.0.0.1:8600"     # off unless set (Consul's DNS port); UDP and TCP
    domain = "shoal."           # the zone answered: NAME.node.shoal, controller.shoal, ...
    ttl_s = 0                   # TTL of node, tag and service answers (controller: always 0)
    only_passing = false        # true: suspects and warning members are left out too
    udp_answer_limit = 0        # at most this many answers over UDP, then TC (0: size only)

Read by daemon/config.py (`parse_dns`), served by daemon/dns/server.py; the
records are in daemon/dns/zone.py and docs/operations.md ("DNS"). A change
takes effect at the next start, not on SIGHUP.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec

from shoal.daemon.network.addresses import parse_address
from shoal.kernel.contract import Address
from shoal.kernel.errors import ConfigError

DEFAULT_DNS_PORT = 8600  # Consul's: resolvers forwarding a domain already point there
MAX_TTL_S = 86_400
_KEYS = ("bind", "domain", "ttl_s", "only_passing", "udp_answer_limit")


class DnsConfig(msgspec.Struct, frozen=True):
    """The validated `[dns]` table (module docstring)."""

    bind: Address | None = None  # None: no DNS server
    domain: str = "shoal."  # always lower case, with the final dot
    # Consul's node_ttl and service_ttl default to 0: every answer is fresh,
    # so a caching resolver never hands out a member that failed a second ago.
    ttl_s: int = 0
    only_passing: bool = False  # Consul's dns_config.only_passing
    # Consul's udp_answer_limit (its default 3 is a load-balancing choice,
    # not needed here): 0 keeps as many as fit in the UDP payload.
    udp_answer_limit: int = 0


def parse_dns(raw: Any) -> DnsConfig:
    """The `[dns]` table from the merged config layers.

    Raises:
        ConfigError: naming the setting, e.g. ``dns.bind: expected ADDR:PORT``.
    """
    if not isinstance(raw, Mapping):
        raise ConfigError("dns: expected a table of settings")
    for key in raw:
        if key not in _KEYS:
            raise ConfigError(f"dns.{key}: unknown setting (one of {', '.join(_KEYS)})")
    bind = raw.get("bind")
    only = raw.get("only_passing", False)
    if not isinstance(only, bool):
        raise ConfigError(f"dns.only_passing: expected true or false, got {only!r}")
    return DnsConfig(
        bind=None if bind in (None, "") else parse_address("dns.bind", bind, DEFAULT_DNS_PORT),
        domain=_domain(raw.get("domain", "shoal.")),
        ttl_s=_whole("ttl_s", raw.get("ttl_s", 0), MAX_TTL_S),
        only_passing=only,
        udp_answer_limit=_whole("udp_answer_limit", raw.get("udp_answer_limit", 0), 1000),
    )


def _whole(name: str, value: Any, most: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= most:
        raise ConfigError(f"dns.{name}: expected a whole number from 0 to {most}, got {value!r}")
    return value


def _domain(value: Any) -> str:
    """`shoal`, `shoal.` or `cluster.example.` as lower case with the final dot."""
    if not isinstance(value, str):
        raise ConfigError(f"dns.domain: expected a domain name like shoal., got {value!r}")
    name = value.lower().rstrip(".")
    labels = name.split(".")
    ok = 0 < len(name) <= 200 and all(
        0 < len(label) <= 63 and label.replace("-", "").replace("_", "").isalnum()
        and label.isascii() and not label.startswith("-")
        for label in labels
    )  # fmt: skip
    if not ok:
        raise ConfigError(f"dns.domain: expected a domain name like shoal., got {value!r}")
    return name + "."
