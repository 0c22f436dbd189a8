"""The state and the outputs of the anti-entropy core, as msgspec structs:
its counters, the `SyncCompleted` event and the running session.

They live apart from storage/antientropy.py so that the core can be compiled
by mypyc (setup.py), which drops struct class keywords such as frozen=True
and rejects a `msgspec.field` default; these run interpreted.
"""

from __future__ import annotations

import msgspec

from shoal.kernel.contract import Address
from shoal.kernel.counters import Counters


class SyncCounters(Counters):
    """What anti-entropy did, for metrics."""

    sessions_started: int = 0
    sessions_in_sync: int = 0
    sessions_repaired: int = 0
    sessions_failed: int = 0
    sessions_served: int = 0
    records_sent: int = 0
    records_received: int = 0
    pushes_sent: int = 0
    pushes_received: int = 0
    pushes_forwarded: int = 0
    sessions_unanswered: int = 0
    sessions_on_return: int = 0
    unexpected: int = 0
    depth_mismatch: int = 0


class SyncCompleted(msgspec.Struct, frozen=True):
    """An anti-entropy session this node started has ended."""

    peer: Address
    ok: bool
    sent: int
    received: int
    rounds: int


class SyncSession(msgspec.Struct):
    """One anti-entropy session this node started (Initiator._session)."""

    id: int
    peer: Address
    started_at: float
    deadline_at: float
    answered: bool = False  # the peer has answered at least once
    rounds: int = 0
    received: int = 0
    sent: int = 0
    more: bool = False  # a side stopped at its byte budget: go again at once
    # Differing nodes for the digest phase, as (level, index, peer's count).
    pending: list[tuple[int, int, int]] = msgspec.field(default_factory=list)
    digesting: bool = False
