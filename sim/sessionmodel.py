"""Sessions in the metadata model (sim/metamodel.py): a key's owner, the
sessions ended, and what a session's end does to its keys (issue 38).

Theory of operation. A key written under a session (a `Put` with
`session`) is *sessioned*: every operation on it is stepped here, with a
state that adds to metamodel.py's (value, mod revision, exact) the key's
owner (the session it belongs to, "" none) and the sessions whose end the
key's partition has taken (of those that wrote to it):

- `End(session, revision, keys)` is the committed entry that ends a
  session, by its client's close or by the controller's expiry. The swarm
  records it from the log, not from a client's call (an expiry is nobody's
  call): its interval runs from the first time its leader sent it to the
  first time a node applied it (it commits in between, and a linearizable
  read called after any node applied it must see it). It takes effect on
  every key the session wrote (`keys`), one part per key: a relaxation, as
  each key may take it at a different instant of its interval, so every
  linearizable history still passes and an ILLEGAL verdict is a real
  violation. On a key the session owns it deletes the key, whose mod
  revision must be below the end's (a key written after its owner's end
  was not its); on any other it changes nothing but marks the session
  ended there.
- A put under a session the partition has seen end changes nothing: its
  only legal answers are `NoSession` (OUTCOME_NO_SESSION) and unknown. A
  `NoSession` under a session not ended there is illegal: the swarm's
  clients write under a session only once they know its open committed.
- A put that takes effect makes its session the key's owner ("" without
  one: an overwrite without the session takes the key from it); a delete,
  or the end, leaves the key absent and unowned. A read reports no owner.

So a read that returns a value written under S after S's end was applied
somewhere is illegal (no ephemeral key outlives its session's committed
end), as is a read that finds absent a key whose session had not ended
and that nobody deleted or overwrote (a session's keys vanish only by its
end, a delete, or an overwrite without the session).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from shoal.sim.metamodel import (
    Conflict,
    Delete,
    Get,
    MetaModel,
    Put,
    Value,
    Written,
    _seen_revision,
    _step_key,
)

if TYPE_CHECKING:
    from shoal.sim.linearizability import Operation

# (value or None, mod revision or its bound, exact, owner, sessions ended here)
SessionKeyState = tuple[Value | None, int, bool, str, frozenset[str]]


@dataclass(frozen=True, slots=True)
class End:
    """A session's committed end, at `revision`: it deletes the keys it owns
    among `keys` (the keys it wrote)."""

    session: str
    revision: int
    keys: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class NoSession:
    """A write under a session that is not open: it changed nothing."""


class SessionModel(MetaModel):
    """`MetaModel` with sessioned keys stepped by `step_sessioned`."""

    def __init__(self, groups: dict[str, str] | None = None,
                 sessioned: frozenset[str] = frozenset()) -> None:  # fmt: skip
        super().__init__(groups)
        self.sessioned = sessioned  # the keys some put wrote under a session, or an end names

    @classmethod
    def for_history(cls, history: Sequence[Operation]) -> SessionModel:
        """The model with transactions' keys joined and sessioned keys marked."""
        sessioned = frozenset(
            key
            for op in history
            for key in (
                op.input.keys
                if isinstance(op.input, End)
                else (op.input.key,)
                if isinstance(op.input, Put) and op.input.session
                else ()
            )
        )
        groups = MetaModel.for_history(history).groups
        assert not sessioned & groups.keys(), "a sessioned key in a transaction"
        return cls(groups, sessioned)

    def split(
        self, input: object, output: object | None
    ) -> Sequence[tuple[Hashable, object, object | None]]:
        """An end: one part per key its session wrote; else MetaModel's."""
        if isinstance(input, End):
            return tuple((key, input, output) for key in input.keys)
        return super().split(input, output)

    def step(self, state: Any, input: object, output: object | None) -> Any:
        """A sessioned key's operations here, the others MetaModel's."""
        if isinstance(input, End) or (
            isinstance(input, Get | Put | Delete) and input.key in self.sessioned
        ):
            return step_sessioned(state, input, output)
        if isinstance(output, NoSession):
            return None
        return super().step(state, input, output)

    def describe(self, input: object, output: object | None) -> str:
        """MetaModel's, with ends and refusals for want of a session."""
        if isinstance(input, End):
            return f"end({input.session!r}) -> ok({input.revision})"
        if isinstance(output, NoSession):
            return super().describe(input, None).removesuffix("unknown") + "no session"
        return super().describe(input, output)

    def describe_state(self, state: Any) -> str:
        """MetaModel's; a sessioned key's with its owner and ended sessions."""
        if len(state) == 5 and type(state[3]) is str:
            value, mod_revision, exact, owner, ended = state
            text = super().describe_state((value, mod_revision, exact))
            owned = f", owned by {owner!r}" if owner else ""
            return f"{text}{owned}; sessions ended: {sorted(ended)}"
        return super().describe_state(state)


def step_sessioned(state: Any, input: object, output: object | None) -> SessionKeyState | None:
    """A sessioned key's state after one operation (None: not legal)."""
    if len(state) == 3:  # the model's init, ABSENT: no owner, nothing ended
        state = (*state, "", frozenset())
    value, mod_revision, exact, owner, ended = state
    if isinstance(input, End):
        if input.session in ended or not isinstance(output, Written):
            return None
        ended = ended | {input.session}
        if owner != input.session:
            return (value, mod_revision, exact, owner, ended)
        if mod_revision >= input.revision:  # written after its owner's end
            return None
        return (None, 0, True, "", ended)
    assert isinstance(input, Get | Put | Delete), input
    session = input.session if isinstance(input, Put) else ""
    if isinstance(output, NoSession):
        return state if session in ended else None
    if session in ended:  # refused: it changed nothing
        return state if output is None else None
    base = (value, mod_revision, exact)
    after = _step_key(base, input, output)
    if after is None:
        return None
    if isinstance(input, Get) or isinstance(output, Conflict):
        return (*after, owner, ended)
    if after[0] is None:
        return (*after, "", ended)
    assert isinstance(input, Put)
    took = isinstance(output, Written) or _seen_revision(base, input.cas) is not None
    return (*after, session if took else owner, ended)
