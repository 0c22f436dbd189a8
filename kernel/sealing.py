"""The sealing layer: AES-256-GCM under a keyring, with a replay guard.

Theory of operation. With encryption on, every datagram and stream-frame
body leaves the agent sealed:

    bytes 0..5    the plaintext header of docs/wire.md, flag bit 0 set
    bytes 6..13   stamp: the sender's wall clock, ms since the epoch (u64 BE)
    bytes 14..25  nonce: 96 random bits, fresh for every packet
    bytes 26..    AES-256-GCM ciphertext of the CBOR payload, then its 16-byte tag

The associated data is the header, the stamp and the full cluster name, so
a packet authenticates only in the cluster it was made for, with the stamp
it was made with. A receiver tries the primary key first and then every
other installed key (memberlist's keyring rule), which is what makes a
rotation possible without downtime: install everywhere, switch the primary
everywhere, remove the old key everywhere.

Replay: a captured packet resent later authenticates, so `ReplayGuard`
rejects a stamp outside +-window of the receiver's clock (`stale`) and a
nonce already seen within the window (`replay`). Only packets that
authenticated are remembered, so a flood of garbage cannot fill the guard.

Pure: the caller passes the clock (`now_ms`) and the nonce (from the OS's
CSPRNG in the agent); nothing here reads either.
"""

from __future__ import annotations

import base64
import binascii
import struct
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar

import msgspec

from shoal.kernel import codec
from shoal.kernel.codec import FLAG_ENCRYPTED, HEADER_BYTES, DecodeError, boolean, text

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

KEY_BYTES = 32  # AES-256
NONCE_BYTES = 12  # GCM's native nonce size (NIST SP 800-38D §8.2.2, random construction)
STAMP_BYTES = 8
TAG_BYTES = 16
OVERHEAD_BYTES = STAMP_BYTES + NONCE_BYTES + TAG_BYTES
MAX_KEYS = 16
# A guard entry costs ~100 bytes; at this bound it stays under ~20 MB even
# if someone holding a key floods us with valid packets.
MAX_REPLAY_ENTRIES = 200_000


class KeyringError(ValueError):
    """A keyring operation that cannot be done (with the reason)."""


def parse_key(text: str) -> bytes:
    """A key from its base64 text (what `shoal keys generate` prints).

    Raises:
        KeyringError: not base64, or not 32 bytes.
    """
    try:
        key = base64.b64decode(text.strip(), validate=True)
    except (binascii.Error, ValueError):
        raise KeyringError("a key is 32 bytes in base64 (shoal keys generate)") from None
    if len(key) != KEY_BYTES:
        raise KeyringError(f"a key is {KEY_BYTES} bytes in base64, this one has {len(key)}")
    return key


def format_key(key: bytes) -> str:
    """The base64 text of `key`."""
    return base64.b64encode(key).decode()


class Keyring:
    """The installed keys; the first is the primary, used to send.

    Args:
        keys: at least one 32-byte key, primary first.
        cluster: the cluster name, bound into every packet.
    """

    def __init__(self, keys: Sequence[bytes], cluster: str) -> None:
        if not keys:
            raise KeyringError("a keyring needs at least one key")
        # cryptography's Rust bindings take 10-20 ms of CPU to load; they are
        # loaded with the first keyring, so an agent without a key starts
        # without them.
        from cryptography.exceptions import InvalidTag
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM

        self._aesgcm = AESGCM
        self._invalid_tag = InvalidTag
        self._aad_suffix = cluster.encode()
        self._keys: list[bytes] = []
        self._ciphers: dict[bytes, AESGCM] = {}
        for key in keys:
            self.install(key)

    @property
    def primary(self) -> bytes:
        """The key packets are sealed with."""
        return self._keys[0]

    @property
    def keys(self) -> tuple[bytes, ...]:
        """Every installed key, primary first."""
        return tuple(self._keys)

    def install(self, key: bytes) -> bool:
        """Accept `key` on receive too. Returns False if it was installed."""
        if len(key) != KEY_BYTES:
            raise KeyringError(f"a key is {KEY_BYTES} bytes")
        if key in self._ciphers:
            return False
        if len(self._keys) >= MAX_KEYS:
            raise KeyringError(f"at most {MAX_KEYS} keys; remove one first")
        self._keys.append(key)
        self._ciphers[key] = self._aesgcm(key)
        return True

    def use(self, key: bytes) -> None:
        """Make the installed `key` the primary."""
        if key not in self._ciphers:
            raise KeyringError("that key is not installed here; install it first")
        self._keys.remove(key)
        self._keys.insert(0, key)

    def remove(self, key: bytes) -> None:
        """Stop accepting `key`; the primary cannot be removed."""
        if key not in self._ciphers:
            raise KeyringError("that key is not installed here")
        if key == self._keys[0]:
            raise KeyringError("that key is the primary; use another key first")
        self._keys.remove(key)
        del self._ciphers[key]

    def seal(self, header: bytes, payload: bytes, stamp_ms: int, nonce: bytes) -> bytes:
        """`header` (flag bit 0 set here) + stamp + nonce + ciphertext."""
        head = bytes((header[0], header[1] | FLAG_ENCRYPTED)) + header[2:HEADER_BYTES]
        prefix = head + struct.pack(">Q", stamp_ms)
        sealed = self._ciphers[self._keys[0]].encrypt(nonce, payload, prefix + self._aad_suffix)
        return prefix + nonce + sealed

    def open(self, data: bytes) -> tuple[int, bytes, bytes]:
        """Authenticate a sealed packet whose header was checked already.

        Returns:
            (stamp_ms, nonce, payload).

        Raises:
            DecodeError: `truncated` or `auth` (no installed key opens it).
        """
        if len(data) < HEADER_BYTES + OVERHEAD_BYTES:
            raise DecodeError("truncated", "shorter than a sealed packet")
        nonce_at = HEADER_BYTES + STAMP_BYTES
        prefix = data[:nonce_at]
        nonce = data[nonce_at : nonce_at + NONCE_BYTES]
        sealed = data[nonce_at + NONCE_BYTES :]
        aad = prefix + self._aad_suffix
        for key in self._keys:
            try:
                payload = self._ciphers[key].decrypt(nonce, sealed, aad)
            except self._invalid_tag:
                continue
            (stamp_ms,) = struct.unpack(">Q", data[HEADER_BYTES:nonce_at])
            return stamp_ms, nonce, payload
        raise DecodeError("auth", "no installed key authenticates it")


class ReplayGuard:
    """Rejects stale stamps and nonces seen within the window.

    Args:
        window_ms: how far a stamp may be from our clock, either way.
        max_entries: the bound on remembered nonces (oldest go first).
    """

    def __init__(self, window_ms: int, max_entries: int = MAX_REPLAY_ENTRIES) -> None:
        self.window_ms = window_ms
        self.max_entries = max_entries
        self._seen: dict[bytes, int] = {}  # nonce -> stamp, in arrival order
        self.evicted = 0

    def check(self, stamp_ms: int, nonce: bytes, now_ms: int) -> None:
        """Accept (and remember) or reject one authenticated packet.

        Raises:
            DecodeError: `stale` (stamp outside the window; the detail says
                by how much, which points at clock skew) or `replay`.
        """
        skew_ms = stamp_ms - now_ms
        if abs(skew_ms) > self.window_ms:
            raise DecodeError("stale", f"stamped {skew_ms / 1000:+.1f} s from our clock")
        if nonce in self._seen:
            raise DecodeError("replay", "nonce seen within the window")
        self._forget_before(now_ms - self.window_ms)
        if len(self._seen) >= self.max_entries:
            del self._seen[next(iter(self._seen))]
            self.evicted += 1
        self._seen[nonce] = stamp_ms

    def _forget_before(self, cutoff_ms: int) -> None:
        # Arrival order is nearly stamp order, so the oldest sit in front;
        # stop at the first one still inside the window.
        while self._seen:
            nonce, stamp = next(iter(self._seen.items()))
            if stamp >= cutoff_ms:
                return
            del self._seen[nonce]

    def __len__(self) -> int:
        return len(self._seen)


# -- keyring commands across the cluster (type tags 60-61) --------------------

KEY_OPS = ("list", "install", "use", "remove")
MAX_ERROR_CHARS = 512


class KeyCommand(msgspec.Struct, frozen=True):
    """An operator's keyring change (or a `list`), sent by the agent where
    `shoal keys` ran to every live member, by sealed stream only."""

    op: str
    key: bytes | None  # None for list
    expects_reply: ClassVar[bool] = True


class KeyReply(msgspec.Struct, frozen=True):
    """A member's answer: done or why not, and its keys after the change."""

    ok: bool
    error: str
    keys: tuple[bytes, ...]


def _op(v: object) -> str:
    if v not in KEY_OPS:
        raise DecodeError("shape", "unknown key operation")
    return str(v)


def _key(v: object) -> bytes:
    if type(v) is not bytes or len(v) != KEY_BYTES:
        raise DecodeError("shape", "a key is 32 bytes")
    return v


def _command(f: list[Any]) -> KeyCommand:
    op = _op(f[1])
    if (op == "list") != (f[2] is None):
        raise DecodeError("shape", "a key is required except for list")
    return KeyCommand(op, None if f[2] is None else _key(f[2]))


def _reply(f: list[Any]) -> KeyReply:
    keys = f[3]
    if type(keys) is not list or len(keys) > MAX_KEYS:
        raise DecodeError("shape", "too many keys")
    return KeyReply(boolean(f[1]), text(f[2], MAX_ERROR_CHARS), tuple(_key(k) for k in keys))


def _encode(msg: Any) -> list[Any] | None:
    match msg:
        case KeyCommand(op, key):
            return [60, op, key]
        case KeyReply(ok, error, keys):
            return [61, ok, error, list(keys)]
    return None


codec.register(60, 3, _command, _encode)
codec.register(61, 4, _reply, _encode)
