"""One client operation of the metadata log's swarm as its client saw it
(sim/meta.py's clients and sim/metasessions.py's): a module of its own so
that the two import it, not each other."""

from __future__ import annotations

from dataclasses import dataclass

from shoal.metalog.state import MetaOp, MetaTxn, TxnApplied
from shoal.sim.metamodel import Conflict, NotApplied, Written
from shoal.sim.sessionmodel import NoSession


@dataclass
class Call:
    """One client operation as the client saw it (times are true time)."""

    client: int
    kind: str  # "put", "delete", "get", "txn"; "open", "close" (sim/metasessions.py)
    key: bytes
    value: bytes | None
    cas: int | None
    call_at: float
    return_at: float | None = None  # None: unknown (may or may not have happened)
    outcome: str = "pending"  # ok, conflict, not_applied, no_session, unknown, failed (reads)
    revision: int = 0  # a write's commit revision; a conflict's current revision
    read_value: bytes | None = None
    read_mod_revision: int = 0
    txn: MetaTxn | None = None
    txn_result: TxnApplied | None = None
    session: bytes = b""  # a put's session
    op: MetaOp | None = None  # a session's open or close, as proposed
    read_revision: int = 0  # the revision a read was served at


def settle(calls: list[Call], now: float) -> None:
    """The end of a run: a write still in flight is unknown (it may yet have
    happened), a read still in flight failed (it has no effect)."""
    for call in calls:
        if call.outcome == "pending":
            call.outcome = "unknown" if call.kind != "get" else "failed"
            if call.kind == "get":
                call.return_at = now


def write_output(call: Call) -> Written | Conflict | NotApplied | NoSession | None:
    """A write's outcome as the checker's model takes it (None: unknown)."""
    if call.outcome == "ok":
        return Written(call.revision)
    if call.outcome == "conflict":
        return Conflict(call.revision)
    if call.outcome == "not_applied":
        return NotApplied()
    if call.outcome == "no_session":
        return NoSession()
    return None
