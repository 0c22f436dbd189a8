"""`shoal keys`: keyring changes on one agent and across the running cluster.

The agent where the command ran applies it, then sends a `KeyCommand` to
every live member over a sealed stream and counts the answers, as
`serf keys` does with its internal query: an operator sees "5 of 5 members
acknowledged" before taking the next step of a rotation. A member applies
a command only when it arrived sealed under a key it holds; plaintext (in a
migration) never changes a keyring. Each change is written to the keyring
file before it is acknowledged, so a restart keeps it.

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
from shoal.daemon.network.wire import Wire
from shoal.kernel import codec
from shoal.kernel.sealing import KeyCommand, KeyReply, KeyringError, format_key
from shoal.membership.member import MemberState
from shoal.membership.transport import read_frame
from shoal.node.composition import ShoalNode

log = structlog.get_logger("shoal")
FANOUT_CONCURRENCY = 32


class KeyOutcome(msgspec.Struct):
    """What `shoal keys` reports: members asked, acks, failures, keys seen."""

    members: int = 0
    acks: int = 0
    errors: dict[str, str] = msgspec.field(default_factory=dict)
    keys: Counter[str] = msgspec.field(default_factory=Counter)

    def to_json(self) -> dict[str, Any]:
        """The API answer."""
        return {"members": self.members, "acks": self.acks, "errors": self.errors,
                "keys": dict(self.keys)}  # fmt: skip


class KeyService:
    """Applies key commands to the agent's wire and keyring file."""

    def __init__(self, wire: Wire, config: AgentConfig, node: ShoalNode) -> None:
        """Change `wire`'s keyring (saved under `config`'s data directory);
        fan out to the live members of `node`'s view."""
        self._wire = wire
        self._config = config
        self._node = node

    def apply(self, command: KeyCommand) -> KeyReply:
        """Apply `command` here; never raises (the reason goes in the reply)."""
        ring = self._wire.keyring
        if ring is None:
            return KeyReply(False, "encryption is off on this agent", ())
        try:
            if command.op != "list":
                assert command.key is not None
                getattr(ring, command.op)(command.key)  # install, use or remove
                cfg = self._config
                save_keyring(cfg.encryption.keyring_path(cfg.data_dir), ring)
                log.info("keyring changed", op=command.op, keys=len(ring.keys))
        except KeyringError as exc:
            return KeyReply(False, str(exc), ring.keys)
        except OSError as exc:
            return KeyReply(False, f"cannot write the keyring file: {exc.strerror}", ring.keys)
        return KeyReply(True, "", ring.keys)

    async def run(self, command: KeyCommand, local_only: bool) -> KeyOutcome:
        """Apply `command` here and on every live member; count the answers."""
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

    async def _ask(self, addr: tuple[str, int], command: KeyCommand) -> KeyReply:
        wire = self._wire
        timeout_s = self._config.swim.stream_timeout_s
        try:
            async with asyncio.timeout(timeout_s):
                reader, writer = await asyncio.open_connection(*addr)
            try:
                writer.write(wire.frame([command]))
                await writer.drain()
                body = await read_frame(reader, timeout_s)
            finally:
                writer.close()
            if body is None:
                return KeyReply(False, "closed without an answer (does it hold the key?)", ())
            answer = wire.decode(body).messages
        except codec.DecodeError as exc:
            return KeyReply(False, f"unreadable answer ({exc.reason})", ())
        except (TimeoutError, OSError, asyncio.IncompleteReadError) as exc:
            return KeyReply(False, f"no answer: {type(exc).__name__}", ())
        if len(answer) != 1 or not isinstance(answer[0], KeyReply):
            return KeyReply(False, "unexpected answer", ())
        return answer[0]
