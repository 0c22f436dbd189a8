"""The cluster's feature level, as one node decides and learns it.

The controller decides the level (kernel/versions.py, `feature_level`: the
lowest level every alive member supports, never below the level announced
before, at most the operator's cap) and announces it in every
`ControllerNotice`; every member reads it from the
newest notice it accepted. The operator's cap is a record of the replicated
store, `shoal/features/cap` (`shoal features --cap N` writes it), so that
every controller, the next one included, honours it.

A member that hears of a level above its own stops: it would misread what
the others now send. It reports `FeatureLevelUnsupported` and the agent
exits with a message saying how to go on (docs/operations.md, "An
upgrade"). Pure: the composition calls it from its tick.
"""

from __future__ import annotations

from collections.abc import Iterable

import msgspec

from shoal.kernel.versions import MAX_FEATURE_LEVEL, Versions, feature_level

FEATURE_CAP_KEY = b"shoal/features/cap"


class FeatureLevelChanged(msgspec.Struct, frozen=True):
    """The cluster's feature level this node knows changed to `level`
    (`held_back_by`: the alive members that support less than this build,
    as this node sees them)."""

    level: int
    held_back_by: tuple[str, ...] = ()


class FeatureLevelUnsupported(msgspec.Struct, frozen=True):
    """The controller announced `level`, above the `supported` level of this
    build: this agent must stop rather than misread the others."""

    level: int
    supported: int


def parse_cap(value: bytes | None) -> int | None:
    """The operator's cap from its record (None: no cap, deleted, or not a
    level; a bad value never lowers the level by accident)."""
    if value is None:
        return None
    try:
        cap = int(value.decode("ascii").strip())
    except (UnicodeDecodeError, ValueError):
        return None
    return cap if 1 <= cap <= MAX_FEATURE_LEVEL else None


def feature_fields(event: object) -> dict[str, object]:
    """A feature event as a flat JSON object with a `type`."""
    match event:
        case FeatureLevelChanged(level, held_back_by):
            return {"type": "feature-level-changed", "level": level,
                    "held_back_by": list(held_back_by)}  # fmt: skip
        case FeatureLevelUnsupported(level, supported):
            return {"type": "feature-level-unsupported", "level": level, "supported": supported}
    raise TypeError(f"not a feature event: {event!r}")


class FeatureLevel:
    """What one node knows of the cluster's feature level."""

    def __init__(self, versions: Versions) -> None:
        self.versions = versions
        self.known = 0  # the level this node knows (0: none announced yet)
        self.unsupported_reported = False

    def decide(self, alive: Iterable[Versions], cap: int | None) -> int:
        """The level a controller announces: the lowest the alive members
        support, but never below the level already announced (an older
        agent that joins later does not turn a feature off under the
        others: it stops, told of a level above its own), and never above
        the operator's cap, which is the one way down."""
        level = max(feature_level(self.versions, alive, None), self.known)
        return level if cap is None else max(1, min(level, cap))

    def learn(self, level: int, events: list[object]) -> None:
        """Know `level` (the controller's decision); report a change, and a
        level this build cannot follow (once)."""
        if level == self.known or level == 0:
            return
        self.known = level
        events.append(FeatureLevelChanged(level))
        if level > self.versions.features and not self.unsupported_reported:
            self.unsupported_reported = True
            events.append(FeatureLevelUnsupported(level, self.versions.features))
