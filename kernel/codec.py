"""The wire format: a small header, then CBOR. See docs/wire.md.

Datagram (one UDP packet)::

    byte 0      protocol version (PROTOCOL_VERSION)
    byte 1      flags (bit 0: payload is encrypted; reserved for the keyring)
    bytes 2..5  cluster tag: first 4 bytes of SHA-256(cluster name)
    bytes 6..   CBOR array of messages, each [type_tag, field, ...]

Stream frame (TCP): a 4-byte big-endian length, then a datagram-shaped body.

The decoder is the trust boundary. It accepts only the exact shapes below,
with bounded sizes, and raises `DecodeError` (with a short reason used as a
counter label) for anything else: callers count and drop, never crash. The
type-tag table is shared by all cores; tags 1-19 are membership
(membership/codec.py), 20-39 election (election/messages.py), 40-59
anti-entropy (storage/messages.py) and 60-69 the keyring
(kernel/sealing.py, which also seals payloads when encryption is on). Each
registers its tags here with `register`, and builds its messages with the
public field checks below (`u64`, `counter`, `name`, ...).
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from typing import Any, Final

import cbor2

from shoal.kernel import versions as _versions
from shoal.kernel.contract import Address, Tags
from shoal.kernel.hashes import sha256

# The envelope layouts this build reads (kernel/versions.py): byte 0 of
# every datagram and frame body, inside the sealed packet's authenticated
# data. It writes PROTOCOL_VERSION, the only layout so far.
ENVELOPE_MIN, ENVELOPE_MAX = _versions.THIS_BUILD.envelope
PROTOCOL_VERSION = ENVELOPE_MAX
# A message type an older reader may skip without harm takes a tag from
# here up (an "ignorable" bit, as Kafka's tagged fields): an unknown tag at
# or above it is skipped, an unknown one below it drops the packet.
IGNORABLE_TAG_MIN = 128
HEADER_BYTES = 6
FRAME_PREFIX_BYTES = 4
FLAG_ENCRYPTED = 0x01

MAX_U64 = 2**64 - 1
# Incarnations and epochs only ever grow by one, so no honest node gets
# near 2**63; a larger claim is hostile (someone holding the key trying to
# make a node outbid itself past 64 bits) and is refused here ("absurd").
MAX_COUNTER = 2**63 - 1
MAX_NAME_CHARS = 128
MAX_HOST_CHARS = 255
MAX_TAGS = 32
MAX_TAG_KEY_CHARS = 64
MAX_TAG_VALUE_CHARS = 512
MAX_MESSAGES_PER_DATAGRAM = 256
MAX_PUSHPULL_MEMBERS = 100_000
MAX_FRAME_BYTES = 64 * 1024 * 1024
NODE_ID_BYTES = 16


class DecodeError(ValueError):
    """Bytes from the network that are not a valid shoal message.

    `reason` is a short, stable label for metrics (`truncated`, `version`,
    `cluster`, `cbor`, `shape`, ...).
    """

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason


def cluster_tag(cluster: str) -> bytes:
    """The 4-byte tag that keeps clusters on one LAN apart."""
    return sha256(cluster.encode()).digest()[:4]


# -- field checks, for every core's decoders: each returns the value or
# raises DecodeError ("shape", or "absurd" for a counter beyond 2**63) ------


def u64(v: object) -> int:
    if type(v) is not int or not 0 <= v <= MAX_U64:
        raise DecodeError("shape", "expected an unsigned 64-bit int")
    return v


def counter(v: object) -> int:
    """An incarnation or epoch: a u64 below MAX_COUNTER."""
    n = u64(v)
    if n > MAX_COUNTER:
        raise DecodeError("absurd", "incarnation or epoch beyond 2**63")
    return n


def boolean(v: object) -> bool:
    if type(v) is not bool:
        raise DecodeError("shape", "expected a bool")
    return v


def text(v: object, max_chars: int) -> str:
    if type(v) is not str or len(v) > max_chars:
        raise DecodeError("shape", "expected a short text")
    return v


def name(v: object) -> str:
    name = text(v, MAX_NAME_CHARS)
    if not name:
        raise DecodeError("shape", "empty node name")
    return name


def address(v: object) -> Address:
    if type(v) is not list or len(v) != 2:
        raise DecodeError("shape", "expected [host, port]")
    host = text(v[0], MAX_HOST_CHARS)
    port = v[1]
    if not host or type(port) is not int or not 0 < port < 65536:
        raise DecodeError("shape", "bad address")
    return (host, port)


def tags(v: object) -> Tags:
    if type(v) is not dict or len(v) > MAX_TAGS:
        raise DecodeError("shape", "expected a small map of tags")
    out = []
    for key, value in v.items():
        out.append((text(key, MAX_TAG_KEY_CHARS), text(value, MAX_TAG_VALUE_CHARS)))
    return tuple(sorted(out))


def versions(v: object) -> _versions.Versions:
    """What a peer says it understands; a zero, inverted or absurd range is
    refused ("absurd"), never merged."""
    try:
        return _versions.from_wire(v)
    except _versions.InvalidVersions as exc:
        raise DecodeError("absurd", f"versions: {exc}") from None


def node_id(v: object) -> bytes:
    if type(v) is not bytes or len(v) != NODE_ID_BYTES:
        raise DecodeError("shape", "expected a 16-byte node id")
    return v


# -- the tag table ----------------------------------------------------------


Decoder = Callable[[list[Any]], Any]

_DECODERS: dict[int, tuple[int, Decoder]] = {}

Encoder = Callable[[Any], list[Any] | None]
_ENCODERS: list[Encoder] = []
# The encoder of each message class, found once: a dict lookup per message
# on the encode path instead of asking every core's encoder in turn.
_ENCODER_OF: dict[type, Encoder] = {}


def register(tag: int, arity: int, decode: Decoder, encode: Encoder) -> None:
    """Add a core's message type to the shared tag table.

    Args:
        tag: the type tag, unique across all cores (see the module docstring).
        arity: the number of items in the encoded list, tag included.
        decode: builds the message from the list, raising DecodeError.
        encode: returns the list for a message of this core, or None.
    """
    assert tag not in _DECODERS, f"tag {tag} registered twice"
    _DECODERS[tag] = (arity, decode)
    if encode not in _ENCODERS:
        _ENCODERS.append(encode)


def _message_fields(msg: Any) -> list[Any]:
    encode = _ENCODER_OF.get(type(msg))
    if encode is not None:
        fields = encode(msg)
        assert fields is not None
        return fields
    for encode in _ENCODERS:
        fields = encode(msg)
        if fields is not None:
            _ENCODER_OF[type(msg)] = encode
            return fields
    raise TypeError(f"not a wire message: {msg!r}")  # our bug, not remote input


def _decode_message(item: object) -> Any:
    if type(item) is not list or not item or type(item[0]) is not int:
        raise DecodeError("shape", "message is not [tag, ...]")
    entry = _DECODERS.get(item[0])
    if entry is None:
        if item[0] >= IGNORABLE_TAG_MIN:
            return None  # a newer agent's message we may skip
        raise DecodeError("unknown_type", str(item[0]))
    arity, decode = entry
    if len(item) != arity:
        raise DecodeError("shape", f"type {item[0]} has {len(item)} fields")
    return decode(item)


# -- datagrams and frames ---------------------------------------------------


def encode_payload(messages: Sequence[Any]) -> bytes:
    """CBOR for a list of messages (what follows the header)."""
    return cbor2.dumps([_message_fields(m) for m in messages])


def encode_datagram(messages: Sequence[Any], tag: bytes, flags: int = 0) -> bytes:
    """One datagram carrying `messages` for the cluster with `tag`."""
    return bytes((PROTOCOL_VERSION, flags)) + tag + encode_payload(messages)


def split_header(data: bytes, tag: bytes) -> tuple[int, bytes]:
    """Check the header of a datagram or frame body; return (flags, payload).

    Raises:
        DecodeError: truncated, another protocol version, another cluster.
    """
    if len(data) < HEADER_BYTES + 1:
        raise DecodeError("truncated")
    if not ENVELOPE_MIN <= data[0] <= ENVELOPE_MAX:
        raise DecodeError("version", str(data[0]))
    if data[2:HEADER_BYTES] != tag:
        raise DecodeError("cluster")
    return data[1], data[HEADER_BYTES:]


def decode_payload(payload: bytes) -> list[Any]:
    """The messages in a CBOR payload.

    Raises:
        DecodeError: anything that is not a list of valid messages.
    """
    try:
        items = cbor2.loads(payload)
    except Exception as exc:  # cbor2 raises several types on hostile input
        raise DecodeError("cbor", type(exc).__name__) from None
    if type(items) is not list or not items or len(items) > MAX_MESSAGES_PER_DATAGRAM:
        raise DecodeError("shape", "payload is not a list of messages")
    messages = [_decode_message(item) for item in items]
    if None in messages:  # skipped: ignorable types this build does not know
        messages = [m for m in messages if m is not None]
        if not messages:
            raise DecodeError("ignorable", "only message types this build may skip")
    return messages


def decode_datagram(data: bytes, tag: bytes) -> list[Any]:
    """The messages in a plaintext datagram of the cluster with `tag`."""
    flags, payload = split_header(data, tag)
    if flags & FLAG_ENCRYPTED:
        raise DecodeError("encrypted", "no keyring configured")
    return decode_payload(payload)


def encode_frame(messages: Sequence[Any], tag: bytes) -> bytes:
    """A length-prefixed stream frame."""
    body = encode_datagram(messages, tag)
    return struct.pack(">I", len(body)) + body


def frame_length(prefix: bytes) -> int:
    """The body length announced by a 4-byte frame prefix.

    Raises:
        DecodeError: the announced length is zero or over MAX_FRAME_BYTES.
    """
    length: int = struct.unpack(">I", prefix)[0]
    if not HEADER_BYTES < length <= MAX_FRAME_BYTES:
        raise DecodeError("frame_size", str(length))
    return length


# Final: compiled, C statics instead of a dict lookup at every use.
_SIZE_CACHE_ENTRIES: Final = 32768
_size_by_value: Final[dict[Any, int]] = {}
_size_by_id: Final[dict[int, tuple[Any, int]]] = {}


def encoded_size(msg: Any, fresh: bool = False) -> int:
    """Bytes `msg` adds to a compound datagram's payload.

    Memoized, because a gossiped update is re-sent many times by every node
    that learns it (and in the simulator, as one shared object, by thousands
    of nodes). First by identity, which costs no hashing (the memo holds the
    object, so its id cannot be reused while cached); then by value, since
    equal messages encode to the same bytes. Both memos are cleared when
    full, so they stay within a few megabytes.

    A `fresh` message (a probe's own, built for one datagram) skips the memo
    by identity: it would not be asked again, and at 1,000 simulated nodes
    such messages flushed the memo so often that 63 % of its lookups missed.
    """
    if not fresh:
        hit = _size_by_id.get(id(msg))
        if hit is not None and hit[0] is msg:
            return hit[1]
    size = _size_by_value.get(msg)
    if size is None:
        size = len(cbor2.dumps(_message_fields(msg)))
        if len(_size_by_value) >= _SIZE_CACHE_ENTRIES:
            _size_by_value.clear()
        _size_by_value[msg] = size
    if fresh:
        return size
    if len(_size_by_id) >= _SIZE_CACHE_ENTRIES:
        _size_by_id.clear()
    _size_by_id[id(msg)] = (msg, size)
    return size


def datagram_size(messages: Sequence[Any]) -> int:
    """The exact size of `encode_datagram(messages, ...)`, from the cached
    sizes of its messages: a CBOR array is its head plus its items."""
    n = len(messages)
    head = 1 if n < 24 else 2 if n < 256 else 3
    return HEADER_BYTES + head + sum(encoded_size(m) for m in messages)
