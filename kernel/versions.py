"""Protocol versions and the cluster's feature level (docs/operations.md, "An upgrade").

Theory of operation. Every agent announces what it understands, in its
identity (so in every `Alive` and every `PushPull` row) and in the
first-contact `Hello`/`Welcome`: a range (min, max) for each protocol that
can move on its own — the envelope (the datagram and frame header, the
sealed layout), membership, the election and the store's sync — and the
highest feature level it supports. memberlist's rule, per protocol
(state.go, verifyProtocol): a peer whose range does not overlap ours is
refused, never merged, so it never half-joins, counts toward a quorum or
holds the lease; between two peers whose ranges overlap the higher common
version is spoken (`speaks`), and the cluster as a whole speaks the highest
version every alive member understands (`cluster_speaks`).

A *feature* is something other agents must understand before it may be
used: a new message, a new record or log entry type. Features are numbered
levels; each build supports levels 1..`features`. The controller announces
the cluster's level, the lowest `features` of the alive members, capped by
an operator's cap (KRaft's `metadata.version`, Consul's "servers meet
minimum version"); a feature turns on only at its level. The level rises
by itself once the last member is upgraded; it is lowered only by the
operator's cap (`shoal features --cap N`), before a downgrade, because an
agent that hears of a level above its own stops (it would misread what the
others now send) rather than half-work.

Receivers accept every envelope layout in their range; a message type an
older reader may safely skip takes a tag of `IGNORABLE_TAG_MIN` or above
(kernel/codec.py), and an unknown tag below it drops the packet as
`unknown_type`.

Pure: no IO, no clock; the driver picks the build's `Versions`.
"""

from __future__ import annotations

from collections.abc import Iterable

import msgspec

PROTOCOLS = ("envelope", "membership", "election", "sync")
# Versions and feature levels are small: a release adds one at most. A
# larger number on the wire is hostile or broken, refused as "absurd".
MAX_VERSION = 255
MAX_FEATURE_LEVEL = 65535
# The number of integers a `Versions` takes on the wire.
WIRE_INTS = 2 * len(PROTOCOLS) + 1


class Versions(msgspec.Struct, frozen=True, gc=False):
    """What one agent understands: a (min, max) range per protocol, and the
    highest feature level it supports."""

    envelope: tuple[int, int]
    membership: tuple[int, int]
    election: tuple[int, int]
    sync: tuple[int, int]
    features: int

    def ranges(self) -> tuple[tuple[int, int], ...]:
        """The ranges in `PROTOCOLS` order."""
        return (self.envelope, self.membership, self.election, self.sync)

    def to_wire(self) -> list[int]:
        """The flat list of integers the codec carries."""
        return [*self.envelope, *self.membership, *self.election, *self.sync, self.features]

    def describe(self) -> str:
        """One line for logs and refusals: `envelope 1-1 membership 1-2 ... features 2`."""
        parts = [f"{p} {lo}-{hi}" for p, (lo, hi) in zip(PROTOCOLS, self.ranges(), strict=True)]
        return " ".join(parts) + f" features {self.features}"

    def to_json(self) -> dict[str, object]:
        """The JSON form the API shows: each range as [min, max], and features."""
        out: dict[str, object] = {p: list(r) for p, r in zip(PROTOCOLS, self.ranges(), strict=True)}
        out["features"] = self.features
        return out


# Feature levels. 1: what 0.2.0 speaks. 2: the metadata log (metalog/):
# its messages, and lease requests that carry a log position, are sent
# only once every member supports it.
META_LOG_FEATURE = 2
#
# This build. A release that changes what a protocol sends raises that
# protocol's max (and keeps min where the previous release's layout is still
# read), so that each release works in one cluster with the one before it.
THIS_BUILD = Versions((1, 1), (1, 1), (1, 1), (1, 1), META_LOG_FEATURE)

# A stand-in for the next release, for tests only (SHOAL_TEST_NEXT_RELEASE=1,
# docs/operations.md): it understands membership version 2 and one feature
# level more than this build, whose one new message (node/nextrelease.py)
# it sends only once the controller announces that level, which it does
# only when every alive member supports it. memberlist tests its version
# rule the same way.
NEXT_RELEASE_STANDIN = Versions((1, 1), (1, 2), (1, 1), (1, 1), THIS_BUILD.features + 1)
# And for one two releases ahead, which no longer reads membership version 1:
# this build must refuse it (SHOAL_TEST_NEXT_RELEASE=2).
TWO_AHEAD_STANDIN = Versions((1, 1), (2, 3), (1, 1), (1, 1), THIS_BUILD.features + 2)


class InvalidVersions(ValueError):
    """A range that is zero, inverted or absurd."""


def from_wire(v: object) -> Versions:
    """Build `Versions` from the codec's list, refusing nonsense.

    Raises:
        InvalidVersions: not `WIRE_INTS` integers, or a range that is zero,
            inverted or above `MAX_VERSION`, or a feature level out of range.
    """
    if type(v) is not list or len(v) != WIRE_INTS or any(type(x) is not int for x in v):
        raise InvalidVersions("not a list of versions")
    ranges = []
    for i in range(len(PROTOCOLS)):
        lo, hi = v[2 * i], v[2 * i + 1]
        if not 1 <= lo <= hi <= MAX_VERSION:
            raise InvalidVersions(f"{PROTOCOLS[i]} range {lo}-{hi}")
        ranges.append((lo, hi))
    features = v[-1]
    if not 1 <= features <= MAX_FEATURE_LEVEL:
        raise InvalidVersions(f"feature level {features}")
    return intern(Versions(ranges[0], ranges[1], ranges[2], ranges[3], features))


_INTERNED: dict[Versions, Versions] = {}


def intern(v: Versions) -> Versions:
    """One shared object per distinct value: a cluster has one or two
    builds, and identities compare their versions by identity first."""
    known = _INTERNED.get(v)
    if known is not None:
        return known
    if len(_INTERNED) >= 64:  # only a hostile peer sends many distinct ones
        _INTERNED.clear()
    _INTERNED[v] = v
    return v


def incompatible(mine: Versions, theirs: Versions) -> list[str]:
    """The protocols whose ranges do not overlap (empty: compatible)."""
    if mine is theirs:
        return []
    return [
        p
        for p, (a, b) in zip(
            PROTOCOLS, zip(mine.ranges(), theirs.ranges(), strict=True), strict=True
        )  # fmt: skip
        if a[1] < b[0] or b[1] < a[0]
    ]


def speaks(mine: Versions, theirs: Versions) -> tuple[int, ...]:
    """The version of each protocol two compatible agents speak: the higher
    version both understand."""
    return tuple(min(a[1], b[1]) for a, b in zip(mine.ranges(), theirs.ranges(), strict=True))


def cluster_speaks(mine: Versions, others: Iterable[Versions]) -> tuple[int, ...]:
    """The version of each protocol every one of these agents understands,
    the highest such (each agent is compatible with `mine`)."""
    best = [hi for _, hi in mine.ranges()]
    for v in others:
        if v is mine:
            continue
        for i, (_, hi) in enumerate(v.ranges()):
            if hi < best[i]:
                best[i] = hi
    return tuple(best)


def feature_level(mine: Versions, others: Iterable[Versions], cap: int | None) -> int:
    """The cluster's feature level: the lowest level these agents support,
    at most `cap` (an operator's), at least 1."""
    level = mine.features
    for v in others:
        if v.features < level:
            level = v.features
    if cap is not None:
        level = min(level, cap)
    return max(1, level)
