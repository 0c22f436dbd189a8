"""The way out of a lost majority: what `shoal recover` decides (issue 39).

When most voters are gone for good no controller can be elected, and the
voters change only through a controller. `shoal recover` (daemon/recover.py)
makes the survivors the voters of a new configuration, offline, on each
survivor with its agent stopped. This module is its pure part: what each
survivor's disk says (`Survivor`), the decision every survivor computes
alike from all of them (`plan`), and what it writes (`election_state`,
`audit_entry`). The simulator (sim/recovery.py) runs the same functions
on its disks.

**The base.** The survivor whose log is the most up to date by Raft's
order, its last entry's (epoch, index), holds every entry any survivor
knows committed: a controller of epoch e held every entry committed before
e, and two logs that end in the same epoch are one controller's, the
longer one holding the shorter. Its log becomes the truth (etcd's
`--force-new-cluster` leaves the choice to the operator: etcd issue
#17638); the others' tails that differ are cut when the new controller
replicates to them. Ties go to the higher snapshot index, then the name,
so every survivor picks the same one.

**The new configuration** is the survivors, under their data directories'
ids, one version above every survivor's and one recovery above
(election/voters.py, "Recovery"): it supersedes every configuration a
removed voter may come back with. Every survivor's highest granted epoch
becomes `epoch`, `EPOCH_STEP` above every epoch any survivor granted or
logged: no survivor grants it or anything below it again, and a removed
voter that comes back with its old data, whose epochs the survivors may
not have seen (a campaign of the lost voters), is still below the new
controller's and takes its appends as a non-voter.

**The audit record**: the base's log gets one more entry, of `epoch`, the
new configuration as a `VoterSet` with its new recovery count. Nobody
leads `epoch` (every survivor has granted it, so none grants it again), as
if its controller had appended that one entry and crashed; it ends the
base's log above every other survivor's, so the base alone can win the
first election, and that controller's first entry commits it.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Sequence

import msgspec

from shoal.election.voters import VoterConfig
from shoal.metalog.messages import Entry
from shoal.metalog.snapshot import Snapshot
from shoal.metalog.state import VoterSet

# How far the new epoch is above every epoch the survivors have seen
# (module docstring, "The new configuration").
EPOCH_STEP = 1000

# A deliberate bug, set only by the test that shows the recovery scenario's
# checks catch it (tests/sim/test_recover_majority.py): "oldest_base" (the
# survivor with the least up-to-date log becomes the base).
mutation: str | None = None


class RecoveryRefused(Exception):
    """The survivors' summaries do not allow a recovery; one line says why."""


class Survivor(msgspec.Struct, frozen=True):
    """What one survivor's data directory says (`summarize`)."""

    name: str
    node_id: bytes
    granted_epoch: int  # the highest epoch it ever granted
    config: VoterConfig | None
    last_epoch: int  # its log's last entry's (epoch, index)
    last_index: int
    snapshot_index: int  # its latest snapshot's: committed at least this far


class Decision(msgspec.Struct, frozen=True):
    """What every survivor writes (module docstring)."""

    base: str  # the survivor whose log is the truth
    epoch: int  # every survivor's granted epoch from now on
    config: VoterConfig  # the survivors, under their ids
    audit_index: int  # the index of the audit record in the base's log
    committed: int  # the highest index any survivor knows committed


def summarize(name: str, node_id: bytes, election: tuple[int, VoterConfig | None],
              entries: Sequence[Entry], snapshot: Snapshot | None) -> Survivor:  # fmt: skip
    """A survivor's summary from what its disk holds. Its configuration is
    the newest of the one its election wrote and the last its log holds (a
    `VoterSet` entry: a voter may have written only an older one)."""
    granted, config = election
    logged = [e.op for e in entries if isinstance(e.op, VoterSet)]
    if logged:
        v = logged[-1]
        last = VoterConfig(v.lineage, v.version, v.voters, v.ids, v.recovery)
        if config is None or (last.lineage == config.lineage and last.supersedes(config)):
            config = last
    after = [e for e in entries if snapshot is None or e.index > snapshot.index]
    if after:
        last_epoch, last_index = after[-1].epoch, after[-1].index
    elif snapshot is not None:
        last_epoch, last_index = snapshot.epoch, snapshot.index
    else:
        last_epoch = last_index = 0
    held = 0 if snapshot is None else snapshot.index
    return Survivor(name, node_id, granted, config, last_epoch, last_index, held)


def plan(survivors: Sequence[str], summaries: Sequence[Survivor]) -> Decision:
    """The decision every survivor computes alike (module docstring).

    Raises:
        RecoveryRefused: a summary missing, repeated or not listed; a
            survivor without a configuration, or of another lineage; a
            majority of the voters listed (no recovery is needed).
    """
    names = sorted(s.name for s in summaries)
    if names != sorted(set(survivors)) or len(names) != len(survivors):
        raise RecoveryRefused(f"the summaries are of {', '.join(names) or 'nobody'}, the "
                              f"survivors {', '.join(sorted(survivors))}: give one summary "
                              "for each survivor, and only those")  # fmt: skip
    configs = []
    for s in summaries:
        if s.config is None:
            raise RecoveryRefused(f"{s.name} has no voter configuration: it never was a "
                                  "member of a formed cluster")  # fmt: skip
        configs.append(s.config)
    if len({c.lineage for c in configs}) > 1:
        raise RecoveryRefused("the survivors are of different clusters (voter configurations "
                              "of different lineages)")  # fmt: skip
    newest = max(configs, key=lambda c: (c.recovery, c.version))
    voting = sorted(set(survivors) & set(newest.voters))
    if len(voting) >= newest.majority():
        raise RecoveryRefused(f"{', '.join(voting)} are a majority of the voters "
                              f"{', '.join(newest.voters)}: they elect a controller "
                              "themselves; start their agents")  # fmt: skip
    order = sorted(summaries, key=lambda s: (s.last_epoch, s.last_index, s.snapshot_index,
                                             s.name))  # fmt: skip
    base = order[0] if mutation == "oldest_base" else order[-1]
    seen = max(max(s.granted_epoch, s.last_epoch) for s in summaries)
    by_name = sorted(summaries, key=lambda s: s.name)
    config = VoterConfig(newest.lineage, max(c.version for c in configs) + 1,
                         tuple(s.name for s in by_name), tuple(s.node_id for s in by_name),
                         max(c.recovery for c in configs) + 1)  # fmt: skip
    committed = max(s.snapshot_index for s in summaries)
    return Decision(base.name, seen + EPOCH_STEP, config, base.last_index + 1, committed)


def election_state(decision: Decision) -> tuple[int, VoterConfig]:
    """(granted epoch, configuration) every survivor writes."""
    return decision.epoch, decision.config


def audit_entry(decision: Decision) -> Entry:
    """The audit record the base appends to its log (module docstring)."""
    c = decision.config
    return Entry(decision.epoch, decision.audit_index,
                 VoterSet(c.lineage, c.version, c.voters, c.ids, c.recovery))  # fmt: skip


def to_token(survivor: Survivor) -> str:
    """A summary as one word an operator copies between machines."""
    raw = msgspec.msgpack.encode(survivor)
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def from_token(token: str) -> Survivor:
    """A summary back from `to_token`'s word.

    Raises:
        RecoveryRefused: not a summary.
    """
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        # (A configuration's own check, one id per voter, is an assert.)
        survivor = msgspec.msgpack.decode(raw, type=Survivor)
    except (ValueError, AssertionError, binascii.Error, msgspec.DecodeError):
        survivor = None
    if survivor is None or not _sound(survivor):
        short = token if len(token) <= 20 else token[:17] + "..."
        raise RecoveryRefused(f"{short!r} is not a summary `shoal recover plan` printed")
    return survivor


def _sound(s: Survivor) -> bool:
    """Whether a decoded summary has the shape `summarize` gives one."""
    numbers = (s.granted_epoch, s.last_epoch, s.last_index, s.snapshot_index)
    if not s.name or len(s.node_id) != 16 or min(numbers) < 0:
        return False
    c = s.config
    return c is None or (len(c.lineage) == 8 and c.version >= 0 and c.recovery >= 0
                         and list(c.voters) == sorted(set(c.voters)) and len(c.voters) > 0
                         and all(len(i) in (0, 16) for i in c.ids))  # fmt: skip


def describe(decision: Decision, summaries: Sequence[Survivor]) -> list[str]:
    """The decision in lines for the operator (printed by plan and apply)."""
    lines = []
    for s in sorted(summaries, key=lambda s: s.name):
        mark = "  <- base" if s.name == decision.base else ""
        lines.append(f"{s.name}: last entry epoch {s.last_epoch} index {s.last_index}, "
                     f"snapshot {s.snapshot_index}, granted epoch "
                     f"{s.granted_epoch}{mark}")  # fmt: skip
    c = decision.config
    lines.append(f"base: {decision.base} (its log is kept whole; the others' differing "
                 "entries are replaced from it)")  # fmt: skip
    lines.append(f"new configuration: voters {', '.join(c.voters)}, version {c.version}, "
                 f"recovery {c.recovery}; epoch {decision.epoch}; audit record at index "
                 f"{decision.audit_index}")  # fmt: skip
    return lines
