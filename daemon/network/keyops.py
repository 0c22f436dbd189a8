"""`shoal keys`, the IO half: the keyring file and the fan-out over streams.

The version rule and the round's count are pure (services/keyrounds.py:
`refusal`, `change`, `KeyRound`). This module writes each change to the
keyring file before it is acknowledged (a restart keeps it) and asks every
live member over a sealed stream; a member applies a command only when it
arrived sealed under a key it holds, so plaintext (in a migration) never
changes a keyring.

`local_only` skips the fan-out: after a key is stolen, the new key must not
travel encrypted under the stolen one, so it is installed node by node
through each agent's own API (docs/security.md).
"""

from __future__ import annotations

import asyncio

import structlog

from shoal.daemon.config import AgentConfig
from shoal.daemon.keys import save_keyring
from shoal.daemon.network.ask import NoAnswer, ask
from shoal.daemon.network.first_contact import FirstContact
from shoal.daemon.network.wire import Wire
from shoal.kernel.sealing import KeyCommand, KeyReply, KeyringError
from shoal.node.composition import ShoalNode
from shoal.services.keyrounds import (
    KeyOutcome,
    KeyRound,
    change,
    command_for,
    refusal,
    restore,
)

log = structlog.get_logger("shoal")
FANOUT_CONCURRENCY = 32


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
        refused = refusal(ring, command)
        if refused is not None:
            return refused
        assert ring is not None
        before = (ring.keys, ring.version)
        try:
            change(ring, command)
            cfg = self._config
            save_keyring(cfg.encryption.keyring_path(cfg.data_dir), ring)
        except KeyringError as exc:
            return KeyReply(False, str(exc), ring.keys, ring.version)
        except OSError as exc:
            restore(ring, *before)
            return KeyReply(False, f"cannot write the keyring file: {exc.strerror}", ring.keys,
                            ring.version)  # fmt: skip
        log.info("keyring changed", op=command.op, keys=len(ring.keys), version=ring.version)
        return KeyReply(True, "", ring.keys, ring.version)

    def next_version(self) -> int:
        """The version a new change issued here carries."""
        return command_for("install", None, self._wire.keyring).version

    async def run(self, op: str, key: bytes | None, local_only: bool) -> KeyOutcome:
        """Apply `op` here and on every live member; count the answers."""
        command = command_for(op, key, self._wire.keyring)
        me = self._node.name
        round_ = KeyRound(command, me)
        round_.answer(me, self.apply(command))
        if local_only or round_.outcome.errors:  # refused here: the others are not asked
            return round_.outcome
        limit = asyncio.Semaphore(FANOUT_CONCURRENCY)

        async def ask(name: str, addr: tuple[str, int]) -> None:
            async with limit:
                round_.answer(name, await self._ask(addr, command))

        await asyncio.gather(*(ask(n, a) for n, a in round_.targets(self._node.members())))
        outcome = round_.close()
        round_.newest(self._wire.keyring)
        return outcome

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
