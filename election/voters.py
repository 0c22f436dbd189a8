"""The voter configuration and the quorum arithmetic (raft's quorum/).

A `VoterConfig` names the voters. It changes only through the controller,
one voter at a time, and a change takes effect only when a majority of the
old *and* of the new voters have granted the request that carries it (so
any majority of one intersects any majority of the other). Configurations
are ordered by version inside one *lineage*: the random id given at
bootstrap. Two lineages meet when two independently bootstrapped clusters
find each other; the one with more voters (then the larger id) wins and the
other's members adopt it.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable

import msgspec

from shoal.election.config import ELIGIBLE_TAG, PRIORITY_TAG
from shoal.membership.member import Tags


class VoterConfig(msgspec.Struct, frozen=True):
    """Who votes, as of which version, in which lineage."""

    lineage: bytes
    version: int
    voters: tuple[str, ...]  # sorted names

    def majority(self) -> int:
        """Grants needed for a quorum."""
        return len(self.voters) // 2 + 1

    def has_quorum(self, granted: Iterable[str]) -> bool:
        """Whether `granted` holds a majority of this configuration."""
        members = set(self.voters)
        return sum(1 for name in set(granted) if name in members) >= self.majority()

    def supersedes(self, other: VoterConfig | None) -> bool:
        """Whether this configuration should replace `other` on a node."""
        if other is None:
            return True
        if self.lineage == other.lineage:
            return self.version > other.version
        return (len(self.voters), self.lineage) > (len(other.voters), other.lineage)

    def with_voter(self, name: str) -> VoterConfig:
        """The next configuration, with `name` added."""
        return VoterConfig(self.lineage, self.version + 1, tuple(sorted({*self.voters, name})))

    def without_voter(self, name: str) -> VoterConfig:
        """The next configuration, with `name` removed."""
        voters = tuple(v for v in self.voters if v != name)
        return VoterConfig(self.lineage, self.version + 1, voters)


# Tags are hashable tuples shared by every row of one member, and a cluster
# has few distinct tag sets: parse each once, not once per member per scan.
@functools.lru_cache(maxsize=4096)
def eligible(tags: Tags) -> bool:
    """Whether a member with `tags` may be a voter and controller."""
    return dict(tags).get(ELIGIBLE_TAG, "true").lower() not in ("false", "0", "no")


def rank_key(name: str, tags: Tags) -> tuple[int, str]:
    """Sort key of candidates: higher priority tag first, then name."""
    return (-_priority(tags), name)


@functools.lru_cache(maxsize=4096)
def _priority(tags: Tags) -> int:
    try:
        return int(dict(tags).get(PRIORITY_TAG, "0"))
    except ValueError:
        return 0
