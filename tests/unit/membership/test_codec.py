"""The codec round-trips every message and rejects hostile bytes cleanly."""

import cbor2
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shoal.kernel import codec
from shoal.membership.member import MemberState
from shoal.membership.messages import (
    Ack,
    Alive,
    Dead,
    Leave,
    MemberRecord,
    Nack,
    Ping,
    PingReq,
    PushPull,
    Suspect,
)  # fmt: skip
from tests.unit.membership.helpers import ident

TAG = codec.cluster_tag("test")
N2 = ident(2)
ALL = [
    Ping(1, "n2", "n1"),
    PingReq(2, "n3", ("10.0.0.3", 7946), True),
    Ack(3),
    Nack(4),
    Alive(5, N2),
    Suspect(6, "n2", "n1"),
    Dead(7, "n2", "n1"),
    Leave(8, "n2"),
    PushPull("n1", True, False, (MemberRecord(N2, 9, MemberState.SUSPECT),)),
]


def test_every_message_round_trips_in_one_compound_datagram():
    """What one agent sends, another decodes to the same messages."""
    data = codec.encode_datagram(ALL, TAG)
    assert codec.decode_datagram(data, TAG) == ALL
    assert codec.datagram_size(ALL) == len(data)


def test_frames_round_trip_with_their_length_prefix():
    """Stream frames carry their length first."""
    frame = codec.encode_frame(ALL, TAG)
    assert codec.frame_length(frame[:4]) == len(frame) - 4
    assert codec.decode_datagram(frame[4:], TAG) == ALL


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"", "truncated"),
        (bytes([9, 0]) + TAG + b"\x80", "version"),
        (codec.encode_datagram([Ack(1)], codec.cluster_tag("other")), "cluster"),
        (bytes([1, 0]) + TAG + b"\xff\xff", "cbor"),
        (bytes([1, 0]) + TAG + cbor2.dumps({"a": 1}), "shape"),
        (bytes([1, 0]) + TAG + cbor2.dumps([[99, 1]]), "unknown_type"),
        (bytes([1, 0]) + TAG + cbor2.dumps([[3, -1]]), "shape"),
        (bytes([1, 0]) + TAG + cbor2.dumps([[3, 2**64]]), "shape"),
        (bytes([1, 0]) + TAG + cbor2.dumps([[1, 1, "x" * 500]]), "shape"),
        (bytes([1, 0]) + TAG + cbor2.dumps([[5, 1, "n", b"short", ["h", 1], {}]]), "shape"),
        (bytes([1, 0]) + TAG + cbor2.dumps([[3, True]]), "shape"),
        (bytes([1, 1]) + TAG + b"\x80", "encrypted"),
    ],
)
def test_malformed_datagrams_are_rejected_with_a_reason(data, reason):
    """Garbage is classified for the drop counters, never crashes."""
    with pytest.raises(codec.DecodeError) as info:
        codec.decode_datagram(data, TAG)
    assert info.value.reason == reason


def test_frame_length_bounds():
    """A frame announcing zero or gigabytes is refused before reading it."""
    for bad in (0, codec.MAX_FRAME_BYTES + 1):
        with pytest.raises(codec.DecodeError):
            codec.frame_length(bad.to_bytes(4, "big"))


@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=300))
def test_random_bytes_never_raise_anything_but_decode_error(blob):
    """No byte string from the network can crash the receive path."""
    try:
        codec.decode_datagram(bytes([1, 0]) + TAG + blob, TAG)
    except codec.DecodeError:
        pass


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 200))
def test_truncated_datagrams_are_rejected(cut):
    """A datagram cut short anywhere is dropped, not half-applied."""
    data = codec.encode_datagram(ALL, TAG)
    try:
        codec.decode_datagram(data[: max(0, len(data) - cut)], TAG)
    except codec.DecodeError:
        return
    raise AssertionError("a truncated datagram decoded")
