"""Key operations, the protocol state: the version rule and the round's count.

Theory of operation. `shoal keys` changes the keyring on the agent where it
ran, then asks every live member to make the same change and counts the
answers, as `serf keys` does with its internal query: an operator sees "5
of 5 members acknowledged" before taking the next step of a rotation.

Each change carries a version one above the issuing keyring's; a member
applies it only above its own keyring's version, which is written with the
keys: a change is applied once, and a copy of it (or of an older one) sent
later changes nothing, even after a restart (`refusal`). A member ahead of
the issuer (it applied a later change the issuer missed) refuses with its
version, and the issuer moves its own up to it (`KeyRound.newest`), so that
running the step again works.

This module decides and counts; it does no IO. Writing the keyring file
before acknowledging, and asking the members over sealed streams, are the
daemon's (daemon/network/keyops.py). A member that does not answer in time
is named in the outcome's errors, never counted as an acknowledgement.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Any

import msgspec

from shoal.kernel.sealing import KeyCommand, KeyReply, Keyring, format_key
from shoal.membership.member import MemberState, MemberView

NO_ANSWER = "no answer: TimeoutError"
_LIVE = (MemberState.ALIVE, MemberState.SUSPECT)


class KeyOutcome(msgspec.Struct):
    """What `shoal keys` reports: members asked, acks, failures, keys seen."""

    members: int = 0
    acks: int = 0
    errors: dict[str, str] = msgspec.field(default_factory=dict)
    keys: Counter[str] = msgspec.field(default_factory=Counter)
    primary: Counter[str] = msgspec.field(default_factory=Counter)  # members sealing with it
    newest: int = 0  # the highest keyring version answered

    def to_json(self) -> dict[str, Any]:
        """The API answer."""
        return {"members": self.members, "acks": self.acks, "errors": self.errors,
                "keys": dict(self.keys), "primary": dict(self.primary)}  # fmt: skip


def command_for(op: str, key: bytes | None, ring: Keyring | None) -> KeyCommand:
    """The command a change issued here carries: one version above ours."""
    version = 0 if op == "list" or ring is None else ring.version + 1
    return KeyCommand(op, key, version)


def refusal(ring: Keyring | None, command: KeyCommand) -> KeyReply | None:
    """The answer to `command` when it changes nothing here (a `list`, no
    keyring, or a version not above ours); None when it is to be applied."""
    if ring is None:
        return KeyReply(False, "encryption is off on this agent", (), 0)
    if command.op == "list":
        return KeyReply(True, "", ring.keys, ring.version)
    if command.version <= ring.version:
        return KeyReply(False, f"this keyring is at version {ring.version}, the command at "
                        f"{command.version}: applied already, or older than a later change; "
                        "run the step again", ring.keys, ring.version)  # fmt: skip
    return None


def change(ring: Keyring, command: KeyCommand) -> None:
    """Apply `command` (install, use or remove) and take its version.

    Raises:
        KeyringError: the change is not possible here (the ring is unchanged).
    """
    assert command.key is not None and command.op != "list"
    getattr(ring, command.op)(command.key)
    ring.version = command.version


def restore(ring: Keyring, keys: tuple[bytes, ...], version: int) -> None:
    """Put `ring` back to `keys` (primary first) at `version`: the change
    could not be written down, so it is not kept."""
    for key in keys:
        ring.install(key)
    ring.use(keys[0])
    for key in set(ring.keys) - set(keys):
        ring.remove(key)
    ring.version = version


class KeyRound:
    """One fan-out: who is asked, and what each answered.

    Args:
        command: what every member is asked to do.
        me: this member's name (its own answer comes first, from `answer`).
    """

    def __init__(self, command: KeyCommand, me: str) -> None:
        self.command = command
        self.me = me
        self.outcome = KeyOutcome()
        self.expected: set[str] = set()
        self.answered: set[str] = set()

    def targets(self, members: Iterable[MemberView]) -> list[tuple[str, tuple[str, int]]]:
        """The live members other than us to ask (name, address); each is
        expected to answer."""
        found = [(m.name, m.addr) for m in members if m.state in _LIVE and m.name != self.me]
        self.expected.update(name for name, _ in found)
        return found

    def answer(self, name: str, reply: KeyReply) -> None:
        """Count `name`'s reply (once: a second answer from it is ignored)."""
        if name in self.answered:
            return
        self.answered.add(name)
        out = self.outcome
        out.members += 1
        if reply.ok:
            out.acks += 1
        else:
            out.errors[name] = reply.error
        for key in reply.keys:
            out.keys[format_key(key)] += 1
        if reply.keys:
            out.primary[format_key(reply.keys[0])] += 1
        out.newest = max(out.newest, reply.version)

    def close(self) -> KeyOutcome:
        """The outcome: every expected member that did not answer is named."""
        for name in sorted(self.expected - self.answered):
            self.answer(name, KeyReply(False, NO_ANSWER, (), 0))
        return self.outcome

    def newest(self, ring: Keyring | None) -> None:
        """A member is ahead of `ring`: the next step goes above it."""
        if ring is not None and self.outcome.newest > ring.version:
            ring.version = self.outcome.newest
