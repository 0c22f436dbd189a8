"""Whose majorities the metadata log's commits need (metalog/core.py,
"Voter changes").

The election's voter sets (its configuration, and while a renewal carrying
a change is in flight the configuration before it too), and, from the
moment the leader appends a `VoterSet` entry until the election has
adopted it, that entry's voters as well: every commit meanwhile, the
`VoterSet`'s own included, needs a majority of each set. Pure.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from shoal.metalog.state import VoterSet

Sets = tuple[tuple[str, ...], ...]


class VoterSets:
    """The sets a commit needs a majority of, a change being decided included."""

    def __init__(self, voters: Callable[[], Sets]) -> None:
        """Args:
        voters: the election's voter sets (node/composition.py).
        """
        self._voters = voters
        # The change being decided (leader only): its entry's index and the
        # configuration it names.
        self.deciding: tuple[int, VoterSet] | None = None

    def sets(self, commit: int) -> Sets:
        """The sets, with the change being decided until the election has
        adopted it (its entry committed, the election's own set the same)."""
        sets = self._voters()
        if self.deciding is not None:
            index, change = self.deciding
            if commit >= index and sets and sets[0] == change.voters:
                self.deciding = None  # in force: the election's sets say the rest
            elif change.voters not in sets:
                sets = (*sets, change.voters)
        return sets

    def changing(self, commit: int) -> bool:
        """Whether a voter change is being decided, or adopted by the election."""
        self.sets(commit)
        return self.deciding is not None

    def quorum(self, commit: int, has: Callable[[str], bool]) -> bool:
        """Whether the voters for whom `has` holds are a majority of every set."""
        sets = self.sets(commit)
        return bool(sets) and all(
            sum(1 for v in voters if has(v)) >= len(voters) // 2 + 1 for voters in sets
        )

    def held_by_majorities(self, commit: int, match: Mapping[str, int], last: int,
                           alone: bool = False) -> int:  # fmt: skip
        """The highest index a majority of every set holds (`match`: each
        voter's), at most `last`; 0 with no set. `alone` is the deliberate
        bug "commit_alone" (the best-placed voter's index, not a majority's)."""
        sets = self.sets(commit)
        if not sets:
            return 0
        n = last
        for voters in sets:
            held = sorted((match.get(v, 0) for v in voters), reverse=True)
            n = min(n, held[0 if alone else len(voters) // 2])
        return n
