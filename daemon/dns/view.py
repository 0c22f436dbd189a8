"""What DNS answers from: one agent's view of the cluster, indexed by name.

Built from the status snapshot the API reads (daemon/api/port.py), once per
change of that view, never per query. Who is in an answer (Consul's rules):

- `NAME.node.DOMAIN`: alive and suspect members (a suspect may refute);
  failed and left ones are gone. `only_passing` leaves suspects out.
- tags and services: the same, less members whose health (the
  `shoal:health` tag, daemon/health.py) is critical; `only_passing` leaves
  out warning ones too.
- `controller.DOMAIN`: the controller this agent knows, while it is alive
  or suspect in this agent's view.

A service port is a tag `service:NAME=PORT` (or `PORT/udp`; tcp when no
protocol is given): `shoal tags --set service:http=8080` makes the member
an SRV target of `_http._tcp.service.DOMAIN` (docs/operations.md, "DNS").
Names are matched without regard to case, as DNS does.
"""

from __future__ import annotations

import msgspec

from shoal.daemon.dns.config import DnsConfig
from shoal.election.config import HEALTH_TAG
from shoal.membership.member import MemberState, MemberView

SERVICE_TAG = "service:"
_LIVE = (MemberState.ALIVE, MemberState.SUSPECT)


class Target(msgspec.Struct, frozen=True):
    """One member in an answer: its name (the label under `node.`) and IPv4 address."""

    name: str
    ip: str


class ServiceTarget(msgspec.Struct, frozen=True):
    """One member offering a service on a port."""

    target: Target
    port: int


class ClusterView(msgspec.Struct, frozen=True):
    """The names this agent answers for, at one moment (module docstring)."""

    nodes: dict[str, tuple[Target, tuple[str, ...]]]  # lower-case name: target, its tags as k=v
    tags: dict[tuple[str, str], tuple[Target, ...]]  # (key, value), lower case
    services: dict[tuple[str, str], tuple[ServiceTarget, ...]]  # (name, "tcp"|"udp")
    controller: Target | None
    epoch: int | None


def build_view(members: tuple[MemberView, ...], controller: str | None, epoch: int | None,
               cfg: DnsConfig) -> ClusterView:  # fmt: skip
    """Index `members` (a status snapshot's) for answering."""
    nodes: dict[str, tuple[Target, tuple[str, ...]]] = {}
    tags: dict[tuple[str, str], list[Target]] = {}
    services: dict[tuple[str, str], list[ServiceTarget]] = {}
    boss = None
    for m in members:
        if m.state not in _LIVE:
            continue
        target = Target(m.name, m.addr[0])
        if m.name == controller:
            boss = target
        if cfg.only_passing and m.state is not MemberState.ALIVE:
            continue
        nodes[m.name.lower()] = (target, tuple(f"{k}={v}" for k, v in m.tags))
        if not _healthy(dict(m.tags).get(HEALTH_TAG, "passing"), cfg.only_passing):
            continue
        for key, value in m.tags:
            tags.setdefault((key.lower(), value.lower()), []).append(target)
            service = _service(key, value)
            if service is not None:
                name, proto, port = service
                services.setdefault((name, proto), []).append(ServiceTarget(target, port))
    return ClusterView(nodes, {k: tuple(v) for k, v in tags.items()},
                       {k: tuple(v) for k, v in services.items()},
                       boss, epoch if boss is not None else None)  # fmt: skip


def _healthy(health: str, only_passing: bool) -> bool:
    return health == "passing" or (health == "warning" and not only_passing)


def _service(key: str, value: str) -> tuple[str, str, int] | None:
    """(name, protocol, port) of a `service:NAME=PORT[/udp|/tcp]` tag, else None."""
    if not key.startswith(SERVICE_TAG):
        return None
    name = key[len(SERVICE_TAG) :].lower()
    port_text, _, proto = value.partition("/")
    proto = proto.lower() or "tcp"
    valid_name = 0 < len(name) <= 62 and name.isascii() and name.replace("-", "").isalnum()
    if not valid_name or proto not in ("tcp", "udp") or not port_text.isdigit():
        return None
    port = int(port_text)
    return (name, proto, port) if 0 < port < 65536 else None
