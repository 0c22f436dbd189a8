"""Election wire messages (type tags 20-39, 20-29 used, and 80-83) and their codec entries.

LeaseRequest    candidate/controller -> voters: grant me `epoch` under `config`
LeaseGrant      voter -> candidate
LeaseReject     voter -> candidate: why, who holds a grant, for how long,
                and the voter's configuration (so a stale candidate learns it)
LeaseRelease    controller -> voters: I give the lease up (graceful leave)
ControllerNotice controller -> members: who controls, with which epoch
PreVote         candidate -> voters: would you grant me `epoch`? (nothing
                is raised or written by asking or answering)
PreVoteGrant    voter -> candidate: I would (a refusal is a LeaseReject)
NoticeQuery     member -> controller: my notice is about to lapse, tell me again

Voter identities (voters.py, "Identity"): a request carries the candidate's
`node_id`, an answer the voter's, and a configuration the ids of its voters,
once the configuration has ids (the cluster is at feature level 2, so every
member reads them). Until then each message keeps its 0.2.0 shape: a
request or answer without an id is sent under its first tag, with an id
under 80-83; a configuration is a 3-list without ids, a 4-list with them.
"""

from __future__ import annotations

from typing import Any

import msgspec

from shoal.election.voters import NODE_ID_BYTES, VoterConfig
from shoal.kernel import codec
from shoal.kernel.codec import MAX_NAME_CHARS, DecodeError, counter, u64
from shoal.kernel.versions import MAX_FEATURE_LEVEL

MAX_VOTERS = 64
REJECT_HELD, REJECT_EPOCH, REJECT_CONFIG, REJECT_NOT_VOTER, REJECT_LOG, REJECT_IDENTITY = range(6)


class LeaseRequest(msgspec.Struct, frozen=True):
    """Grant `candidate` the lease for `epoch` (a renewal when the voter
    already granted it that epoch), under `config`. (`log_epoch`,
    `log_index`) is the last entry of the candidate's metadata log
    (metalog/): a voter whose log is more up to date refuses a new grant
    (`REJECT_LOG`, Raft's election restriction). Both 0 (no log, or an agent
    without one) keep the message's first shape, tag 20; otherwise tag 28.
    `candidate_id` is the candidate's node_id, sent (tag 80) only when
    `config` has voter ids."""

    seq: int
    epoch: int
    candidate: str
    config: VoterConfig
    log_epoch: int = 0
    log_index: int = 0
    candidate_id: bytes = b""


class LeaseGrant(msgspec.Struct, frozen=True):
    """The voter grants request `seq`; `voter_id`: its node_id, sent (tag
    82) only in answer to a request that carried the candidate's."""

    seq: int
    epoch: int
    voter: str
    voter_id: bytes = b""


class LeaseReject(msgspec.Struct, frozen=True):
    """The voter refuses request `seq` (`reason`: REJECT_*); `voter_id` as
    in `LeaseGrant` (tag 83). `REJECT_IDENTITY`: the configuration names
    the voter (or the candidate) with another data directory's id."""

    seq: int
    voter: str
    reason: int
    granted_epoch: int
    holder: str
    remaining_ms: int
    config: VoterConfig | None
    voter_id: bytes = b""


class LeaseRelease(msgspec.Struct, frozen=True):
    """The holder of `epoch` gives its lease up."""

    epoch: int
    holder: str


class ControllerNotice(msgspec.Struct, frozen=True):
    """`holder` controls with `epoch` for about `remaining_ms` more, as of
    its lease request `seq` (notices of one tenure only grow in `seq`);
    `level` is the cluster's feature level the controller decided
    (kernel/versions.py)."""

    epoch: int
    holder: str
    seq: int
    remaining_ms: int
    config: VoterConfig
    level: int = 1


class PreVote(msgspec.Struct, frozen=True):
    """Would the voter grant `candidate` a lease for `epoch` under `config`
    now? Raft's pre-vote (Ongaro's thesis, section 9.6): answering changes
    nothing, so a candidate that cannot win raises no epoch by asking.
    `candidate_id` as in `LeaseRequest` (tag 81)."""

    seq: int
    epoch: int
    candidate: str
    config: VoterConfig
    log_epoch: int = 0
    log_index: int = 0
    candidate_id: bytes = b""


class PreVoteGrant(msgspec.Struct, frozen=True):
    """The voter would grant pre-vote `seq` (a promise of nothing)."""

    seq: int
    epoch: int
    voter: str


class NoticeQuery(msgspec.Struct, frozen=True):
    """A member whose knowledge of the controller of `epoch` is about to
    lapse (a notice was lost) asks it for a fresh notice."""

    epoch: int


# -- codec --------------------------------------------------------------------


def _name(v: object, empty: bool = False) -> str:
    if type(v) is not str or len(v) > MAX_NAME_CHARS or (not v and not empty):
        raise DecodeError("shape", "bad node name")
    return v


def _config(v: object) -> VoterConfig:
    """[lineage, version, names], then the ids ([] or one per name; issue
    37), then the recovery (issue 39; only when above 0)."""
    if type(v) is not list or len(v) not in (3, 4, 5):
        raise DecodeError("shape", "bad voter config")
    lineage, version, voters = v[:3]
    if type(lineage) is not bytes or len(lineage) != 8:
        raise DecodeError("shape", "bad lineage")
    if type(voters) is not list or not 0 < len(voters) <= MAX_VOTERS:
        raise DecodeError("shape", "bad voter list")
    recovery = counter(v[4]) if len(v) == 5 else 0
    if len(v) == 3 or (len(v) == 5 and v[3] == []):
        names = tuple(sorted({_name(n) for n in voters}))
        return VoterConfig(lineage, counter(version), names, (), recovery)
    ids = v[3]
    if type(ids) is not list or len(ids) != len(voters):
        raise DecodeError("shape", "bad voter ids")
    pairs = {_name(n): _node_id(i, empty=True) for n, i in zip(voters, ids, strict=True)}
    if len(pairs) != len(voters) or not any(pairs.values()):
        raise DecodeError("shape", "bad voter ids")
    names = tuple(sorted(pairs))
    return VoterConfig(lineage, counter(version), names, tuple(pairs[n] for n in names), recovery)


def _node_id(v: object, empty: bool = False) -> bytes:
    if type(v) is not bytes or (len(v) != NODE_ID_BYTES and (v or not empty)):
        raise DecodeError("shape", "bad node id")
    return v


def _opt_config(v: object) -> VoterConfig | None:
    return None if v is None else _config(v)


def _enc_config(c: VoterConfig | None) -> list[Any] | None:
    if c is None:
        return None
    if c.recovery:  # a build before recoveries never sees one (level 2 only)
        return [c.lineage, c.version, list(c.voters), list(c.ids), c.recovery]
    if c.ids:
        return [c.lineage, c.version, list(c.voters), list(c.ids)]
    return [c.lineage, c.version, list(c.voters)]


def _encode(msg: Any) -> list[Any] | None:
    match msg:
        case LeaseRequest(seq, epoch, candidate, config, 0, 0, b""):
            return [20, seq, epoch, candidate, _enc_config(config)]
        case LeaseRequest(seq, epoch, candidate, config, log_epoch, log_index, b""):
            return [28, seq, epoch, candidate, _enc_config(config), log_epoch, log_index]
        case LeaseRequest(seq, epoch, candidate, config, log_epoch, log_index, candidate_id):
            return [80, seq, epoch, candidate, _enc_config(config), log_epoch, log_index,
                    candidate_id]  # fmt: skip
        case LeaseGrant(seq, epoch, voter, b""):
            return [21, seq, epoch, voter]
        case LeaseGrant(seq, epoch, voter, voter_id):
            return [82, seq, epoch, voter, voter_id]
        case LeaseReject(seq, voter, reason, granted, holder, remaining, config, b""):
            return [22, seq, voter, reason, granted, holder, remaining, _enc_config(config)]
        case LeaseReject(seq, voter, reason, granted, holder, remaining, config, voter_id):
            return [83, seq, voter, reason, granted, holder, remaining, _enc_config(config),
                    voter_id]  # fmt: skip
        case LeaseRelease(epoch, holder):
            return [23, epoch, holder]
        case ControllerNotice(epoch, holder, seq, remaining, config, level):
            return [24, epoch, holder, seq, remaining, _enc_config(config), level]
        case PreVote(seq, epoch, candidate, config, 0, 0, b""):
            return [25, seq, epoch, candidate, _enc_config(config)]
        case PreVote(seq, epoch, candidate, config, log_epoch, log_index, b""):
            return [29, seq, epoch, candidate, _enc_config(config), log_epoch, log_index]
        case PreVote(seq, epoch, candidate, config, log_epoch, log_index, candidate_id):
            return [81, seq, epoch, candidate, _enc_config(config), log_epoch, log_index,
                    candidate_id]  # fmt: skip
        case PreVoteGrant(seq, epoch, voter):
            return [26, seq, epoch, voter]
        case NoticeQuery(epoch):
            return [27, epoch]
    return None


def _level(v: object) -> int:
    if type(v) is not int or not 1 <= v <= MAX_FEATURE_LEVEL:
        raise DecodeError("absurd", "feature level")
    return v


def _reason(v: object) -> int:
    if type(v) is not int or not 0 <= v <= REJECT_IDENTITY:
        raise DecodeError("shape", "bad reject reason")
    return v


codec.register(20, 5, lambda f: LeaseRequest(u64(f[1]), counter(f[2]), _name(f[3]),
                                             _config(f[4])), _encode)  # fmt: skip
codec.register(21, 4, lambda f: LeaseGrant(u64(f[1]), counter(f[2]), _name(f[3])), _encode)
codec.register(22, 8, lambda f: LeaseReject(u64(f[1]), _name(f[2]), _reason(f[3]), counter(f[4]),
                                            _name(f[5], empty=True), u64(f[6]),
                                            _opt_config(f[7])), _encode)  # fmt: skip
codec.register(23, 3, lambda f: LeaseRelease(counter(f[1]), _name(f[2])), _encode)
codec.register(24, 7, lambda f: ControllerNotice(counter(f[1]), _name(f[2]), u64(f[3]),
                                                 u64(f[4]), _config(f[5]), _level(f[6])),
               _encode)  # fmt: skip
codec.register(25, 5, lambda f: PreVote(u64(f[1]), counter(f[2]), _name(f[3]),
                                        _config(f[4])), _encode)  # fmt: skip
codec.register(26, 4, lambda f: PreVoteGrant(u64(f[1]), counter(f[2]), _name(f[3])), _encode)
codec.register(27, 2, lambda f: NoticeQuery(counter(f[1])), _encode)
codec.register(28, 7, lambda f: LeaseRequest(u64(f[1]), counter(f[2]), _name(f[3]), _config(f[4]),
                                             counter(f[5]), u64(f[6])), _encode)  # fmt: skip
codec.register(29, 7, lambda f: PreVote(u64(f[1]), counter(f[2]), _name(f[3]), _config(f[4]),
                                        counter(f[5]), u64(f[6])), _encode)  # fmt: skip
codec.register(80, 8, lambda f: LeaseRequest(u64(f[1]), counter(f[2]), _name(f[3]), _config(f[4]),
                                             counter(f[5]), u64(f[6]), _node_id(f[7])),
               _encode)  # fmt: skip
codec.register(81, 8, lambda f: PreVote(u64(f[1]), counter(f[2]), _name(f[3]), _config(f[4]),
                                        counter(f[5]), u64(f[6]), _node_id(f[7])),
               _encode)  # fmt: skip
codec.register(82, 5, lambda f: LeaseGrant(u64(f[1]), counter(f[2]), _name(f[3]),
                                           _node_id(f[4])), _encode)  # fmt: skip
codec.register(83, 9, lambda f: LeaseReject(u64(f[1]), _name(f[2]), _reason(f[3]), counter(f[4]),
                                            _name(f[5], empty=True), u64(f[6]),
                                            _opt_config(f[7]), _node_id(f[8])),
               _encode)  # fmt: skip
