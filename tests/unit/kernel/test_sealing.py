"""Sealed packets open only in the right cluster, under an installed key,
once, and within the replay window."""

import os

import pytest

from shoal.kernel import codec
from shoal.kernel.sealing import (
    OVERHEAD_BYTES,
    KeyCommand,
    KeyReply,
    Keyring,
    KeyringError,
    ReplayGuard,
    format_key,
    parse_key,
)
from shoal.membership.messages import Ack

K1, K2, K3 = (bytes([i]) * 32 for i in (1, 2, 3))
HEAD = bytes((codec.PROTOCOL_VERSION, 0)) + codec.cluster_tag("c")
NOW = 1_800_000_000_000


def sealed(ring: Keyring, payload: bytes = b"\x81\x81\x03", stamp: int = NOW) -> bytes:
    return ring.seal(HEAD, payload, stamp, os.urandom(12))


def test_a_sealed_packet_opens_with_the_same_key_and_costs_the_stated_overhead():
    """Round trip: the payload and stamp come back; overhead is 36 bytes."""
    ring = Keyring([K1], "c")
    data = sealed(ring, b"hello")
    assert len(data) == len(HEAD) + 5 + OVERHEAD_BYTES
    assert data[1] & codec.FLAG_ENCRYPTED
    stamp, _, payload = ring.open(data)
    assert (stamp, payload) == (NOW, b"hello")


@pytest.mark.parametrize("other", [Keyring([K2], "c"), Keyring([K1], "another cluster")])
def test_another_key_or_cluster_name_does_not_authenticate(other):
    """A wrong key, or the right key of a cluster with another name, is `auth`."""
    with pytest.raises(codec.DecodeError) as info:
        other.open(sealed(Keyring([K1], "c")))
    assert info.value.reason == "auth"


def test_any_flipped_bit_or_changed_stamp_is_refused():
    """Tampering with the header, stamp, nonce or ciphertext fails authentication."""
    ring = Keyring([K1], "c")
    data = sealed(ring)
    for i in range(len(data)):
        if i < 6:
            continue  # the header is checked (and bound) before and inside
        bad = bytearray(data)
        bad[i] ^= 0x01
        with pytest.raises(codec.DecodeError):
            ring.open(bytes(bad))


def test_rotation_install_use_remove_keeps_old_and_new_senders_readable():
    """During a rotation every installed key opens; only the primary seals."""
    old, new = Keyring([K1], "c"), Keyring([K1], "c")
    new.install(K2)
    new.use(K2)
    assert new.primary == K2 and new.keys == (K2, K1)
    assert new.open(sealed(old))[2] and old.open(sealed(Keyring([K1], "c")))[2]
    with pytest.raises(codec.DecodeError):
        old.open(sealed(new))  # the old ring has not installed K2
    with pytest.raises(KeyringError, match="primary"):
        new.remove(K2)
    with pytest.raises(KeyringError, match="not installed"):
        new.use(K3)
    new.remove(K1)
    assert new.keys == (K2,)


def test_keys_parse_only_as_32_bytes_of_base64():
    """`shoal keys` and the config accept exactly what `keys generate` prints."""
    assert parse_key(format_key(K1)) == K1
    for bad in ("", "not base64!", format_key(b"short")):
        with pytest.raises(KeyringError):
            parse_key(bad)


def test_the_replay_guard_refuses_stale_stamps_and_repeated_nonces():
    """A captured packet replayed later, or twice now, is refused."""
    guard = ReplayGuard(window_ms=30_000)
    guard.check(NOW, b"n" * 12, NOW)
    with pytest.raises(codec.DecodeError, match="replay"):
        guard.check(NOW, b"n" * 12, NOW + 1000)
    with pytest.raises(codec.DecodeError, match="stale") as info:
        guard.check(NOW - 31_000, b"m" * 12, NOW)
    assert "-31.0 s" in str(info.value)
    with pytest.raises(codec.DecodeError, match="stale"):
        guard.check(NOW + 31_000, b"m" * 12, NOW)  # a clock far ahead, too


def test_the_replay_guard_forgets_what_left_the_window_and_stays_bounded():
    """Memory holds at most the window's worth of nonces, or the bound."""
    guard = ReplayGuard(window_ms=1000, max_entries=100)
    for i in range(50):
        guard.check(NOW + i, i.to_bytes(12, "big"), NOW + i)
    guard.check(NOW + 5000, b"x" * 12, NOW + 5000)
    assert len(guard) == 1
    for i in range(500):
        guard.check(NOW + 5000, (1000 + i).to_bytes(12, "big"), NOW + 5000)
    assert len(guard) == 100 and guard.evicted > 0


def test_key_commands_round_trip_and_refuse_bad_shapes():
    """The keyring messages decode to what was sent; a bad key size is `shape`."""
    tag = codec.cluster_tag("c")
    msgs = [KeyCommand("install", K1), KeyCommand("list", None), KeyReply(True, "", (K1, K2))]
    assert codec.decode_datagram(codec.encode_datagram(msgs, tag), tag) == msgs
    for bad in ([60, "install", b"short"], [60, "list", K1], [60, "format", None],
                [61, True, "", [K1] * 17]):  # fmt: skip
        import cbor2

        with pytest.raises(codec.DecodeError):
            codec.decode_datagram(bytes([1, 0]) + tag + cbor2.dumps([bad]), tag)
    assert codec.decode_datagram(codec.encode_datagram([Ack(1)], tag), tag) == [Ack(1)]
