"""The API of network coordinates (membership/vivaldi.py, docs/coordinates.md).

    GET /v1/coordinates[?near=NAME]  every member, with its coordinate (null
                                   if this agent has none for it yet) and whether
                                   this agent timed a direct probe to it; with
                                   `near`, nearest to NAME first, with `rtt_ms`
                                   (for `shoal members --near NAME`)
    GET /v1/rtt?a=NAME[&b=NAME]    the estimated round trip between a and b
                                   (b: this agent), in ms, with its error term

The agent serves them once `AgentPort` has `coordinates()` (see
`CoordinatePort`) and the server routes them:

    ("GET", "/v1/coordinates"): partial(coordinates.coordinates_route, agent),
    ("GET", "/v1/rtt"): partial(coordinates.rtt_route, agent),
"""

from __future__ import annotations

from typing import Any, Protocol

from shoal.daemon.api.answers import HttpError, Request, Result
from shoal.daemon.api.port import AgentStatus
from shoal.membership.vivaldi import Coordinate, CoordinateSnapshot

_MS = 1000.0


class CoordinatePort(Protocol):
    """What these routes read from the agent (a part of `AgentPort`)."""

    def status(self) -> AgentStatus:
        """A fresh snapshot."""

    def coordinates(self) -> CoordinateSnapshot:
        """This node's coordinate and its peers' (`SwimNode.coordinates_known`)."""


def coordinate_json(coord: Coordinate) -> dict[str, Any]:
    """A coordinate as Serf's API shows it: lengths in seconds."""
    return {"vec": list(coord.vec), "error": coord.error, "adjustment": coord.adjustment,
            "height": coord.height}  # fmt: skip


def coordinates_route(agent: CoordinatePort, request: Request) -> Result:
    """`GET /v1/coordinates[?near=NAME]`: every member in this agent's view,
    in table order (nearest to NAME first, then those without a coordinate),
    with its coordinate or null, and `direct`.

    Raises:
        HttpError: 404 when `near` names a member without a coordinate here.
    """
    snapshot = agent.coordinates()
    near = request.query.get("near", [""])[0]
    if near and near not in snapshot.coordinates:
        raise HttpError(404, f"no coordinate for {near!r} on this agent yet", field="near")
    rows = []
    for m in agent.status().node.members:
        coord = snapshot.coordinates.get(m.name)
        row: dict[str, Any] = {
            "name": m.name,
            "status": m.state.label,
            "coordinate": coordinate_json(coord) if coord is not None else None,
            "direct": snapshot.direct(snapshot.me, m.name),
        }
        if near:
            estimate = snapshot.rtt_s(near, m.name)
            row["rtt_ms"] = estimate[0] * _MS if estimate is not None else None
        rows.append(row)
    if near:
        rows.sort(key=lambda r: (r["rtt_ms"] is None, r["rtt_ms"] or 0.0))
    return 200, {"node": snapshot.me, "coordinates": rows}


def rtt_route(agent: CoordinatePort, request: Request) -> Result:
    """`GET /v1/rtt?a=NAME[&b=NAME]`: `rtt_ms`, `error` (the sum of the two
    coordinates' errors, dimensionless, as Vivaldi keeps them), `error_ms`
    (the estimate times that sum: a rough error bar), and `direct`.

    Raises:
        HttpError: 400 without `a`; 404 when a name has no coordinate here.
    """
    a = request.query.get("a", [""])[0]
    if not a:
        raise HttpError(400, "a is required: GET /v1/rtt?a=NAME[&b=NAME]", field="a")
    snapshot = agent.coordinates()
    b = request.query.get("b", [snapshot.me])[0] or snapshot.me
    for field, name in (("a", a), ("b", b)):
        if name not in snapshot.coordinates:
            raise HttpError(404, f"no coordinate for {name!r} on this agent yet (it has "
                            "one for a member once it has probed it directly)",
                            field=field)  # fmt: skip
    estimate = snapshot.rtt_s(a, b)
    if estimate is None:
        raise HttpError(409, f"the coordinates of {a!r} and {b!r} have different dimensions")
    rtt_s, error = estimate
    return 200, {"a": a, "b": b, "rtt_ms": rtt_s * _MS, "error": error,
                 "error_ms": rtt_s * error * _MS, "direct": snapshot.direct(a, b),
                 "measured_by": snapshot.me}  # fmt: skip
