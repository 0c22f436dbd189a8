"""Decisions: what a role of the election decides, for `LeaseElection` to carry out.

Theory of operation (etcd raft's step functions: `stepLeader`,
`stepCandidate` and `stepFollower` change the node's own state and record
what must be done, and `Ready` hands it out). A role of the election
(voter.py, candidacy.py, controller.py, notices.py) changes only its own
state and what it owns; what reaches past it (adopting a configuration,
issuing a request, stepping down or aside, waking the timer, telling the
metadata log) it appends, as one of the values below, to the election's
`Decisions` list. `LeaseElection._act` carries them out in the order they
were made, as soon as the role's handler returns, before anything else
runs; a role whose handler needs a decision carried out before it can go
on returns there, and the façade calls its next step (`Controller.duties`
then `Controller.oversee`, `Voter.vote` again after a `YieldCampaign`).

What a role needs to know of the rest of the node it reads from an
`ElectionView`: it only answers, and changes nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from shoal.election.campaign import Request
from shoal.election.messages import ControllerNotice
from shoal.election.voters import VoterConfig


@dataclass(frozen=True, slots=True)
class Adopt:
    """Adopt `config`, a newer voter configuration (written before any answer)."""

    config: VoterConfig


@dataclass(frozen=True, slots=True)
class Wake:
    """Evaluate again now."""


@dataclass(frozen=True, slots=True)
class WakeBy:
    """Evaluate again at `at` at the latest."""

    at: float


@dataclass(frozen=True, slots=True)
class Issue:
    """Send a request for `epoch` (a pre-vote, with `pre`) with `config`,
    changing from `old`; this node answers its own at once."""

    epoch: int
    config: VoterConfig
    old: VoterConfig | None
    renewal: bool
    pre: bool = False


@dataclass(frozen=True, slots=True)
class RequestFailed:
    """The request in flight `req` missed its majority:
    `Candidacy.request_failed` next (after the decisions before this one)."""

    req: Request


@dataclass(frozen=True, slots=True)
class ReleaseOwn:
    """Give back our own voter's grant of `epoch` to us (as a
    `LeaseRelease` from this node would)."""

    epoch: int


@dataclass(frozen=True, slots=True)
class HoldOff:
    """Do not stand before `until`."""

    until: float


@dataclass(frozen=True, slots=True)
class SawEpoch:
    """A request for `epoch` exists: campaign above it."""

    epoch: int


@dataclass(frozen=True, slots=True)
class Granted:
    """Our voter made a new grant: stop standing, and look again."""


@dataclass(frozen=True, slots=True)
class YieldCampaign:
    """Abandon our campaign in flight if `candidate` outranks us (then
    the voter is asked again, with the epoch given up)."""

    candidate: str


@dataclass(frozen=True, slots=True)
class Superseded:
    """A notice says another holder won `epoch`: if we hold a lease below
    it, step down (before `Follow`)."""

    epoch: int


@dataclass(frozen=True, slots=True)
class Follow:
    """Know the holder of `notice` as the controller, for the lease it
    vouches for (`KnownController.follow`)."""

    notice: ControllerNotice


@dataclass(frozen=True, slots=True)
class Vouch:
    """`holder` won `epoch` (as of its request `seq`): our voter may take
    it as the holder of its grant of that epoch (`Voter.vouch`)."""

    holder: str
    epoch: int
    seq: int


@dataclass(frozen=True, slots=True)
class Elected:
    """This node just won a new lease: decide the cluster's feature level,
    then announce the controller to every member (`Controller.announce`)."""


@dataclass(frozen=True, slots=True)
class StepAside:
    """Release the lease to a better candidate, and keep standing."""


@dataclass(frozen=True, slots=True)
class ProposeVoters:
    """Have the metadata log decide the change to `config` (None: let a
    change go that will not be adopted)."""

    config: VoterConfig | None


@dataclass(frozen=True, slots=True)
class LostDisk:
    """`name` came back with a new data directory: what it acknowledged to
    the metadata log before counts no more."""

    name: str


Decision = (
    Adopt
    | Wake
    | WakeBy
    | Issue
    | RequestFailed
    | ReleaseOwn
    | HoldOff
    | SawEpoch
    | Granted
    | YieldCampaign
    | Superseded
    | Follow
    | Vouch
    | Elected
    | StepAside
    | ProposeVoters
    | LostDisk
)
Decisions = list[Decision]
"""The decisions made and not yet carried out (one list per election)."""


class ElectionView(Protocol):
    """What a role may ask of the rest of the node (`LeaseElection`): only
    questions; nothing here changes anything."""

    @property
    def voters(self) -> VoterConfig | None:
        """The configuration this node has adopted."""

    @property
    def feature_level(self) -> int:
        """The cluster's feature level, as the node decided it."""

    # The last entry of this node's metadata log: (epoch, index).
    log_position: Callable[[], tuple[int, int]]
    # Whether the metadata log lets the voters change now.
    log_ready: Callable[[], bool]
    # Whether a member holds every entry the metadata log committed.
    caught_up: Callable[[str], bool]

    @property
    def has_log(self) -> bool:
        """Whether this node runs a metadata log that decides voter changes."""

    def next_epoch(self) -> int:
        """An epoch above every epoch this node has seen or granted."""

    def ranks_above_me(self, candidate: str) -> bool:
        """Whether `candidate` ranks above this node."""

    def would_yield(self, candidate: str) -> bool:
        """Whether our campaign in flight would be abandoned for `candidate`."""
