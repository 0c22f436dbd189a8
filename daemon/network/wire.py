"""The agent's wire: the codec, plus sealing when encryption is on.

Every byte the agent sends or receives on the gossip port goes through one
`Wire`. Without a keyring it is the plaintext codec. With one, it seals
with the primary key (unless `verify_outgoing` is off, the first step of a
rolling switch) and accepts only sealed packets (unless `verify_incoming`
is off). The names are Consul's (`encrypt_verify_incoming/outgoing`), so
the migration runbook in docs/security.md reads the same.

A sealed packet names its sender, the sender's run, its receiver's
binding and its place in the sender's count (kernel/sealing.py); what to
bind a packet for an address to is `FirstContact`'s (first_contact.py).

This is the IO half of kernel/sealing.py: the OS's CSPRNG for nonces is
read here, never in the core.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Sequence
from typing import Any

import msgspec

from shoal.kernel import codec
from shoal.kernel.sealing import NONCE_BYTES, UNBOUND, Envelope, Hello, Keyring, ReplayWindows
from shoal.kernel.versions import THIS_BUILD, Versions


class Received(msgspec.Struct, frozen=True):
    """Decoded messages, and the envelope they arrived in (None: plaintext)."""

    messages: list[Any]
    envelope: Envelope | None

    @property
    def sealed(self) -> bool:
        """Whether they arrived sealed."""
        return self.envelope is not None


class Wire:
    """Encodes and decodes datagrams and stream frames for one cluster.

    Args:
        cluster: the cluster name.
        keyring: the installed keys, or None for plaintext.
        node_id: this node's id (its first 8 bytes are its tag on the wire).
        run: this node's run number (`DataDir.next_run`).
        verify_incoming: refuse plaintext packets (with a keyring).
        verify_outgoing: seal what we send (with a keyring).
        versions: what this build understands, told in first contact.
    """

    def __init__(self, cluster: str, keyring: Keyring | None, *, node_id: bytes, run: int,
                 verify_incoming: bool = True, verify_outgoing: bool = True,
                 versions: Versions = THIS_BUILD) -> None:  # fmt: skip
        self.tag = codec.cluster_tag(cluster)
        self.versions = versions
        self.keyring = keyring
        self.verify_incoming = verify_incoming
        self.verify_outgoing = verify_outgoing
        self.sessions = ReplayWindows(node_id[:8], run)
        self._counter = 0
        self._head = bytes((codec.PROTOCOL_VERSION, 0)) + self.tag

    @property
    def sealing(self) -> bool:
        """Whether what we send is sealed."""
        return self.keyring is not None and self.verify_outgoing

    @property
    def requires_key(self) -> bool:
        """Whether a peer without our key cannot talk to us."""
        return self.keyring is not None and self.verify_incoming

    def datagram(self, messages: Sequence[Any], to: bytes = UNBOUND) -> bytes:
        """One datagram for the receiver bound as `to` (sealed when
        encryption is on; `to` is ignored otherwise)."""
        payload = codec.encode_payload(messages)
        if not self.sealing:
            return self._head + payload
        assert self.keyring is not None
        self._counter += 1
        s = self.sessions
        envelope = Envelope(s.node_tag, s.run, to, self._counter)
        return self.keyring.seal(self._head, payload, envelope, os.urandom(NONCE_BYTES))

    def frame(self, messages: Sequence[Any], to: bytes = UNBOUND) -> bytes:
        """One length-prefixed stream frame."""
        body = self.datagram(messages, to)
        return struct.pack(">I", len(body)) + body

    def decode(self, data: bytes) -> Received:
        """The messages of a datagram or frame body.

        Raises:
            codec.DecodeError: with the drop reason (`plaintext`, `auth`,
                `misdirected`, `stale_run`, `replay`, `unbound`, or one of
                the codec's).
        """
        flags, payload = codec.split_header(data, self.tag)
        if not flags & codec.FLAG_ENCRYPTED:
            if self.requires_key:
                raise codec.DecodeError("plaintext", "encryption is required")
            return Received(codec.decode_payload(payload), None)
        if self.keyring is None:
            raise codec.DecodeError("encrypted", "no keyring configured")
        envelope, payload = self.keyring.open(data)
        self.sessions.check(envelope)
        messages = codec.decode_payload(payload)
        if envelope.to == UNBOUND and not (
            len(messages) == 1 and type(messages[0]) is Hello
        ):  # fmt: skip
            raise codec.DecodeError("unbound", "a first-contact packet holds only a Hello")
        return Received(messages, envelope)
