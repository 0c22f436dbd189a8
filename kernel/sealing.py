"""The sealing layer: AES-256-GCM under a keyring, every packet bound to its
sender's run, to its receiver's run, and to its place in the sender's count.

Theory of operation. With encryption on, every datagram and stream-frame
body leaves the agent sealed:

    bytes 0..5    the plaintext header of docs/wire.md, flag bit 0 set
    bytes 6..13   from: the sender's node tag (the first 8 bytes of its id)
    bytes 14..21  run: the sender's run number (u64 BE; grows at every start)
    bytes 22..29  to: the receiver's binding, `binding(its tag, its run)`,
                  or 8 zero bytes (`UNBOUND`: a `Hello`, first contact)
    bytes 30..37  counter: the sender's packet count in this run (u64 BE)
    bytes 38..49  nonce: 96 random bits, fresh for every packet
    bytes 50..    AES-256-GCM ciphertext of the CBOR payload, then its 16-byte tag

The associated data is bytes 0..37 and the full cluster name: a packet
authenticates only in its cluster, only with the sender, run, receiver and
counter it was made with. A receiver tries the primary key first and then
every other installed key (memberlist's keyring rule), which is what makes
a rotation possible without downtime.

Replay (IPsec ESP's and DTLS's anti-replay window, WireGuard's per-peer
counter, RFC 4303 §3.4.3 and RFC 6347 §4.1.2.6): `ReplayWindows.check` refuses a
packet bound to anyone but this node in this run (`misdirected`: a copy
sent to another member, or to this one after it restarted), from a run of
its sender older than one already seen (`stale_run`), from itself
(`reflected`: its own packet, of any run, sent back), or whose counter was
seen already or is older than the window (`replay`). A restart needs no
memory: every bound packet names the receiver's run, and runs only grow
(`next_run`), so nothing captured before a restart is bound to the run
after it. An unbound packet may hold nothing but a `Hello`, which changes
no state: it is answered with a `Welcome` bound to the sender, and teaches
which run the sender is in now (a newer one only).

No clock is read: a wrong wall clock on either side changes nothing here.

Pure: the caller passes the nonce (from the OS's CSPRNG in the agent) and
the run (from the data directory); nothing here reads either.
"""

from __future__ import annotations

import base64
import binascii
import struct
from collections import OrderedDict
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar

import msgspec

from shoal.kernel import codec
from shoal.kernel.codec import FLAG_ENCRYPTED, HEADER_BYTES, DecodeError, boolean, text, u64
from shoal.kernel.hashes import blake2b
from shoal.kernel.versions import THIS_BUILD, Versions

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

KEY_BYTES = 32  # AES-256
NONCE_BYTES = 12  # GCM's native nonce size (NIST SP 800-38D §8.2.2, random construction)
TAG_BYTES = 16
ENVELOPE_BYTES = 32  # from, run, to, counter
OVERHEAD_BYTES = ENVELOPE_BYTES + NONCE_BYTES + TAG_BYTES
UNBOUND = bytes(8)
MAX_KEYS = 16
# How far behind the newest counter seen from a sender a packet may still
# arrive. A sender counts every packet it sends, to anyone; a stream frame
# sealed just before a burst of datagrams can arrive after them. 8,192
# packets is seconds of a busy sender's output; RFC 6479 suggests 1,024+.
WINDOW_PACKETS = 8192
_WINDOW_MASK = (1 << WINDOW_PACKETS) - 1
# A sender entry costs ~1.2 KB at a full window; at this bound the table
# stays under ~80 MB even if key holders flood us with new node tags. The
# least recently heard is forgotten first (see docs/security.md).
MAX_SENDERS = 65_536
_ENVELOPE = struct.Struct(">8sQ8sQ")


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


def binding(node_tag: bytes, run: int) -> bytes:
    """What a packet for node `node_tag` in `run` carries as `to`."""
    return blake2b(node_tag + run.to_bytes(8, "big"), digest_size=8).digest()


class Envelope(msgspec.Struct, frozen=True):
    """Who sealed a packet, in which run, for whom, as its how-manieth."""

    sender: bytes  # the sender's node tag (8 bytes)
    run: int
    to: bytes  # `binding(receiver tag, receiver run)`, or UNBOUND
    counter: int


class Keyring:
    """The installed keys; the first is the primary, used to send.

    Args:
        keys: at least one 32-byte key, primary first.
        cluster: the cluster name, bound into every packet.
        version: the version of the last key command applied (see
            `KeyCommand`); persisted with the keys.
    """

    def __init__(self, keys: Sequence[bytes], cluster: str, version: int = 0) -> None:
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
        self.version = version
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

    def seal(self, header: bytes, payload: bytes, envelope: Envelope, nonce: bytes) -> bytes:
        """`header` (flag bit 0 set here) + envelope + nonce + ciphertext."""
        head = bytes((header[0], header[1] | FLAG_ENCRYPTED)) + header[2:HEADER_BYTES]
        e = envelope
        prefix = head + _ENVELOPE.pack(e.sender, e.run, e.to, e.counter)
        sealed = self._ciphers[self._keys[0]].encrypt(nonce, payload, prefix + self._aad_suffix)
        return prefix + nonce + sealed

    def open(self, data: bytes) -> tuple[Envelope, bytes]:
        """Authenticate a sealed packet whose header was checked already.

        Returns:
            (envelope, payload).

        Raises:
            DecodeError: `truncated` or `auth` (no installed key opens it).
        """
        if len(data) < HEADER_BYTES + OVERHEAD_BYTES:
            raise DecodeError("truncated", "shorter than a sealed packet")
        nonce_at = HEADER_BYTES + ENVELOPE_BYTES
        prefix = data[:nonce_at]
        nonce = data[nonce_at : nonce_at + NONCE_BYTES]
        sealed = data[nonce_at + NONCE_BYTES :]
        aad = prefix + self._aad_suffix
        for key in self._keys:
            try:
                payload = self._ciphers[key].decrypt(nonce, sealed, aad)
            except self._invalid_tag:
                continue
            return Envelope(*_ENVELOPE.unpack_from(data, HEADER_BYTES)), payload
        raise DecodeError("auth", "no installed key authenticates it")


class _Window:
    """One sender's run and the counters seen in it (bit i: `top - i`)."""

    __slots__ = ("run", "top", "bits")

    def __init__(self, run: int) -> None:
        self.run = run
        self.top = -1
        self.bits = 0


class ReplayWindows:
    """This node's run and binding, and every sender's newest run and window.

    Args:
        node_tag: this node's tag (the first 8 bytes of its id).
        run: this node's run number (see `next_run`).
        max_senders: the bound on senders remembered.
    """

    def __init__(self, node_tag: bytes, run: int, max_senders: int = MAX_SENDERS) -> None:
        self.node_tag = node_tag
        self.run = run
        self.me = binding(node_tag, run)
        self.max_senders = max_senders
        self.evicted = 0
        self._windows: OrderedDict[bytes, _Window] = OrderedDict()
        self._bindings: dict[tuple[bytes, int], bytes] = {}

    def check(self, env: Envelope) -> None:
        """Accept (and remember) or refuse one authenticated packet.

        Raises:
            DecodeError: `misdirected`, `stale_run` or `replay`.
        """
        if env.to != self.me and env.to != UNBOUND:
            raise DecodeError("misdirected", "bound to another member, or to an earlier run")
        if env.sender == self.node_tag:
            raise DecodeError("reflected", "our own packet, sent back to us")
        windows = self._windows
        w = windows.get(env.sender)
        if w is None or env.run > w.run:
            if w is None and len(windows) >= self.max_senders:
                windows.popitem(last=False)
                self.evicted += 1
            w = windows[env.sender] = _Window(env.run)
        elif env.run < w.run:
            raise DecodeError("stale_run", "from an earlier run of its sender")
        else:
            windows.move_to_end(env.sender)
        counter = env.counter
        if counter > w.top:
            w.bits = ((w.bits << (counter - w.top)) | 1) & _WINDOW_MASK
            w.top = counter
            return
        behind = w.top - counter
        if behind >= WINDOW_PACKETS:
            raise DecodeError("replay", "older than the replay window")
        if (w.bits >> behind) & 1:
            raise DecodeError("replay", "counter seen already")
        w.bits |= 1 << behind

    def run_of(self, node_tag: bytes) -> int | None:
        """The newest run heard from `node_tag`, if any."""
        w = self._windows.get(node_tag)
        return None if w is None else w.run

    def binding_of(self, node_tag: bytes) -> bytes | None:
        """What a packet to `node_tag` in its newest run carries as `to`."""
        w = self._windows.get(node_tag)
        if w is None:
            return None
        key = (node_tag, w.run)
        found = self._bindings.get(key)
        if found is None:
            if len(self._bindings) >= self.max_senders:
                self._bindings.clear()
            found = self._bindings[key] = binding(node_tag, w.run)
        return found

    def __len__(self) -> int:
        return len(self._windows)


def next_run(stored: int, now_us: int) -> int:
    """The run number of a starting node: above the last one it stored, and
    at least the wall clock in microseconds, so that a data directory
    restored from a backup still starts above the runs its peers saw unless
    the clock is wrong too (docs/security.md)."""
    return max(stored + 1, now_us)


# -- first contact (type tags 62-63) -------------------------------------------


class Hello(msgspec.Struct, frozen=True):
    """Unbound: "I am the envelope's sender in its run; tell me yours".
    `ref` is echoed in the `Welcome`, so the answer is matched to the
    address the hello went to; `versions` is what the sender understands
    (kernel/versions.py): a receiver that cannot talk with it answers
    nothing, and says so in its log."""

    ref: int
    versions: Versions = THIS_BUILD


class Welcome(msgspec.Struct, frozen=True):
    """Bound to the hello's sender: the envelope tells our run, `versions`
    what we understand."""

    ref: int
    versions: Versions = THIS_BUILD


def _encode_contact(msg: Any) -> list[Any] | None:
    match msg:
        case Hello(ref, versions):
            return [62, ref, versions.to_wire()]
        case Welcome(ref, versions):
            return [63, ref, versions.to_wire()]
    return None


codec.register(62, 3, lambda f: Hello(u64(f[1]), codec.versions(f[2])), _encode_contact)
codec.register(63, 3, lambda f: Welcome(u64(f[1]), codec.versions(f[2])), _encode_contact)


# -- keyring commands across the cluster (type tags 60-61) --------------------

KEY_OPS = ("list", "install", "use", "remove")
MAX_ERROR_CHARS = 512


class KeyCommand(msgspec.Struct, frozen=True):
    """An operator's keyring change (or a `list`), sent by the agent where
    `shoal keys` ran to every live member, by sealed stream only.

    `version` orders changes: a member applies one only above its keyring's
    version (persisted with the keys), so a change is applied at most once
    and never after a later one, whoever resends it (0 for `list`)."""

    op: str
    key: bytes | None  # None for list
    version: int
    expects_reply: ClassVar[bool] = True


class KeyReply(msgspec.Struct, frozen=True):
    """A member's answer: done or why not, its keys and keyring version after."""

    ok: bool
    error: str
    keys: tuple[bytes, ...]
    version: int


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
    return KeyCommand(op, None if f[2] is None else _key(f[2]), u64(f[3]))


def _reply(f: list[Any]) -> KeyReply:
    keys = f[3]
    if type(keys) is not list or len(keys) > MAX_KEYS:
        raise DecodeError("shape", "too many keys")
    return KeyReply(boolean(f[1]), text(f[2], MAX_ERROR_CHARS), tuple(_key(k) for k in keys),
                    u64(f[4]))  # fmt: skip


def _encode(msg: Any) -> list[Any] | None:
    match msg:
        case KeyCommand(op, key, version):
            return [60, op, key, version]
        case KeyReply(ok, error, keys, version):
            return [61, ok, error, list(keys), version]
    return None


codec.register(60, 4, _command, _encode)
codec.register(61, 5, _reply, _encode)
