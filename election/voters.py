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

from collections.abc import Iterable

import msgspec


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
