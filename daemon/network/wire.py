"""The agent's wire: the codec, plus sealing when encryption is on.

Every byte the agent sends or receives on the gossip port goes through one
`Wire`. Without a keyring it is the plaintext codec. With one, it seals
with the primary key (unless `verify_outgoing` is off, the first step of a
rolling switch) and accepts only sealed packets (unless `verify_incoming`
is off). The names are Consul's (`encrypt_verify_incoming/outgoing`), so
the migration runbook in docs/security.md reads the same.

This is the IO half of kernel/sealing.py: the wall clock for stamps
and the OS's CSPRNG for nonces are read here, never in the core.
"""

from __future__ import annotations

import os
import struct
import time
from collections.abc import Sequence
from typing import Any

import msgspec

from shoal.kernel import codec
from shoal.kernel.sealing import NONCE_BYTES, Keyring, ReplayGuard


class Received(msgspec.Struct, frozen=True):
    """Decoded messages, and whether they arrived sealed."""

    messages: list[Any]
    sealed: bool


class Wire:
    """Encodes and decodes datagrams and stream frames for one cluster.

    Args:
        cluster: the cluster name.
        keyring: the installed keys, or None for plaintext.
        verify_incoming: refuse plaintext packets (with a keyring).
        verify_outgoing: seal what we send (with a keyring).
        replay_window_s: the +-window for stamps (see ReplayGuard).
    """

    def __init__(self, cluster: str, keyring: Keyring | None, *, verify_incoming: bool = True,
                 verify_outgoing: bool = True, replay_window_s: float = 30.0) -> None:  # fmt: skip
        self.tag = codec.cluster_tag(cluster)
        self.keyring = keyring
        self.verify_incoming = verify_incoming
        self.verify_outgoing = verify_outgoing
        self.guard = ReplayGuard(int(replay_window_s * 1000))
        self._head = bytes((codec.PROTOCOL_VERSION, 0)) + self.tag

    @property
    def sealing(self) -> bool:
        """Whether what we send is sealed."""
        return self.keyring is not None and self.verify_outgoing

    @property
    def requires_key(self) -> bool:
        """Whether a peer without our key cannot talk to us."""
        return self.keyring is not None and self.verify_incoming

    def datagram(self, messages: Sequence[Any]) -> bytes:
        """One datagram (sealed when encryption is on)."""
        payload = codec.encode_payload(messages)
        if not self.sealing:
            return self._head + payload
        assert self.keyring is not None
        return self.keyring.seal(self._head, payload, _now_ms(), os.urandom(NONCE_BYTES))

    def frame(self, messages: Sequence[Any]) -> bytes:
        """One length-prefixed stream frame."""
        body = self.datagram(messages)
        return struct.pack(">I", len(body)) + body

    def decode(self, data: bytes) -> Received:
        """The messages of a datagram or frame body.

        Raises:
            codec.DecodeError: with the drop reason (`plaintext`, `auth`,
                `stale`, `replay`, or one of the codec's).
        """
        flags, payload = codec.split_header(data, self.tag)
        if not flags & codec.FLAG_ENCRYPTED:
            if self.requires_key:
                raise codec.DecodeError("plaintext", "encryption is required")
            return Received(codec.decode_payload(payload), False)
        if self.keyring is None:
            raise codec.DecodeError("encrypted", "no keyring configured")
        stamp_ms, nonce, payload = self.keyring.open(data)
        self.guard.check(stamp_ms, nonce, _now_ms())
        return Received(codec.decode_payload(payload), True)


def _now_ms() -> int:
    return int(time.time() * 1000)
