"""Counters: the base of every core's counts of what it did and dropped.

A core's counters are a msgspec struct of ints (cheap to bump: an attribute
add); the agent exports them to Prometheus and the API through `as_dict`.
"""

from __future__ import annotations

import msgspec
import msgspec.structs


class Counters(msgspec.Struct):
    """Ints by name; subclasses declare the fields, all defaulting to 0."""

    def as_dict(self) -> dict[str, int]:
        """All counters by name."""
        return msgspec.structs.asdict(self)

    def bump(self, name: str, by: int = 1) -> None:
        """Add `by` to the counter `name` (for names computed at run time)."""
        setattr(self, name, getattr(self, name) + by)
