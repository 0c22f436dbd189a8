"""The agent's local HTTP JSON API, the CLI's only way in.

    GET  /                         what this is: name, version, node, the endpoints
    GET  /v1/health                200 when this agent is usable, 503 with the reasons
    GET  /v1/members[?status=S]    the member list
    GET  /v1/self                  this node, with its counters
    POST /v1/join  {"addrs": [..]} join through addresses; per-address outcome
    POST /v1/leave                 leave the cluster (the agent keeps running)
    POST /v1/tags {"set": {..}, "delete": [..]}  change this node's tags (kept across restarts)
    GET  /v1/events, GET /v1/watch, POST /v1/event/<name>, POST /v1/query/<name>
                                   event streams, user events, queries (api/events.py)
    PUT|GET|DELETE /v1/kv/<key>, GET /v1/kv/?prefix=   the key-value store (api/kv.py)
    PUT|GET|DELETE /v1/meta/<key>, GET /v1/meta/?prefix=[&watch]   the metadata log
                                   (api/meta.py; listing and watching: api/metawatch.py)

Listings (members, keys, controller) carry the change `index` they were
taken at and the agent's `run`: a client lists, then watches from there.
A fenced write names the controller epoch it is made under; one under an
epoch this agent knows is overtaken is refused with 409 (docs/storage.md).
    POST /v1/session, GET /v1/sessions, PUT /v1/session/<id>/renew, DELETE /v1/session/<id>,
    GET  /v1/checks, PUT /v1/check/<id>/pass|warn|fail   (api/liveness.py)
    GET  /v1/history[?file=&after=&limit=]   this agent's history log, raw (api/history.py)
    GET  /v1/coordinates[?near=NAME], GET /v1/rtt?a=NAME[&b=NAME]   network coordinates
                                   (Vivaldi; api/coordinates.py, docs/coordinates.md)
    GET  /v1/sd/prometheus         Prometheus http_sd_configs targets (api/sd.py)
    GET  /v1/keys[?local=1]        the keys installed on every live member, with counts
    POST /v1/keys/install|use|remove  {"key": "...", "local": false}   (docs/security.md)

Writes return once durable on this node (group commit, see daemon/disk/commit.py).

Errors are JSON too, `{"error": "..."}`, with a 4xx status for a bad request
(401 without the API token where one is needed, see api/access.py).
The HTTP layer is api/http.py (httptools); this module only routes. It
reads the agent through `AgentPort` (api/port.py): status snapshots and
commands, never the agent's insides. The API listens on loopback by
default; see docs/operations.md.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import time
from functools import partial
from typing import Any

from shoal import __version__
from shoal.daemon.api import coordinates, events, history, liveness, sd
from shoal.daemon.api.answers import Handler, HttpError, Raw, Request, Result
from shoal.daemon.api.events import EVENT_ROUTE, QUERY_ROUTE
from shoal.daemon.api.http import HttpServer
from shoal.daemon.api.kv import KV_PREFIX, kv_route
from shoal.daemon.api.meta import META_PREFIX, meta_route
from shoal.daemon.api.metatxn import TXN_BODY_BYTES, TXN_ROUTE
from shoal.daemon.api.metawatch import collection_route
from shoal.daemon.api.port import AgentPort, AgentStatus
from shoal.daemon.disk.dataformat import FORMAT_VERSION
from shoal.daemon.health import HEALTH_TAG, PASSING
from shoal.daemon.network.addresses import parse_address
from shoal.kernel.errors import ConfigError
from shoal.kernel.versions import PROTOCOLS
from shoal.membership.member import MemberState
from shoal.storage.records import MAX_VALUE_BYTES

MAX_BODY_BYTES = 64 * 1024
_STATUSES = {s.label for s in MemberState}
_HEALTH = ("passing", "warning", "critical")
_UI_TYPES = {"html": "text/html; charset=utf-8", "js": "text/javascript; charset=utf-8",
             "css": "text/css; charset=utf-8", "svg": "image/svg+xml"}  # fmt: skip
_UI_FILES: dict[str, bytes] = {}


class ApiServer:
    """Serves the API of one agent."""

    def __init__(self, agent: AgentPort) -> None:
        self.agent = agent
        self._http = HttpServer(self.handle, self.body_limit)
        self._routes: dict[tuple[str, str], Handler] = {
            ("GET", "/"): self.root,
            ("GET", "/v1/health"): self.health,
            ("GET", "/v1/members"): self.members,
            ("GET", "/v1/self"): self.self_info,
            ("POST", "/v1/join"): self.join,
            ("POST", "/v1/leave"): self.leave,
            ("POST", "/v1/tags"): self.tags,
            ("GET", "/v1/events"): partial(events.events_route, agent),
            ("GET", "/v1/watch"): partial(events.watch_route, agent),
            ("GET", "/v1/controller"): self.controller,
            ("POST", "/v1/force-leave"): self.force_leave,
            ("GET", "/metrics"): self.metrics,
            ("GET", "/v1/keys"): self.keys,
            ("POST", "/v1/session"): partial(liveness.open_session, agent),
            ("GET", "/v1/sessions"): partial(liveness.list_sessions, agent),
            ("GET", "/v1/checks"): partial(liveness.list_checks, agent),
            ("GET", "/v1/history"): partial(history.history_route, agent),
            ("GET", "/v1/coordinates"): partial(coordinates.coordinates_route, agent),
            ("GET", "/v1/rtt"): partial(coordinates.rtt_route, agent),
            ("GET", "/v1/sd/prometheus"): partial(sd.prometheus_route, agent),
        }
        for op in ("install", "use", "remove"):
            self._routes[("POST", f"/v1/keys/{op}")] = self.keys
        if agent.debug_api:
            self._routes[("POST", "/v1/debug/block")] = self.debug_block

    async def start(self, sock: socket.socket) -> None:
        """Serve on `sock` (bound to the `api` address when the agent
        opened its sockets), and on the unix socket if one is configured."""
        await self._http.start(sock)
        path = self.agent.config.access.socket
        if path:
            try:
                await self._http.start_unix(path)
            except OSError as exc:
                raise ConfigError(f"api_socket: cannot listen on {path}: {exc.strerror}") from None

    async def stop(self) -> None:
        """Close the listener and every open connection."""
        self.agent.watchers.end_all()
        self.agent.changes.end_all()
        if self.agent.meta is not None:
            self.agent.meta.watches.end_all()
        self._http.close()

    @staticmethod
    def body_limit(method: str, path: str) -> int:
        """The largest request body accepted for `method path`."""
        if method == "PUT" and (path.startswith(KV_PREFIX) or path.startswith(META_PREFIX)):
            return MAX_VALUE_BYTES
        if method == "POST" and path == TXN_ROUTE:
            return TXN_BODY_BYTES
        return MAX_BODY_BYTES

    def handle(self, request: Request) -> Any:
        """Route one request (see the module docstring)."""
        path = request.path
        if path.startswith("/ui") and (path == "/ui" or path.startswith("/ui/")):
            return self.ui(request)  # static files, no data: the page asks for the token
        if not self.agent.config.access.allows(request.method, path, request.authorization):
            self.agent.count("api_unauthorized")
            raise HttpError(401, "this call needs the API token (Authorization: Bearer ...; "
                            "the CLI reads --token-file or $SHOAL_API_TOKEN_FILE)")  # fmt: skip
        if path.startswith(KV_PREFIX):
            return kv_route(self.agent, request)
        if path == META_PREFIX and request.method == "GET":  # list, watch: api/metawatch.py
            return collection_route(self.agent, request)
        if path.startswith(META_PREFIX):
            return meta_route(self.agent, request)
        if path.startswith(EVENT_ROUTE):
            return events.user_event_route(self.agent, request)
        if path.startswith(QUERY_ROUTE):
            return events.query_route(self.agent, request)
        if request.path.startswith(liveness.SESSION_PREFIX):
            return liveness.session_op(self.agent, request)
        if request.path.startswith(liveness.CHECK_PREFIX):
            return liveness.check_op(self.agent, request)
        handler = self._routes.get((request.method, request.path))
        if handler is None:
            known = any(path == request.path for _, path in self._routes)
            raise HttpError(405 if known else 404, f"no {request.method} {request.path}")
        return handler(request)

    # -- routes --------------------------------------------------------------------

    def ui(self, request: Request) -> Result:
        """`GET /ui/<file>`: the status page's files (daemon/ui/), read once."""
        if request.method != "GET":
            raise HttpError(405, f"no {request.method} {request.path}")
        name = request.path[len("/ui/") :] or "index.html"
        kind = _UI_TYPES.get(name.rpartition(".")[2])
        if kind is None or "/" in name or name.startswith("."):
            raise HttpError(404, f"no {request.path}")
        body = _UI_FILES.get(name)
        if body is None:
            from importlib.resources import files

            try:
                body = files("shoal.daemon.ui").joinpath(name).read_bytes()
            except (FileNotFoundError, IsADirectoryError):
                raise HttpError(404, f"no {request.path}") from None
            _UI_FILES[name] = body
        return Raw(200, kind, body)

    def root(self, request: Request) -> Result:
        """What answers here (for a browser or `curl` pointed at the port)."""
        from shoal.native import describe

        paths = sorted(
            {f"{m} {p}" for m, p in self._routes}
            | {
                "GET|PUT|DELETE /v1/kv/<key>",
                "GET|PUT|DELETE /v1/meta/<key>",
                "GET /v1/meta/?prefix=[&watch]",
            }
        )
        return 200, {"name": "shoal", "version": __version__, "hot_path": describe(),
                     "node": self.agent.config.node_name, "cluster": self.agent.config.cluster,
                     "endpoints": paths, "docs": "docs/operations.md"}  # fmt: skip

    def health(self, request: Request) -> Result:
        """For load balancers and systemd probes: 200 when this agent is in
        the cluster and can keep what it is given; else 503 with why. That
        the answer comes at all says the event loop is responsive."""
        node = self.agent.status().node
        cfg = self.agent.config
        reasons = []
        if node.leaving:
            reasons.append("this agent has left the cluster (shoal join rejoins)")
        elif node.live_peers == 0 and cfg.join:
            reasons.append("alone: no member is reachable (seeds: "
                           + ", ".join(f"{h}:{p}" for h, p in cfg.join) + ")")  # fmt: skip
        data_dir = str(cfg.data_dir)
        if not os.access(data_dir, os.W_OK):
            reasons.append(f"the data directory {data_dir} is not writable")
        body = {"status": "unhealthy" if reasons else "ok", "reasons": reasons,
                "node": cfg.node_name, "peers": node.live_peers}  # fmt: skip
        return (503 if reasons else 200), body

    def members(self, request: Request) -> Result:
        """The members; `?status=`, `?health=` (passing, warning, critical:
        the worst of a member's checks, passing for a member without any)."""
        status = request.query.get("status", [None])[0]
        if status is not None and status not in _STATUSES:
            raise HttpError(400, f"status must be one of {', '.join(sorted(_STATUSES))}")
        health = request.query.get("health", [None])[0]
        if health is not None and health not in _HEALTH:
            raise HttpError(400, f"health must be one of {', '.join(_HEALTH)}")
        views = []
        snap = self.agent.status()
        node = snap.node
        for m in node.members:
            view = m.to_json()
            view["health"] = dict(m.tags).get(HEALTH_TAG, PASSING)
            view["voter"] = node.voter_role(m)  # voter, non-voter, replaced (issue 37)
            former = snap.former_ids.get(m.name)  # back with a new data directory
            view["former_node_id"] = former.hex() if former else None
            views.append(view)
        if status is not None:
            views = [v for v in views if v["status"] == status]
        if health is not None:
            views = [v for v in views if v["health"] == health]
        return 200, {"members": views, **self._at()}

    def _at(self) -> dict[str, Any]:
        """Where a listing stands in the change log: watch from here."""
        changes = self.agent.changes
        return {"index": changes.index, "run": changes.run}

    def self_info(self, request: Request) -> Result:
        status = self.agent.status()
        node = status.node
        me: dict[str, Any] = node.me.to_json()
        me["cluster"] = self.agent.config.cluster
        me["data_format"] = FORMAT_VERSION  # the data directory's, migrated at start
        me["health_score"] = node.health_score
        me["clock_offset_ms"] = node.clock_offset_ms
        me["watchers"] = status.watchers
        me["history_written"] = status.history_written
        me["counters"] = {**node.counters, **status.counters}
        me["release"] = __version__
        me["feature_level"] = node.feature_level
        me["held_back_by"] = list(node.held_back_by)
        me["speaks"] = dict(zip(PROTOCOLS, node.speaks, strict=True))
        cfg = self.agent.config  # alone by design: nothing to join, nobody to find
        me["single_node"] = cfg.bootstrap_expect == 1 and not cfg.join and not cfg.discovery
        if status.fault_drops is not None:
            me["counters"]["fault_injected_drops"] = status.fault_drops
        return 200, me

    async def join(self, request: Request) -> Result:
        try:
            parsed_body = json.loads(request.body)
        except (json.JSONDecodeError, UnicodeDecodeError):
            raise HttpError(400, 'body must be JSON: {"addrs": ["ADDR:PORT", ...]}') from None
        addrs = parsed_body.get("addrs") if isinstance(parsed_body, dict) else None
        if not isinstance(addrs, list) or not addrs or len(addrs) > 64:
            raise HttpError(400, 'addrs must be a list of 1 to 64 "ADDR:PORT" strings')
        try:  # a host name is resolved off the loop
            parsed = await asyncio.to_thread(lambda: [parse_address("addrs", a, 7946)
                                                      for a in addrs])  # fmt: skip
        except ConfigError as exc:
            raise HttpError(400, str(exc)) from None
        try:
            results = await self.agent.join(parsed)
        except TimeoutError:
            raise HttpError(504, "join attempts did not finish in time") from None
        return 200, {"joined": sum(1 for ok in results.values() if ok), "results": results}

    def tags(self, request: Request) -> Result:
        """`shoal tags`: set and delete tags; the tags after."""
        from shoal.kernel.codec import MAX_TAG_KEY_CHARS, MAX_TAG_VALUE_CHARS, MAX_TAGS

        usage = 'body must be JSON: {"set": {"KEY": "VALUE"}, "delete": ["KEY"]}'
        try:
            body = json.loads(request.body)
        except (json.JSONDecodeError, UnicodeDecodeError):
            raise HttpError(400, usage) from None
        set_tags = body.get("set", {}) if isinstance(body, dict) else None
        delete = body.get("delete", []) if isinstance(body, dict) else None
        if not isinstance(set_tags, dict) or not isinstance(delete, list) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in set_tags.items()
        ) or not all(isinstance(k, str) for k in delete):  # fmt: skip
            raise HttpError(400, usage)
        for key, value in set_tags.items():
            if not 0 < len(key) <= MAX_TAG_KEY_CHARS or len(value) > MAX_TAG_VALUE_CHARS:
                raise HttpError(400, f"a tag key is 1 to {MAX_TAG_KEY_CHARS} characters and a "
                                f"value at most {MAX_TAG_VALUE_CHARS}: {key!r}")  # fmt: skip
        current = dict(self.agent.status().node.me.tags)
        if len({**current, **set_tags}.keys() - set(delete)) > MAX_TAGS:
            raise HttpError(400, f"at most {MAX_TAGS} tags")
        return 200, {"tags": dict(self.agent.change_tags(set_tags, delete))}

    def leave(self, request: Request) -> Result:
        self.agent.leave()
        return 200, {"left": True}

    def controller(self, request: Request) -> Any:
        """The controller; with `?wait=S`, block up to S seconds until it
        changes from `?epoch=E` (or from what it is now)."""
        wait_text = request.query.get("wait", [None])[0]
        if wait_text is None:
            return 200, self._controller_now()
        try:
            wait_s = float(wait_text)
        except ValueError:
            raise HttpError(400, "wait must be a number of seconds") from None
        if not 0 <= wait_s <= 300:
            raise HttpError(400, "wait must be 0 to 300 seconds")
        return self._controller_wait(wait_s, request.query.get("epoch", [None])[0])

    async def _controller_wait(self, wait_s: float, epoch_text: str | None) -> Result:
        now = self._controller_now()
        if epoch_text is not None and epoch_text != str(now["epoch"]):
            return 200, now  # already different from what the caller knows
        await self.agent.controller_watch.wait(wait_s)
        return 200, self._controller_now()

    def _controller_now(self) -> dict[str, Any]:
        agent = self.agent
        return {**_controller_info(agent.status(), agent.controller_watch.since_wall_ms,
                                   agent.loop_time()), **self._at()}  # fmt: skip

    def metrics(self, request: Request) -> Result:
        from shoal.daemon.api.metrics import CONTENT_TYPE, render

        return Raw(200, CONTENT_TYPE, render(self.agent.status()))

    def debug_block(self, request: Request) -> Result:
        """Test hook (SHOAL_DEBUG_API=1 only): block the event loop, as a
        buggy blocking call would, to prove the watchdog notices."""
        try:
            seconds = float(json.loads(request.body)["seconds"])
        except (ValueError, KeyError, TypeError):
            raise HttpError(400, 'body must be JSON: {"seconds": S}') from None
        if not 0 < seconds <= 60:
            raise HttpError(400, "seconds must be in (0, 60]")
        time.sleep(seconds)  # deliberately blocking: that is the point
        return 200, {"blocked_s": seconds}

    async def force_leave(self, request: Request) -> Result:
        """`shoal force-leave NODE`: remove a failed voter, from any agent
        (forwarded to the controller's agent); a live member is refused."""
        try:
            body = json.loads(request.body)
            name = body["node"]
            if not isinstance(name, str) or not name:
                raise ValueError
        except (ValueError, KeyError, TypeError):
            raise HttpError(400, 'body must be JSON: {"node": "NAME"}') from None
        node = self.agent.status().node
        member = next((m for m in node.members if m.name == name), None)
        if member is None:
            raise HttpError(404, f"no member {name!r} in this agent's view")
        if member.state.label in ("alive", "suspect"):
            raise HttpError(409, f"{name} is {member.state.label}: force-leave removes a failed "
                            "member only (stop it, or run `shoal leave` on it)")  # fmt: skip
        if name not in node.voters:
            raise HttpError(404, f"{name} is {member.state.label} and not a voter: nothing to "
                            "remove (its entry is reaped after swim.dead_reap_s)")  # fmt: skip
        if node.is_controller:
            reply = self.agent.force_leave_here(name.encode())
        else:
            holder = next((m for m in node.members if m.name == node.controller), None)
            if holder is None:
                raise HttpError(503, "no controller is known now; try again after the election")
            reply = await self.agent.queries.ask_one(holder.addr, "_force-leave", name.encode(),
                                                     5.0)  # fmt: skip
        if reply.status != "answered":
            raise HttpError(409, reply.error or "the controller refused")
        return 200, {"removing": name, "by": node.controller}

    async def keys(self, request: Request) -> Result:
        """`shoal keys`: list, or change the keyring here and on every member."""
        from shoal.kernel.sealing import KeyringError, parse_key

        op = request.path.rpartition("/")[2]
        if op == "keys":
            local = request.query.get("local", ["0"])[0] in ("", "1", "true")
            outcome = await self.agent.keys.run("list", None, local)
            return 200, outcome.to_json()
        try:
            body = json.loads(request.body)
            key = parse_key(body["key"])
            local = body.get("local", False)
            if not isinstance(local, bool):
                raise ValueError
        except KeyringError as exc:
            raise HttpError(400, str(exc)) from None
        except (ValueError, KeyError, TypeError, AttributeError):
            raise HttpError(400, 'body must be JSON: {"key": "BASE64", "local": false}') from None
        outcome = await self.agent.keys.run(op, key, local)
        me = self.agent.config.node_name
        if me in outcome.errors:  # refused here: nothing was sent to the others
            raise HttpError(409, outcome.errors[me])
        return 200, outcome.to_json()


def _controller_info(status: AgentStatus, since_wall_ms: int, now: float) -> dict[str, Any]:
    """`GET /v1/controller`: who controls, with which epoch, for how long."""
    node = status.node
    known = node.controller is not None
    info: dict[str, Any] = {
        "controller": node.controller,
        "epoch": node.epoch,
        "is_self": node.is_controller,
        "since_wall_ms": since_wall_ms if known else None,
        "voters": list(node.voters),
        "voters_version": node.voters_version,
        "voter_ids": [i.hex() for i in node.voter_ids],  # [] until feature level 2
    }
    if node.is_controller:
        info["lease_remaining_s"] = round(max(0.0, node.lease_end_at - now), 3)
    elif known:
        info["lease_remaining_s"] = None  # only the controller knows its lease exactly
    return info
