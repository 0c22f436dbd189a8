"""What the agent answers, as frozen msgspec Structs.

Each Struct mirrors one JSON object of the API (docs/client.md), and fields
the agent adds later are ignored, so a newer agent does not break an older
client. A value travels as `value_base64` and arrives here as bytes.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

Topic = Literal["members", "controller", "kv", "events"]
# What `watch()` follows unless told: user events ("events") only when asked
# for (`watch_events()`, or `topics=` naming them), so a program written for
# the first three topics never meets a fourth kind of event.
TOPICS: tuple[Topic, ...] = ("members", "controller", "kv")
ALL_TOPICS: tuple[Topic, ...] = ("members", "controller", "kv", "events")


class Member(msgspec.Struct, frozen=True, kw_only=True):
    """One member as an agent sees it (`shoal members --json`)."""

    name: str
    node_id: str
    address: str
    status: str  # alive, suspect, dead or left
    incarnation: int
    tags: dict[str, str] = {}
    # The worst of the member's health checks: passing, warning or critical
    # (None where the agent does not say: in watch events).
    health: str | None = None
    # What it understands: {"envelope": [min, max], "membership": ...,
    # "election": ..., "sync": ..., "features": N} (docs/operations.md, "An
    # upgrade"); None from an agent older than versions on the wire.
    versions: dict[str, Any] | None = None
    # Its part in the election: "voter", "non-voter", or "replaced" (it came
    # back with a new data directory, and the voter configuration still
    # names its old one); None where the agent does not say.
    voter: str | None = None
    # Set when it came back with a new data directory: the id (hex) a voter
    # configuration named it with before, as far as the agent saw.
    former_node_id: str | None = None


class MemberListing(msgspec.Struct, frozen=True, kw_only=True):
    """`GET /v1/members`: the members and the watch position they were read at."""

    members: list[Member]
    index: int = 0
    run: str = ""


class SelfInfo(msgspec.Struct, frozen=True, kw_only=True):
    """`GET /v1/self`: this agent's member, cluster, health and counters."""

    name: str
    node_id: str
    address: str
    status: str
    incarnation: int
    tags: dict[str, str] = {}
    cluster: str = ""
    health_score: int = 0
    clock_offset_ms: int | None = None
    watchers: int = 0
    counters: dict[str, int | float] = {}


class Controller(msgspec.Struct, frozen=True, kw_only=True):
    """`GET /v1/controller`: who controls, under which epoch, and the voters."""

    controller: str | None
    epoch: int | None  # None before the first election
    is_self: bool = False
    since_wall_ms: int | None = None
    voters: tuple[str, ...] = ()
    voters_version: int = 0
    lease_remaining_s: float | None = None
    index: int = 0
    run: str = ""


class KeyValue(msgspec.Struct, frozen=True, kw_only=True):
    """One key with its value and version.

    Attributes:
        epoch: the fence it was written under (0: unfenced).
        ephemeral: it vanishes when `owner` (a member's name) fails or leaves.
    """

    key: str
    value: bytes = msgspec.field(default=b"", name="value_base64")
    hlc: int = 0
    modified_wall_ms: int = 0
    writer: str = ""
    writer_id: str = ""
    epoch: int = 0
    ephemeral: bool = False
    owner: str | None = None

    @property
    def text(self) -> str:
        """The value as UTF-8 text (UnicodeDecodeError if it is not)."""
        return self.value.decode()


class KeyListing(msgspec.Struct, frozen=True, kw_only=True):
    """One page of `GET /v1/kv/?prefix=`: its keys and the position it was read at."""

    items: list[KeyValue]
    next_after: str | None = None
    index: int = 0
    run: str = ""


class Written(msgspec.Struct, frozen=True, kw_only=True):
    """A write made durable on the agent: the version it was given."""

    key: str
    hlc: int
    modified_wall_ms: int = 0
    deleted: bool = False
    epoch: int = 0


class JoinResult(msgspec.Struct, frozen=True, kw_only=True):
    """`join()`: how many addresses answered, and each one's outcome."""

    joined: int
    results: dict[str, bool]


class TagsAnswer(msgspec.Struct, frozen=True, kw_only=True):
    """`POST /v1/tags`: this agent's tags after the change."""

    tags: dict[str, str]


class MemberEvent(msgspec.Struct, frozen=True, kw_only=True):
    """A membership change (`member-joined`, `member-failed`, `member-left`, ...).

    `resync` is True for an event made up after the agent could not resume a
    watch: it says what the member is now, not what happened to it.
    """

    index: int
    type: str
    topic: str = "members"
    name: str = ""
    node_id: str = ""
    address: str = ""
    status: str = ""
    incarnation: int = 0
    tags: dict[str, str] = {}
    source: str | None = None
    health: str | None = None  # member-health-changed: the health now, and before
    previous: str | None = None
    at_ms: int = 0
    resync: bool = False
    versions: dict[str, Any] | None = None  # what the member understands (see Member)

    @property
    def member(self) -> Member:
        """The member as this event leaves it."""
        return Member(name=self.name, node_id=self.node_id, address=self.address,
                      status=self.status, incarnation=self.incarnation, tags=self.tags,
                      health=self.health, versions=self.versions)  # fmt: skip


class ControllerEvent(msgspec.Struct, frozen=True, kw_only=True):
    """An election change: `controller-changed`, `controller-elected`, `controller-lost`,
    `voters-changed`."""

    index: int
    type: str
    topic: str = "controller"
    controller: str | None = None
    epoch: int | None = None
    voters: tuple[str, ...] = ()
    reason: str | None = None
    at_ms: int = 0
    resync: bool = False


class MetaValue(msgspec.Struct, frozen=True, kw_only=True):
    """A key of the metadata log (docs/metadata.md).

    Attributes:
        revision: the log's revision the answer was read at.
        create_revision: the revision that created the key (0: not yet
            applied by the agent asked, which answered from the controller).
        mod_revision: the revision that last changed it: the `cas` to give
            to change it only if nobody else did meanwhile.
        version: changes since its creation (0 as for create_revision).
        stale: read from the agent's own applied state (`stale=True`).
    """

    key: str
    value: bytes = msgspec.field(default=b"", name="value_base64")
    revision: int = 0
    create_revision: int = 0
    mod_revision: int = 0
    version: int = 0
    stale: bool = False
    session: str = ""  # the session that owns the key ("": none)


class MetaWritten(msgspec.Struct, frozen=True, kw_only=True):
    """A committed metadata write: held by a majority of the voters' disks
    at `revision` (the key's mod revision now; a delete's revision)."""

    key: str
    revision: int


class KvEvent(msgspec.Struct, frozen=True, kw_only=True):
    """A key put or deleted, with why: `write` (here), `sync` (from a peer),
    `owner-failed` / `owner-left` (an ephemeral key's owner went), `resync`."""

    index: int
    type: str  # put or delete
    key: str
    topic: str = "kv"
    value: bytes | None = msgspec.field(default=None, name="value_base64")
    hlc: int = 0
    epoch: int = 0
    writer: str = ""
    ephemeral: bool = False
    owner: str | None = None
    reason: str = ""
    at_ms: int = 0
    resync: bool = False

    @property
    def deleted(self) -> bool:
        """True for a delete."""
        return self.type == "delete"


class UserEvent(msgspec.Struct, frozen=True, kw_only=True):
    """A user event being delivered on the agent watched (`shoal event`,
    docs/events.md): at most its first 4 KiB of payload (`payload_bytes` is
    the whole size). A watch that had to resync (410) does not see the user
    events it missed; handlers do (they run at least once per event)."""

    index: int
    type: str = "user"
    topic: str = "events"
    name: str = ""
    id: str = ""  # ORIGIN-ID:SEQ
    origin: str = ""  # the member that fired it
    payload_bytes: int = 0
    payload: bytes = msgspec.field(default=b"", name="payload_base64")
    observer: str = ""  # the agent that delivered it
    at_ms: int = 0
    resync: bool = False


Event = MemberEvent | ControllerEvent | KvEvent | UserEvent


class SessionInfo(msgspec.Struct, frozen=True, kw_only=True):
    """One session as the agent holds it (`GET /v1/session/ID`, `/v1/sessions`).

    Attributes:
        expires_in_s: how long it lives without another renewal (None: not
            known to the agent asked; the controller alone knows it for a
            session in the metadata log).
        checks: the health checks it is bound to: it ends when one turns critical.
        keys: the keys written under it (deleted when it ends).
    """

    id: str
    ttl_s: float
    expires_in_s: float | None = None
    name: str = ""
    checks: tuple[str, ...] = ()
    renewals: int = 0
    keys: tuple[str, ...] = ()
    node: str = ""  # the agent it was opened on (sessions in the metadata log)
    meta_keys: tuple[str, ...] = ()  # its metadata keys (deleted at its end)
    revision: int = 0  # the log revision that opened it
    replicated: bool = False  # in the metadata log: it outlives its agent


class SessionListing(msgspec.Struct, frozen=True, kw_only=True):
    """`GET /v1/sessions`: the open sessions of one agent."""

    sessions: list[SessionInfo]


class Check(msgspec.Struct, frozen=True, kw_only=True):
    """One health check of the agent and what it last said (docs/operations.md)."""

    id: str
    kind: str  # http, tcp, script or ttl
    status: str  # passing, warning or critical
    target: str = ""
    output: str = ""
    interval_s: float = 0.0
    ttl_s: float = 0.0
    runs: int = 0


class CheckListing(msgspec.Struct, frozen=True, kw_only=True):
    """`GET /v1/checks`: the checks and the member's health, the worst of them."""

    health: str
    checks: list[Check]


class EventSent(msgspec.Struct, frozen=True, kw_only=True):
    """A user event fired: its id (`ORIGIN-ID:SEQ`), name and payload size."""

    id: str
    name: str
    payload_bytes: int = 0


class MemberAnswer(msgspec.Struct, frozen=True, kw_only=True):
    """What one expected member did with a query.

    Attributes:
        status: answered, no-handler, error, silent, failed or left.
        answer: its handler's output (bytes; `.text` decodes it), for answered.
        error: why, for error.
    """

    status: str
    answer: bytes = msgspec.field(default=b"", name="answer_base64")
    error: str = ""

    @property
    def text(self) -> str:
        """The answer as UTF-8 text (UnicodeDecodeError if it is not)."""
        return self.answer.decode()


class QueryResult(msgspec.Struct, frozen=True, kw_only=True):
    """A query's outcome: every member expected to answer, by name.

    Attributes:
        expected: how many members matched the filters when it was sent.
        answered: how many answered (status "answered").
        complete: every expected member answered before the timeout.
    """

    id: str
    name: str
    expected: int
    answered: int
    duration_s: float = 0.0
    complete: bool = False
    members: dict[str, MemberAnswer] = {}

    @property
    def answers(self) -> dict[str, bytes]:
        """The answers of the members that answered, by name."""
        return {n: m.answer for n, m in self.members.items() if m.status == "answered"}
