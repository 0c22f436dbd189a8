"""The version rule (kernel/versions.py), in the shape of memberlist's
TestVerifyProtocol: tables of what peers announce, and what is refused."""

from __future__ import annotations

import pytest

from shoal.kernel import codec
from shoal.kernel.versions import (
    NEXT_RELEASE_STANDIN,
    THIS_BUILD,
    InvalidVersions,
    Versions,
    cluster_speaks,
    feature_level,
    from_wire,
    incompatible,
    speaks,
)


def v(env=(1, 1), mem=(1, 1), el=(1, 1), sync=(1, 1), features=1) -> Versions:
    return Versions(env, mem, el, sync, features)


@pytest.mark.parametrize(("mine", "theirs", "refused"), [
    (v(), v(), []),
    (v(mem=(1, 2)), v(mem=(2, 3)), []),  # overlap at 2
    (v(mem=(1, 2)), v(mem=(3, 4)), ["membership"]),  # a release too far ahead
    (v(mem=(3, 4)), v(mem=(1, 2)), ["membership"]),  # and too far behind
    (v(env=(2, 2), sync=(1, 1)), v(env=(1, 1), sync=(2, 2)), ["envelope", "sync"]),
    (v(el=(1, 5)), v(el=(5, 9)), []),
    (THIS_BUILD, NEXT_RELEASE_STANDIN, []),  # adjacent releases always overlap
])  # fmt: skip
def test_a_peer_is_refused_exactly_when_a_protocol_range_does_not_overlap(mine, theirs, refused):
    """Two agents talk when every protocol's ranges overlap; the refusal names
    the protocols that do not, in either direction."""
    assert incompatible(mine, theirs) == refused
    assert incompatible(theirs, mine) == refused


def test_compatible_peers_speak_the_highest_version_both_understand():
    """Per protocol, the lower of the two maxima: the newer agent speaks down."""
    assert speaks(v(mem=(1, 2)), v(mem=(1, 3))) == (1, 2, 1, 1)
    assert cluster_speaks(v(mem=(1, 3)), [v(mem=(1, 2)), v(mem=(2, 3))]) == (1, 2, 1, 1)


def test_the_feature_level_is_the_lowest_supported_and_never_above_the_cap():
    """The cluster runs the level every member supports; the operator's cap
    lowers it (before a downgrade); nothing lowers it below 1."""
    assert feature_level(v(features=2), [v(features=2), v(features=2)], None) == 2
    assert feature_level(v(features=2), [v(features=1), v(features=2)], None) == 1
    assert feature_level(v(features=2), [v(features=2)], 1) == 1
    assert feature_level(v(features=1), [], 5) == 1


@pytest.mark.parametrize("wire", [
    [0, 1, 1, 1, 1, 1, 1, 1, 1],  # zero
    [2, 1, 1, 1, 1, 1, 1, 1, 1],  # inverted
    [1, 256, 1, 1, 1, 1, 1, 1, 1],  # absurd
    [1, 1, 1, 1, 1, 1, 1, 1, 0],  # no feature level
    [1, 1, 1, 1, 1, 1, 1, 1, 70000],  # absurd feature level
    [1, 1, 1, 1, 1, 1, 1, 1],  # short
    [1, 1, 1, 1, 1, 1, 1, 1, "1"],  # not an int
    "1-1",
])  # fmt: skip
def test_zero_inverted_or_absurd_ranges_are_refused_not_merged(wire):
    """A peer announcing nonsense is dropped at the codec as `absurd`."""
    with pytest.raises(InvalidVersions):
        from_wire(wire)
    with pytest.raises(codec.DecodeError) as err:
        codec.versions(wire)
    assert err.value.reason == "absurd"


def test_equal_versions_from_the_wire_are_one_shared_object():
    """A cluster of one build shares one object (identity compares first)."""
    assert from_wire(THIS_BUILD.to_wire()) is from_wire(list(THIS_BUILD.to_wire()))


def test_an_unknown_ignorable_message_is_skipped_and_an_unknown_plain_one_drops_the_packet():
    """The ignorable bit: tags from 128 are skipped by a reader that does
    not know them; an unknown tag below drops the datagram as unknown_type."""
    import cbor2

    from shoal.membership.messages import Nack

    tag = codec.cluster_tag("c")
    head = bytes((codec.PROTOCOL_VERSION, 0)) + tag
    skipped = head + cbor2.dumps([[200, "new"], [4, 7]])
    assert codec.decode_datagram(skipped, tag) == [Nack(7)]
    with pytest.raises(codec.DecodeError) as err:
        codec.decode_datagram(head + cbor2.dumps([[18, "new"], [4, 7]]), tag)
    assert err.value.reason == "unknown_type"


def test_an_envelope_outside_this_builds_range_is_dropped_as_version():
    """Byte 0 names the layout; one this build does not read is `version`."""
    tag = codec.cluster_tag("c")
    good = bytes((codec.ENVELOPE_MAX, 0)) + tag + b"\x80"
    assert codec.split_header(good, tag)[0] == 0
    with pytest.raises(codec.DecodeError) as err:
        codec.split_header(bytes((codec.ENVELOPE_MAX + 1, 0)) + tag + b"\x80", tag)
    assert err.value.reason == "version"
