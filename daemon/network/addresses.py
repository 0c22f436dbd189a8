"""Addresses: parsing `ADDR:PORT` settings, and choosing the address to
advertise, predictably.

`parse_address` lives here, not in config.py, so that the command line can
check `--api` without loading the agent's configuration (issue 42).

A node bound to one address advertises that address. A node bound to
0.0.0.0 must pick one of the host's IPv4 addresses, and picking wrong (a
docker bridge, a management NIC) splits a cluster in ways that are hard to
see. The rule, applied in order:

1. `advertise` set: use it.
2. bound to a specific address: advertise it.
3. otherwise the host's addresses on interfaces that are up, excluding
   loopback and link-local: exactly one private (RFC 1918) address is chosen;
   with none private, exactly one public one; anything else is an error that
   lists the candidates and names the setting that resolves it.
"""

from __future__ import annotations

import socket

from shoal.kernel.errors import ConfigError

# Not `typing` itself: `shoal members` would load it for annotations alone.
TYPE_CHECKING = False
if TYPE_CHECKING:  # the contract loads msgspec: `shoal members` checks --api with this
    from shoal.kernel.contract import Address


def host_addresses() -> list[tuple[str, str]]:
    """(interface, IPv4 address) for every address of this host."""
    import ifaddr  # a dependency of zeroconf; imported only when needed

    found: list[tuple[str, str]] = []
    for adapter in ifaddr.get_adapters():
        for ip in adapter.ips:
            if isinstance(ip.ip, str):
                found.append((adapter.nice_name, ip.ip))
    return found


def choose_advertise(
    bind: Address, advertise: Address | None, candidates: list[tuple[str, str]] | None = None
) -> tuple[Address, str]:
    """The address to advertise and a sentence saying why it was chosen.

    Raises:
        ConfigError: no usable address, or several equally good ones.
    """
    if advertise is not None:
        return advertise, "set by advertise"
    if bind[0] != "0.0.0.0":
        return bind, "the bind address"
    import ipaddress  # here: `shoal members` parses --api with this module

    usable = []
    for iface, text in host_addresses() if candidates is None else candidates:
        ip = ipaddress.IPv4Address(text)
        if not (ip.is_loopback or ip.is_link_local or ip.is_multicast or ip.is_unspecified):
            usable.append((iface, ip))
    private = [(i, ip) for i, ip in usable if ip.is_private]
    pool = private or usable
    if len(pool) == 1:
        iface, ip = pool[0]
        kind = "private" if private else "public"
        return (str(ip), bind[1]), f"the only {kind} IPv4 address, on {iface}"
    if not pool:
        raise ConfigError(
            "advertise: bound to 0.0.0.0 but this host has no usable IPv4 address; "
            "set advertise (--advertise ADDR) or bind to an address (--bind ADDR:PORT)"
        )
    listed = ", ".join(f"{ip} on {iface}" for iface, ip in pool)
    raise ConfigError(
        f"advertise: bound to 0.0.0.0 and several addresses could be advertised ({listed}); "
        "set advertise (--advertise ADDR) or bind to one address (--bind ADDR:PORT)"
    )


def parse_address(setting: str, text: str, default_port: int | None = None) -> Address:
    """Parse `ADDR:PORT` (or `ADDR` when a default port is given).

    Raises:
        ConfigError: naming `setting`.
    """
    if not isinstance(text, str):
        raise ConfigError(f"{setting}: expected ADDR:PORT, got {text!r}")
    host, sep, port_text = text.rpartition(":")
    if not sep:
        host, port_text = text, ""
    if not port_text:
        if default_port is None:
            raise ConfigError(f"{setting}: expected ADDR:PORT, got {text!r}")
        port_text = str(default_port)
    if host.startswith("[") or ":" in host:
        raise ConfigError(f"{setting}: {text!r} is an IPv6 address; shoal's transport is IPv4 "
                          "only for now (docs/operations.md)")  # fmt: skip
    try:
        port = int(port_text)
    except ValueError:
        raise ConfigError(f"{setting}: expected ADDR:PORT, got {text!r}") from None
    if not 0 < port < 65536:
        raise ConfigError(f"{setting}: port must be 1-65535, got {port}")
    return (_ipv4(setting, host), port)


def _dotted_quad(text: str) -> bool:
    """Whether `text` is an IPv4 address in dotted-quad form, as
    `ipaddress.IPv4Address` reads it (four decimal octets, no leading
    zeros), without importing ipaddress (5 ms of a `shoal members`)."""
    parts = text.split(".")
    return len(parts) == 4 and all(
        p.isdigit() and p.isascii() and len(p) <= 3 and int(p) <= 255
        and (p == "0" or not p.startswith("0")) for p in parts)  # fmt: skip


def _ipv4(setting: str, host: str) -> str:
    """`host` as an IPv4 address: itself, or a host name resolved once, now
    (an agent keeps the address it resolved; restart it after a DNS change)."""
    if _dotted_quad(host):
        return host
    if not host or len(host) > 253 or not all(c.isalnum() or c in ".-_" for c in host):
        raise ConfigError(f"{setting}: expected an IPv4 address or a host name, got {host!r}")
    try:
        infos = socket.getaddrinfo(host, None, socket.AF_INET, socket.SOCK_DGRAM)
    except OSError as exc:
        raise ConfigError(f"{setting}: cannot resolve {host!r} to an IPv4 address: "
                          f"{exc.strerror or exc}") from None  # fmt: skip
    return str(infos[0][4][0])
