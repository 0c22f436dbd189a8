"""`shoal keys`: keyring changes on one agent and across the running cluster.

The agent where the command ran applies it, then sends a `KeyCommand` to
every live member over a sealed stream and counts the answers, as
`serf keys` does with its internal query: an operator sees "5 of 5 members
acknowledged" before taking the next step of a rotation. A member applies
a command only when it arrived sealed under a key it holds; plaintext (in a
migration) never changes a keyring. Each change is written to the keyring
file before it is acknowledged, so a restart keeps it.

Each change carries a version one above the issuing keyring's; a member
applies it only above its own keyring's version, which is written with the
keys: a change is applied once, and a copy of it (or of an older one) sent
later changes nothing, even after a restart. A member ahead of the issuer
(it applied a later change the issuer missed) refuses with its version, and
the issuer moves its own up to it, so that running the step again works.

`local_only` skips the fan-out: after a key is stolen, the new key must not
travel encrypted under the stolen one, so it is installed node by node
through each agent's own API (docs/security.md).
"""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import msgspec
import structlog

from shoal.daemon.config import AgentConfig
from shoal.daemon.keys import save_keyring
from shoal.daemon.network.ask import NoAnswer, ask
from shoal.daemon.network.first_contact import FirstContact
from shoal.daemon.network.wire import Wire
from shoal.kernel.sealing import KeyCommand, KeyReply, KeyringError, format_key
from shoal.membership.member import MemberState
from shoal.node.composition import ShoalNode

log = structlog.get_logger("shoal")
FANOUT_CONCURRENCY = 32


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


class KeyService:
    """Applies key commands to the agent's wire and keyring file."""

    def __init__(self, wire: Wire, contact: FirstContact, config: AgentConfig,
                 node: ShoalNode) -> None:  # fmt: skip
        """Change `wire`'s keyring (saved under `config`'s data directory);
        fan out to the live members of `node`'s view (bound by `contact`)."""
        self._wire = wire
        self._contact = contact
        self._config = config
        self._node = node

    def apply(self, command: KeyCommand) -> KeyReply:
        """Apply `command` here; never raises (the reason goes in the reply)."""
        ring = self._wire.keyring
        if ring is None:
            return KeyReply(False, "encryption is off on this agent", (), 0)
        if command.op == "list":
            return KeyReply(True, "", ring.keys, ring.version)
        if command.version <= ring.version:
            return KeyReply(False, f"this keyring is at version {ring.version}, the command at "
                            f"{command.version}: applied already, or older than a later change; "
                            "run the step again", ring.keys, ring.version)  # fmt: skip
        assert command.key is not None
        before = (ring.keys, ring.version)
        try:
            getattr(ring, command.op)(command.key)  # install, use or remove
            ring.version = command.version
            cfg = self._config
            save_keyring(cfg.encryption.keyring_path(cfg.data_dir), ring)
        except KeyringError as exc:
            return KeyReply(False, str(exc), ring.keys, ring.version)
        except OSError as exc:
            self._restore(*before)
            return KeyReply(False, f"cannot write the keyring file: {exc.strerror}", ring.keys,
                            ring.version)  # fmt: skip
        log.info("keyring changed", op=command.op, keys=len(ring.keys), version=ring.version)
        return KeyReply(True, "", ring.keys, ring.version)

    def _restore(self, keys: tuple[bytes, ...], version: int) -> None:
        ring = self._wire.keyring
        assert ring is not None
        for key in keys:
            ring.install(key)
        ring.use(keys[0])
        for key in set(ring.keys) - set(keys):
            ring.remove(key)
        ring.version = version

    def next_version(self) -> int:
        """The version a new change issued here carries."""
        ring = self._wire.keyring
        return 0 if ring is None else ring.version + 1

    async def run(self, op: str, key: bytes | None, local_only: bool) -> KeyOutcome:
        """Apply `op` here and on every live member; count the answers."""
        command = KeyCommand(op, key, 0 if op == "list" else self.next_version())
        outcome = KeyOutcome()
        me = self._node.name
        self._count(outcome, me, self.apply(command))
        if local_only or outcome.errors:  # refused here: the others are not asked
            return outcome
        live = (MemberState.ALIVE, MemberState.SUSPECT)
        peers = [m for m in self._node.members() if m.state in live and m.name != me]
        limit = asyncio.Semaphore(FANOUT_CONCURRENCY)

        async def ask(name: str, addr: tuple[str, int]) -> None:
            async with limit:
                self._count(outcome, name, await self._ask(addr, command))

        await asyncio.gather(*(ask(m.name, m.addr) for m in peers))
        ring = self._wire.keyring
        if ring is not None and outcome.newest > ring.version:
            ring.version = outcome.newest  # a member is ahead: the next step goes above it
        return outcome

    @staticmethod
    def _count(outcome: KeyOutcome, name: str, reply: KeyReply) -> None:
        outcome.members += 1
        if reply.ok:
            outcome.acks += 1
        else:
            outcome.errors[name] = reply.error
        for key in reply.keys:
            outcome.keys[format_key(key)] += 1
        if reply.keys:
            outcome.primary[format_key(reply.keys[0])] += 1
        outcome.newest = max(outcome.newest, reply.version)

    async def _ask(self, addr: tuple[str, int], command: KeyCommand) -> KeyReply:
        timeout_s = self._config.swim.stream_timeout_s
        try:
            return await ask(self._wire, self._contact, addr, command, KeyReply, timeout_s)
        except TimeoutError:
            return KeyReply(False, "no answer: TimeoutError", (), 0)
        except NoAnswer as exc:
            why = str(exc)
            if why == "closed without an answer":
                why += " (does it hold the key?)"
            return KeyReply(False, why, (), 0)
