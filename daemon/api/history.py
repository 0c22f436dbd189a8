"""The agent's own history log over the API, read-only, for `shoal history
collect` (docs/churn.md):

    GET /v1/history                          the files: name, bytes, oldest first
    GET /v1/history?file=NAME&after=OFFSET[&limit=BYTES]
                                             that file's bytes from OFFSET (raw;
                                             fewer than `limit` means its end)
    GET /v1/history?after=OFFSET             the same for the current file

Rotated files (`history-*.jsonl.gz`) never change once written; the current
one (`history.jsonl`) only grows until it rotates, so a collector resumes
each file at the size it already holds. The log names every member this
agent has seen: when the agent has an API token, reading it needs the token
even where other reads are open (as the key operations do).
"""

from __future__ import annotations

import hmac
from pathlib import Path

from shoal.daemon.api.answers import HttpError, Raw, Request, Result
from shoal.daemon.api.port import AgentPort
from shoal.storage.history import CURRENT, ROTATED_GLOB, history_files

# One answer reads at most 1 MiB, inline on the event loop: from the page
# cache that is about a millisecond (the HTTP layer answers Raw only from
# a plain handler, not an awaited one).
LIMIT_DEFAULT_BYTES = 1 << 20
LIMIT_MAX_BYTES = 1 << 20


def _directory(agent: AgentPort) -> Path:
    return Path(agent.config.data_dir) / "history"


def _int(request: Request, name: str, default: int, high: int) -> int:
    text = request.query.get(name, [str(default)])[0]
    try:
        value = int(text)
    except ValueError:
        raise HttpError(400, f"{name} must be a whole number, not {text!r}") from None
    if not 0 <= value <= high:
        raise HttpError(400, f"{name} must be between 0 and {high}")
    return value


def _authorised(agent: AgentPort, request: Request) -> bool:
    token = agent.config.access.token
    if not token:
        return True
    scheme, _, given = request.authorization.partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode(),
                                                              token.encode())  # fmt: skip


def _listing(directory: Path) -> list[dict[str, object]]:
    out: list[dict[str, object]] = []
    for path in history_files(directory):
        try:
            out.append({"name": path.name, "bytes": path.stat().st_size})
        except FileNotFoundError:  # rotated or pruned while listing
            continue
    return out


def _chunk(path: Path, after: int, limit: int) -> bytes:
    with open(path, "rb") as f:
        f.seek(after)
        return f.read(limit)


def history_route(agent: AgentPort, request: Request) -> Result:
    """`GET /v1/history`: the listing, or one file's bytes from an offset."""
    if not _authorised(agent, request):
        raise HttpError(401, "the history log needs the API token (Authorization: Bearer ...)")
    directory = _directory(agent)
    if "after" not in request.query and "file" not in request.query:
        files = _listing(directory)
        return 200, {"node": agent.config.node_name, "files": files}
    name = request.query.get("file", [CURRENT])[0]
    if "/" in name or "\\" in name or not (name == CURRENT or Path(name).match(ROTATED_GLOB)):
        raise HttpError(400, f"file must be {CURRENT} or a rotated history-*.jsonl.gz, not "
                        f"{name!r}")  # fmt: skip
    after = _int(request, "after", 0, 1 << 50)
    limit = _int(request, "limit", LIMIT_DEFAULT_BYTES, LIMIT_MAX_BYTES)
    try:
        body = _chunk(directory / name, after, limit)
    except FileNotFoundError:
        raise HttpError(404, f"no history file {name} (GET /v1/history lists them)") from None
    return Raw(200, "application/octet-stream", body)
