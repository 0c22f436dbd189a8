"""An online restore in the metadata model (sim/metamodel.py, sim/sessionmodel.py).

Theory of operation. `shoal snapshot restore FILE` commits one
`MetaRestore` entry (metalog/restore.py): at its revision R every key of the
backup is put (mod revision R), every other key is deleted, but a key owned
by an open session stays as it is, and the backup's session-owned keys are
not restored. As the checker sees it, a `Restore` names the backup's keys
it restores (`rows`: its session-owned ones already left out) and every
key the history knows (`keys`): those not among the rows are deleted.
Outputs: `Written(R)`; `Conflict(0)` for a damaged backup (`intact`
False: its digest does not match), which changes nothing, as does any
outcome of it but a commit; `NotApplied`; None (a timeout): it took effect
or not, as any write.

One operation, split by partition (`RestoreModel.split`): one part per
key, or per group of keys transactions join (the group's keys all at one
instant). On a key the part is a put of the backup's value (or a delete)
at revision R, so the key's mod revision before it must be below R and is
R after: the restore is ordered, key by key, against every write of known
revision, and `metahistory.check_revisions` orders its revision across
keys as a put's. What the parts cannot see is two keys taking the
restore at two instants of its interval: reads of two keys that disagree
about whether it happened. The swarm checks that apart, exactly, by
revision (sim/metarestore.py, `check_reads`: a read served at revision S
returns the committed entries' state at S, so the restore, applied at
one revision, is all there or not there for it).

On a sessioned key (sim/sessionmodel.py) the part keeps the key as it is
when its owner's session has not ended there (a restore does not take a
key from its live holder), and otherwise puts or deletes it, without an
owner. So a read after the restore that finds the backup's value where a
live session's key was, or a live session's key gone, is illegal.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from shoal.sim.metamodel import (
    Conflict,
    Delete,
    NotApplied,
    Put,
    Value,
    Written,
    _group,
    _keys,
    _step_key,
)
from shoal.sim.sessionmodel import SessionModel

if TYPE_CHECKING:
    from shoal.sim.linearizability import Operation
    from shoal.sim.metamodel import MetaState


@dataclass(frozen=True, slots=True)
class Restore:
    """Replace the keys: `rows` (key, value) put, the rest of `keys` deleted
    (live sessions' keys kept); `intact` False: a damaged backup."""

    rows: tuple[tuple[str, Value], ...]
    keys: tuple[str, ...]
    intact: bool = True

    def value(self, key: str) -> Value | None:
        """What the restore leaves in `key` (None: deleted)."""
        for k, v in self.rows:
            if k == key:
                return v
        return None


@dataclass(frozen=True, slots=True)
class RestorePart:
    """A restore's part on one partition: its keys there."""

    restore: Restore
    keys: tuple[str, ...]


class RestoreModel(SessionModel):
    """`SessionModel` with online restores (module docstring)."""

    @classmethod
    def for_history(cls, history: Sequence[Operation]) -> RestoreModel:
        """SessionModel's partitions; a restore joins none of them."""
        base = SessionModel.for_history([op for op in history if not isinstance(op.input, Restore)])
        return cls(base.groups, base.sessioned)

    def split(
        self, input: object, output: object | None
    ) -> Sequence[tuple[Hashable, object, object | None]]:
        """A restore: one part per partition of its keys; else SessionModel's."""
        if not isinstance(input, Restore):
            return super().split(input, output)
        parts: dict[str, list[str]] = {}
        for key in input.keys:
            parts.setdefault(self.groups.get(key, key), []).append(key)
        return tuple((p, RestorePart(input, tuple(keys)), output) for p, keys in parts.items())

    def step(self, state: Any, input: object, output: object | None) -> Any:
        """A restore's part here, the rest SessionModel's."""
        if not isinstance(input, RestorePart):
            return super().step(state, input, output)
        if isinstance(output, NotApplied):
            return state
        if not input.restore.intact:  # damaged: refused, or nothing, or illegal
            return state if output is None or output == Conflict(0) else None
        if output is not None and not isinstance(output, Written):
            return None
        if input.keys[0] in self.groups:
            keys = _keys(state)
            for key in input.keys:
                after = _restore_key(keys.get(key, (None, 0, True)), key, input.restore, output)
                if after is None:
                    return None
                keys[key] = after
            return _group(keys)
        (key,) = input.keys
        if key in self.sessioned:
            return _restore_sessioned(state, key, input.restore, output)
        return _restore_key(state, key, input.restore, output)

    def describe(self, input: object, output: object | None) -> str:
        """SessionModel's; a restore as `restore(k0='v3', k1=-, ...) -> ok(40)`."""
        if not isinstance(input, RestorePart | Restore):
            return super().describe(input, output)
        restore = input.restore if isinstance(input, RestorePart) else input
        keys = input.keys if isinstance(input, RestorePart) else restore.keys
        rows = ", ".join(f"{k}={restore.value(k)!r}" for k in keys)
        damaged = "" if restore.intact else "damaged; "
        match output:
            case None:
                result = "unknown"
            case Written(revision):
                result = f"ok({revision})"
            case _:
                result = repr(output)
        return f"restore({damaged}{rows}) -> {result}"


def _restore_key(state: MetaState, key: str, restore: Restore,
                 output: Written | None) -> MetaState | None:  # fmt: skip
    """A plain key after an intact restore: a put of its value, or a delete."""
    value = restore.value(key)
    write: Put | Delete = Delete(key) if value is None else Put(key, value)
    return _step_key(state, write, output)


def _restore_sessioned(state: Any, key: str, restore: Restore, output: Written | None) -> Any:
    """A sessioned key after an intact restore: kept while its owner lives."""
    if len(state) == 3:  # the model's init, ABSENT: no owner, nothing ended
        state = (*state, "", frozenset())
    value, mod_revision, exact, owner, ended = state
    if owner and owner not in ended:
        return state
    after = _restore_key((value, mod_revision, exact), key, restore, output)
    return None if after is None else (*after, "", ended)
