"""Choosing the address to advertise, predictably.

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

import ipaddress

from shoal.kernel.contract import Address
from shoal.kernel.errors import ConfigError


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
