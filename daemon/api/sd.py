"""`GET /v1/sd/prometheus`: the cluster as Prometheus' `http_sd_configs` reads it.

One target group per alive or suspect member in this agent's view (a failed
or left member drops out, and Prometheus stops scraping it at its next
refresh), whose target is the member's API address, where `/metrics` is:

- the member's tag `api` (`HOST:PORT`) when it has one;
- else its advertised host and this agent's own API port (every agent of a
  cluster usually listens on the same port).

Labels (Prometheus keeps `__meta_*` for relabelling and drops them after):
`__meta_shoal_node`, `__meta_shoal_cluster`, `__meta_shoal_address` (its
gossip address), `__meta_shoal_status` (alive or suspect),
`__meta_shoal_health` (passing, warning or critical: the worst of its
checks), `__meta_shoal_controller` ("true" on the member this agent knows
as controller), and `__meta_shoal_tag_<key>` for each tag, the key with
every character outside `[a-zA-Z0-9_]` replaced by `_`, as Prometheus' own
Consul discovery does for node metadata.

It hands out the address of every agent's API, so with an API token set it
needs the token even on loopback (api/access.py); Prometheus sends it with
the `authorization` setting of the `http_sd_configs` entry.
"""

from __future__ import annotations

import re

from shoal.daemon.api.answers import Request, Result
from shoal.daemon.api.port import AgentPort
from shoal.daemon.health import HEALTH_TAG, PASSING
from shoal.membership.member import MemberState

SD_PREFIX = "/v1/sd"
_NOT_LABEL = re.compile(r"[^a-zA-Z0-9_]")
_LIVE = (MemberState.ALIVE, MemberState.SUSPECT)


def prometheus_route(agent: AgentPort, request: Request) -> Result:
    """The target groups (module docstring)."""
    status = agent.status().node
    cfg = agent.config
    groups = []
    for m in status.members:
        if m.state not in _LIVE:
            continue
        tags = dict(m.tags)
        labels = {
            "__meta_shoal_node": m.name,
            "__meta_shoal_cluster": cfg.cluster,
            "__meta_shoal_address": f"{m.addr[0]}:{m.addr[1]}",
            "__meta_shoal_status": m.state.label,
            "__meta_shoal_health": tags.get(HEALTH_TAG, PASSING),
            "__meta_shoal_controller": "true" if m.name == status.controller else "false",
        }
        for key, value in sorted(tags.items()):
            labels[f"__meta_shoal_tag_{_NOT_LABEL.sub('_', key)}"] = value
        target = tags.get("api") or f"{m.addr[0]}:{cfg.api[1]}"
        groups.append({"targets": [target], "labels": labels})
    return 200, groups
