"""What a call to an agent can raise, one class per cause:

    ShoalError              base; `.status` is the HTTP status, None when no answer came
    ├── BadRequest          400: the request was malformed (a bad fence, prefix, index)
    ├── Unauthorized        401: the call needs the API token
    ├── NotFound            404: no such key, member, voter, session or check
    ├── Conflict            409: refused by a fence (`.fence`, `.epoch`), by a meta `cas`
    │                       (`.current`), or by the cluster's state
    ├── Gone                410: a watch position the agent no longer holds (`.run`, `.index`)
    │   └── Compacted       410 from a metadata watch: its revision is compacted (`.revision`)
    ├── TooLarge            413: a payload or note over the agent's limit
    ├── Busy                429: the agent's queue is full (user events): retry later
    ├── Unavailable         503, or no answer at all (no agent, refused, reset, timed out)
    │   └── NotApplied      503 from the metadata log: the write was not appended; safe to retry
    ├── Unknown             504, or no answer to a metadata write: it may have been committed
    └── IncompatibleAgent   the agent lacks an endpoint this call needs, or answered unreadably

Local misuse (an empty key, a bad regular expression) raises ValueError or
re.error as Python does, not these. This module imports nothing of shoal's,
so a program using the client carries none of the agent with it.
"""

from __future__ import annotations

from typing import Any


class ShoalError(Exception):
    """Base of every error the client raises for an agent's answer (or its absence).

    Attributes:
        status: the HTTP status of the refusal; None when the agent did not answer.
        message: the agent's own words (its `error` field), or why no answer came.
    """

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.status = status


class BadRequest(ShoalError):
    """400: the agent found the request malformed."""


class Unauthorized(ShoalError):
    """401: the call needs the API token (`token=`, `token_file=`, $SHOAL_API_TOKEN)."""


class NotFound(ShoalError):
    """404: no such key (or member, or voter)."""


class Conflict(ShoalError):
    """409: a write refused by a fence, or a command refused by the cluster's state.

    Attributes:
        fence: the fence the write carried (None when the refusal was not a fence's).
        epoch: the epoch that outranks it: the controller's, or the key's.
        current: a metadata key's mod revision when its `cas` did not
            match (0: the key is absent); None otherwise.
    """

    def __init__(self, message: str, status: int | None = 409, fence: int | None = None,
                 epoch: int | None = None, current: int | None = None) -> None:  # fmt: skip
        super().__init__(message, status)
        self.fence = fence
        self.epoch = epoch
        self.current = current


class Gone(ShoalError):
    """410: the agent restarted (another `run`) or no longer keeps changes that old.

    Attributes:
        run: the agent's run now. index: its current index.
    """

    def __init__(self, message: str, status: int | None = 410, run: str | None = None,
                 index: int | None = None) -> None:  # fmt: skip
        super().__init__(message, status)
        self.run = run
        self.index = index


class Compacted(Gone):
    """410 from a metadata watch: the changes up to `revision` (the
    compacted revision) are no longer kept by the agent. List the keys
    again (`meta.list`), then watch from the listing's revision + 1.

    Attributes:
        revision: the compacted revision: a watch may start after it.
    """

    def __init__(self, message: str, status: int | None = 410, revision: int = 0) -> None:
        super().__init__(message, status)
        self.revision = revision


class TooLarge(ShoalError):
    """413: a user event's or query's payload (over 64 KiB), or a check's note (4 KiB)."""


class Busy(ShoalError):
    """429: the agent's handler queue is full; the same call may succeed later."""


class Unavailable(ShoalError):
    """503 (the agent cannot serve this now), or no agent answered at all."""


class NotApplied(Unavailable):
    """503 from the metadata log: nothing was appended (no controller known,
    or the agent asked was not it): the same write may simply be retried."""


class Unknown(ShoalError):
    """504, or no answer to a metadata write: it reached the agent and may
    have been committed, or not. Read the key back, or retry with `cas`."""


class IncompatibleAgent(ShoalError):
    """The agent lacks what this call needs (an older shoal), or its answer did not parse."""


_BY_STATUS: dict[int, type[ShoalError]] = {
    400: BadRequest, 401: Unauthorized, 404: NotFound, 409: Conflict, 410: Gone, 413: TooLarge,
    429: Busy, 503: Unavailable, 504: Unknown,
}  # fmt: skip


def _int_or_none(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def error_for(status: int, body: Any, reason: str = "") -> ShoalError:
    """The exception for a refusal: `status` and the decoded JSON `body` (or None).

    Args:
        status: the HTTP status, 400 or above.
        body: the decoded answer; its `error` field is the message when present.
        reason: the status line's reason phrase, the message when the body has none.

    Returns:
        An instance of the class for `status` (ShoalError for a status without one).
    """
    fields = body if isinstance(body, dict) else {}
    message = fields.get("error")
    if not isinstance(message, str) or not message:
        message = f"{status} {reason}".strip()
    cls = _BY_STATUS.get(status, ShoalError)
    if cls is Conflict:
        return Conflict(message, status, _int_or_none(fields.get("fence")),
                        _int_or_none(fields.get("epoch")),
                        _int_or_none(fields.get("current")))  # fmt: skip
    if cls is Unavailable and fields.get("outcome") == "not_applied":
        return NotApplied(message, status)
    if cls is Gone and "compacted_revision" in fields:
        return Compacted(message, status, _int_or_none(fields["compacted_revision"]) or 0)
    if cls is Gone:
        run = fields.get("run")
        return Gone(message, status, run if isinstance(run, str) else None,
                    _int_or_none(fields.get("index")))  # fmt: skip
    return cls(message, status)
