"""Hostile bytes at every decoder: each is refused with a reason, nothing
raises anything else, and the largest values that pass keep every core's
arithmetic inside what the wire and the store can hold."""

import os
import struct

import cbor2
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import shoal.election.messages  # noqa: F401 - registers tags 20-24
import shoal.storage.messages  # noqa: F401 - registers tags 40-44
from shoal.daemon.network.wire import Wire
from shoal.kernel import codec
from shoal.kernel.sealing import UNBOUND, Envelope, Keyring
from shoal.membership.messages import Alive, Suspect
from tests.unit.election.test_lease import ask, voter
from tests.unit.membership.helpers import Net, ident

TAG = codec.cluster_tag("c")
KEY = b"k" * 32
TAGS = [*range(1, 10), *range(20, 25), *range(40, 45), 60, 61]
cbor_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.text(max_size=20)
    | st.binary(max_size=40) | st.floats(),
    lambda inner: st.lists(inner, max_size=6)
    | st.dictionaries(st.text(max_size=5), inner, max_size=4),
    max_leaves=30,
)  # fmt: skip


def plaintext_wire() -> Wire:
    return Wire("c", node_id=bytes(16), run=1, keyring=None)


def sealed_wire() -> Wire:
    return Wire("c", node_id=bytes(16), run=1, keyring=Keyring([KEY], "c"))


@settings(max_examples=600, deadline=None)
@given(st.sampled_from(TAGS) | st.integers(-5, 100), st.lists(cbor_values, max_size=8))
def test_any_core_message_of_the_wrong_shape_is_a_decode_error(tag, fields):
    """Valid CBOR with wrong types or absurd values, for every core's tags
    (and unknown ones): a DecodeError, or a message that round-trips."""
    data = bytes([1, 0]) + TAG + cbor2.dumps([[tag, *fields]])
    try:
        decoded = codec.decode_datagram(data, TAG)
    except codec.DecodeError:
        return
    assert codec.decode_datagram(codec.encode_datagram(decoded, TAG), TAG) == decoded


@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=400), st.integers(0, 255))
def test_random_bytes_with_any_flags_are_refused_by_both_wires(blob, flags):
    """Random packets, claiming encryption or not, never crash the receive path."""
    for wire in (plaintext_wire(), sealed_wire()):
        try:
            wire.decode(bytes([1, flags]) + TAG + blob)
        except codec.DecodeError:
            pass


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=300))
def test_garbage_sealed_under_the_right_key_is_still_refused(payload):
    """Someone holding the key and sending garbage CBOR gets only DecodeErrors."""
    wire = sealed_wire()
    assert wire.keyring is not None
    envelope = Envelope(b"s" * 8, 1, UNBOUND, 1)
    data = wire.keyring.seal(bytes([1, 0]) + TAG, payload, envelope, os.urandom(12))
    try:
        wire.decode(data)
    except codec.DecodeError:
        pass


@pytest.mark.parametrize(
    ("payload", "reason"),
    [
        (b"\x81" * 100_000 + b"\x00", "cbor"),  # nesting deeper than any stack
        (b"\x81\x5b" + struct.pack(">Q", 2**63), "cbor"),  # a byte string of 8 EiB
        (b"\x81\x9b" + struct.pack(">Q", 2**40), "cbor"),  # an array of 10^12 items
        (b"\x9f" * 5000, "cbor"),  # unterminated indefinite arrays
        (cbor2.dumps([[5, 2**63, "n", b"i" * 16, ["10.0.0.1", 1], {}, [1] * 9]]), "absurd"),
        # an inverted version range (kernel/versions.py)
        (cbor2.dumps([[5, 1, "n", b"i" * 16, ["10.0.0.1", 1], {}, [2, 1] * 4 + [1]]]), "absurd"),
        (cbor2.dumps([[6, 2**64 - 1, "n", "m"]]), "absurd"),
        (cbor2.dumps([[20, 1, 2**64 - 1, "a", None]]), "absurd"),
        (cbor2.dumps([[9, "n", True, False, [None] * 10]]), "shape"),
        (cbor2.dumps([[3, 1]] * 257), "shape"),  # more messages than a datagram holds
    ],
)
def test_hostile_payloads_are_refused_with_a_reason(payload, reason):
    """Deep nesting, huge declared lengths and absurd counters are counted drops."""
    with pytest.raises(codec.DecodeError) as info:
        codec.decode_datagram(bytes([1, 0]) + TAG + payload, TAG)
    assert info.value.reason == reason


def test_the_largest_incarnation_that_passes_still_refutes_into_a_storable_number():
    """A suspicion of us at 2**63-1 is outbid with a value the store and wire hold."""
    net = Net(2)
    n1 = net.node(1)
    n1.receive(Suspect(codec.MAX_COUNTER, "n1", "n2"), ident(2).addr, 1.0)
    out = n1.drain()
    assert n1.incarnation == codec.MAX_COUNTER + 1
    assert out.persist[0].write.incarnation.to_bytes(8, "big")  # fits the identity store
    for send in out.send:
        codec.encode_datagram(send.messages, TAG)
    n1.receive(Alive(codec.MAX_COUNTER, ident(3)), ident(2).addr, 1.0)
    assert n1.table.get("n3") is not None


def test_an_epoch_at_the_limit_is_granted_without_overflowing_anything():
    """The largest epoch that decodes is persisted and answered, nothing more."""
    out = ask(voter(), "a", codec.MAX_COUNTER, 0.0)
    assert out.persist[0].write.granted_epoch == codec.MAX_COUNTER
    cbor2.dumps(out.persist[0].write.granted_epoch)
    for send in out.send:
        codec.encode_datagram(send.messages, TAG)
