"""What the agent answers, as frozen msgspec Structs.

Each Struct mirrors one JSON object of the API (docs/client.md), and fields
the agent adds later are ignored, so a newer agent does not break an older
client. A value travels as `value_base64` and arrives here as bytes.
"""

from __future__ import annotations

from typing import Literal

import msgspec

Topic = Literal["members", "controller", "kv"]
TOPICS: tuple[Topic, ...] = ("members", "controller", "kv")


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

    @property
    def member(self) -> Member:
        """The member as this event leaves it."""
        return Member(name=self.name, node_id=self.node_id, address=self.address,
                      status=self.status, incarnation=self.incarnation, tags=self.tags,
                      health=self.health)  # fmt: skip


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


Event = MemberEvent | ControllerEvent | KvEvent
