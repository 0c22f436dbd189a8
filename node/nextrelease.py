"""A stand-in for the next release, for the upgrade tests only.

Until a second release exists, the rolling-upgrade tests need a build that
speaks a newer version than the last release, as memberlist tests its
version rule. `SHOAL_TEST_NEXT_RELEASE=1` (docs/operations.md) makes the
agent announce `NEXT_RELEASE_STANDIN` (kernel/versions.py: membership
version 2 and one feature level more) and know one message the release does not:
`LevelProbe`, under a tag below the ignorable range, so that a release
agent that received one would drop the whole datagram as `unknown_type`.
The stand-in sends it only while the controller announces its feature level,
which it does only when every alive member supports it: the tests check
that no release agent ever drops one.

Nothing registers the tag unless the driver calls `enable()`.
"""

from __future__ import annotations

from typing import Any

import msgspec

from shoal.kernel import codec
from shoal.kernel.codec import counter, name
from shoal.kernel.versions import NEXT_RELEASE_STANDIN

LEVEL_PROBE_TAG = 19  # the last tag of membership's range (docs/wire.md)
LEVEL_PROBE_FEATURE = NEXT_RELEASE_STANDIN.features  # the feature level that turns it on


class LevelProbe(msgspec.Struct, frozen=True):
    """The stand-in's new message: `source` knows feature level `level`."""

    level: int
    source: str


def _encode(msg: Any) -> list[Any] | None:
    if type(msg) is LevelProbe:
        return [LEVEL_PROBE_TAG, msg.level, msg.source]
    return None


_enabled = False


def enable() -> None:
    """Make this process's codec know `LevelProbe` (once)."""
    global _enabled
    if not _enabled:
        _enabled = True
        codec.register(LEVEL_PROBE_TAG, 3, lambda f: LevelProbe(counter(f[1]), name(f[2])),
                       _encode)  # fmt: skip


def enabled() -> bool:
    """Whether `enable()` ran in this process."""
    return _enabled
