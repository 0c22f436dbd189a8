"""The membership view as the election reads it: typed, with no state strings.

The election core never imports membership (the cores know one another only
through the kernel). The composition (`node/composition.py`) adapts each
member of the SWIM table into a `ViewMember`, and hands the election three
functions: the whole view, one member's address, one member's liveness.

`Liveness` has only the distinctions the election acts on. A suspected
member is `LIVE`: suspicion is not a verdict, and a controller that stood
down or a voter that stopped being asked on a suspicion would turn a slow
probe into a failover. Dead and left differ in one place only: a controller
removes a voter that *left* at once, and one that died only once it is
reaped from the view (`ranking.Ranking.next_config`).
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable

import msgspec

from shoal.kernel.contract import Address, Tags


class Liveness(enum.Enum):
    """What the election needs to know of a member's SWIM state."""

    LIVE = "live"  # alive or suspect
    DEAD = "dead"  # declared failed; may come back
    LEFT = "left"  # left gracefully


class ViewMember(msgspec.Struct, frozen=True):
    """One member of this node's view, itself included."""

    name: str
    tags: Tags
    liveness: Liveness
    node_id: bytes = b""  # its data directory's id, as gossip last told it


ViewFn = Callable[[], Iterable[ViewMember]]
"""Every member this node knows, read once per call: a generator lets a scan
stop early."""

AddrFn = Callable[[str], Address | None]
"""The gossip address of a member, by name (None: not known)."""

LivenessFn = Callable[[str], Liveness | None]
"""One member's liveness by name (None: not known): one lookup, not a scan."""
