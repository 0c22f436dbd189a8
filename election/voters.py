"""The voter configuration and the quorum arithmetic (raft's quorum/).

A `VoterConfig` names the voters. It changes only through the controller,
one voter at a time, and a change takes effect only when a majority of the
old *and* of the new voters have granted the request that carries it (so
any majority of one intersects any majority of the other). Configurations
are ordered by version inside one *lineage*: the random id given at
bootstrap. Two lineages meet when two independently bootstrapped clusters
find each other; the one with more voters wins, then the one with more
changes behind it (the higher version), then the larger id, and the other's
members adopt it. The version comes before the id because a voter whose
disk was wiped comes back with no configuration and may bootstrap a new
lineage with the same voters, at version 1, while the controller is down: a
coin toss on the ids would let it replace the cluster's own configuration,
and with it the voters' ids (found by the metadata log's swarm, seeds 865
and 1082: the wiped voter then voted as its old self and a laggard was
elected without committed entries). A cluster at feature level 2 is at
version 2 at least from its first controller on (it fills in the ids).

**Identity** (issue 37; KRaft's KIP-853). A voter is its name *and* the id
of its data directory (`node_id`, daemon/disk/dataformat.py): `ids` holds
one per voter, in the order of `voters`. A machine whose disk was wiped
comes back under its name with a new id, and what its old self granted and
logged is gone: it must never vote as that self (a wiped voter that votes
can elect a controller that lacks committed entries). `identifies` is the
test every grant passes. An id of b"" is not yet known (a configuration
formed at bootstrap, or before the cluster's feature level 2): that voter
is taken by name alone until the controller fills its id in from the view
(`with_ids`). `ids` is empty, and the configuration has its 0.2.0 shape on
the wire and on disk, until then.

**Recovery** (issue 39; `shoal recover`, election/recovery.py). When most
voters are lost for good no configuration can change through the
controller: the survivors are made the voters of a new configuration
offline, which must replace the old one everywhere, though it has fewer
voters and a removed voter may hold a higher version (a change it saw and
the survivors did not). `recovery` counts the recoveries behind a
configuration, and it comes first in the order: a configuration of a later
recovery supersedes every one of an earlier, whatever its lineage, size or
version. So a removed voter that comes back with its old data adopts the
recovered configuration on sight (a notice, a refusal) and is no voter of
it: it cannot lead and its grants count for nothing. Every change after a
recovery carries its `recovery` on. It is 0 (and absent on the wire and on
disk) until the first recovery.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import ClassVar

import msgspec

NODE_ID_BYTES = 16  # a data directory's id (daemon/disk/dataformat.py)


class VoterConfig(msgspec.Struct, frozen=True):
    """Who votes, as of which version, in which lineage."""

    lineage: bytes
    version: int
    voters: tuple[str, ...]  # sorted names
    ids: tuple[bytes, ...] = ()  # each voter's node_id, in `voters` order (b"": not known)
    recovery: int = 0  # the recoveries behind this configuration (module docstring)

    # False only in the test that shows the simulator's checker catches a
    # wiped voter voting as its old self (tests/sim/test_wiped_voters.py).
    check_identity: ClassVar[bool] = True

    def __post_init__(self) -> None:
        assert not self.ids or len(self.ids) == len(self.voters), "one id per voter"

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
        if self.recovery != other.recovery:  # "Recovery" (module docstring)
            return self.recovery > other.recovery
        if self.lineage == other.lineage:
            return self.version > other.version
        return (len(self.voters), self.version, self.lineage) > (
            len(other.voters),
            other.version,
            other.lineage,
        )

    def id_of(self, name: str) -> bytes:
        """The node_id voter `name` is known by (b"": none known, or not a voter)."""
        if not self.ids or name not in self.voters:
            return b""
        return self.ids[self.voters.index(name)]

    def identifies(self, name: str, node_id: bytes) -> bool:
        """Whether the node `name` with data directory `node_id` is a voter of
        this configuration: its name is, and so is its id, when one is known."""
        if name not in self.voters:
            return False
        known = self.id_of(name)
        return not known or known == node_id or not VoterConfig.check_identity

    def with_voter(self, name: str, node_id: bytes = b"") -> VoterConfig:
        """The next configuration, with `name` (of data directory `node_id`) added."""
        pairs = dict(self._pairs())
        pairs[name] = node_id
        return self._next(pairs)

    def without_voter(self, name: str) -> VoterConfig:
        """The next configuration, with `name` removed."""
        return self._next({n: i for n, i in self._pairs() if n != name})

    def with_ids(self, known: Mapping[str, bytes]) -> VoterConfig | None:
        """The next configuration, with the ids not yet known filled in from
        `known` (name -> node_id); None when there is none to fill. The
        voters stay the same: no majority changes."""
        pairs = dict(self._pairs())
        filled = {n: known[n] for n, i in pairs.items() if not i and known.get(n)}
        if not filled:
            return None
        return self._next({**pairs, **filled})

    def without_ids(self) -> VoterConfig:
        """The next configuration, the same voters without their ids (the
        cluster's feature level was lowered below 2: a build before voter
        ids reads only configurations without them)."""
        return VoterConfig(self.lineage, self.version + 1, self.voters, (), self.recovery)

    def _pairs(self) -> list[tuple[str, bytes]]:
        return list(zip(self.voters, self.ids or (b"",) * len(self.voters), strict=True))

    def _next(self, pairs: Mapping[str, bytes]) -> VoterConfig:
        names = tuple(sorted(pairs))
        ids = tuple(pairs[n] for n in names)
        return VoterConfig(self.lineage, self.version + 1, names, ids if any(ids) else (),
                           self.recovery)  # fmt: skip
