"""The metadata log (sans-IO): a log led by the elected controller,
replicated to the voters, committed by a majority's disks, applied to a
state machine with revisions and compare-and-set (docs/architecture.md)."""

# Registers the log's message tags with the kernel's codec.
from shoal.metalog import messages as _messages  # noqa: F401
from shoal.metalog.core import MetaConfig, MetaLog, ProposalDone, ReadDone
from shoal.metalog.state import MetaDelete, MetaPut, MetaState

__all__ = [
    "MetaConfig",
    "MetaDelete",
    "MetaLog",
    "MetaPut",
    "MetaState",
    "ProposalDone",
    "ReadDone",
]
