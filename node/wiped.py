"""Members that came back with a new data directory, as one agent saw it.

A voter is its name and its data directory's id (election/voters.py,
"Identity"). A machine whose disk was replaced comes back under its name
with a new id; the controller removes the old identity and adds the new
one back once it has caught up (election/controller.py), so the voter
configurations name the member with its old id, then not at all, then with
its new one. The member's `voter` role says `replaced` only for the first
step, a few seconds. `WipedVoters` remembers the ids the configurations
this agent adopted named for each name, so that `GET /v1/members` (its
`former_node_id`), `shoal members --detailed` and the status page can say
which member came back with a new data directory, and under what id it
voted before, for as long as this agent runs.

Pure: it is fed each configuration the node adopts (`saw`) and asked about
the members (`former_ids`). A member whose current id no configuration
named yet, under a name one named with another id, came back with a new
data directory; so did one whose id a configuration named after another.
A stale row still holding the old id (the membership view not yet updated)
is not flagged: its id is the older of the two.
"""

from __future__ import annotations

from collections.abc import Iterable

from shoal.election.voters import VoterConfig
from shoal.membership.member import MemberView

# Ids kept per name: a name that lost its disk twice is still told right.
_KEEP = 4


class WipedVoters:
    """The ids the voter configurations named, per name (module docstring)."""

    def __init__(self) -> None:
        self._named: dict[str, list[bytes]] = {}  # name -> ids named for it, oldest first

    def saw(self, config: VoterConfig | None) -> None:
        """The node adopted `config` (or holds it at start)."""
        if config is None or not config.ids:
            return  # below feature level 2: voters are names
        for name, voter_id in zip(config.voters, config.ids, strict=True):
            if not voter_id:
                continue
            ids = self._named.setdefault(name, [])
            if voter_id not in ids:
                ids.append(voter_id)
                del ids[:-_KEEP]

    def former_id(self, member: MemberView) -> bytes:
        """The id a voter configuration named `member`'s name with before
        its current data directory; b"": none (it did not come back with a
        new one, as far as this agent saw)."""
        ids = self._named.get(member.name)
        if not ids:
            return b""
        if member.node_id in ids:
            at = ids.index(member.node_id)
            return ids[at - 1] if at > 0 else b""
        return ids[-1]

    def former_ids(self, members: Iterable[MemberView]) -> dict[str, bytes]:
        """Each member that came back with a new data directory, and the id
        it had before."""
        out = {}
        for member in members:
            former = self.former_id(member)
            if former:
                out[member.name] = former
        return out
