"""One client operation of the metadata log's swarm as its client saw it
(sim/meta.py's clients and sim/metasessions.py's): a module of its own so
that the two import it, not each other."""

from __future__ import annotations

from dataclasses import dataclass

from shoal.metalog.state import MetaOp, MetaTxn, TxnApplied


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
