"""Sealed packets open only in the right cluster, under an installed key,
once, at the receiver and in the run they were bound to."""

import os

import pytest

from shoal.kernel import codec
from shoal.kernel.sealing import (
    OVERHEAD_BYTES,
    UNBOUND,
    WINDOW_PACKETS,
    Envelope,
    KeyCommand,
    KeyReply,
    Keyring,
    KeyringError,
    ReplayWindows,
    binding,
    format_key,
    next_run,
    parse_key,
)
from shoal.membership.messages import Ack

K1, K2, K3 = (bytes([i]) * 32 for i in (1, 2, 3))
HEAD = bytes((codec.PROTOCOL_VERSION, 0)) + codec.cluster_tag("c")
A_TAG, B_TAG, C_TAG = b"aaaaaaaa", b"bbbbbbbb", b"cccccccc"
ENV = Envelope(A_TAG, 7, binding(B_TAG, 5), 1)


def sealed(ring: Keyring, payload: bytes = b"\x81\x81\x03", env: Envelope = ENV) -> bytes:
    return ring.seal(HEAD, payload, env, os.urandom(12))


def test_a_sealed_packet_opens_with_the_same_key_and_costs_the_stated_overhead():
    """Round trip: the payload and envelope come back; overhead is 60 bytes."""
    ring = Keyring([K1], "c")
    data = sealed(ring, b"hello")
    assert len(data) == len(HEAD) + 5 + OVERHEAD_BYTES == len(HEAD) + 5 + 60
    assert data[1] & codec.FLAG_ENCRYPTED
    assert ring.open(data) == (ENV, b"hello")


@pytest.mark.parametrize("other", [Keyring([K2], "c"), Keyring([K1], "another cluster")])
def test_another_key_or_cluster_name_does_not_authenticate(other):
    """A wrong key, or the right key of a cluster with another name, is `auth`."""
    with pytest.raises(codec.DecodeError) as info:
        other.open(sealed(Keyring([K1], "c")))
    assert info.value.reason == "auth"


def test_any_flipped_bit_is_refused():
    """Tampering with the header, envelope, nonce or ciphertext fails authentication."""
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
    assert new.open(sealed(old))[1] and old.open(sealed(Keyring([K1], "c")))[1]
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


def at_b(sender: bytes = A_TAG, run: int = 7, counter: int = 1, to: bytes | None = None):
    return Envelope(sender, run, binding(B_TAG, 5) if to is None else to, counter)


def test_a_copy_is_refused_by_its_receiver_by_another_member_and_after_a_restart():
    """The three replays of issue 27: the same receiver again, another
    member, the same member in its next run."""
    b = ReplayWindows(B_TAG, 5)
    b.check(at_b(counter=1))
    with pytest.raises(codec.DecodeError, match="replay"):
        b.check(at_b(counter=1))
    c = ReplayWindows(C_TAG, 5)  # another member, same run number even
    with pytest.raises(codec.DecodeError) as info:
        c.check(at_b(counter=1))
    assert info.value.reason == "misdirected"
    b_restarted = ReplayWindows(B_TAG, 6)  # nothing remembered, yet nothing accepted
    with pytest.raises(codec.DecodeError) as info:
        b_restarted.check(at_b(counter=1))
    assert info.value.reason == "misdirected"


def test_a_nodes_own_packet_sent_back_is_refused_whatever_its_run():
    """An unbound hello of ours from an earlier run, reflected to us after a
    restart, is no news from a peer."""
    b = ReplayWindows(B_TAG, 6)
    with pytest.raises(codec.DecodeError) as info:
        b.check(Envelope(B_TAG, 5, UNBOUND, 1))
    assert info.value.reason == "reflected"


def test_counters_may_arrive_out_of_order_within_the_window_once_each():
    b = ReplayWindows(B_TAG, 5)
    for counter in (10, 3, 9, 1, WINDOW_PACKETS + 2):
        b.check(at_b(counter=counter))
    for counter in (3, 10, WINDOW_PACKETS + 2):
        with pytest.raises(codec.DecodeError, match="seen already"):
            b.check(at_b(counter=counter))
    b.check(at_b(counter=4))  # unseen, just inside the window
    with pytest.raises(codec.DecodeError, match="older than the replay window"):
        b.check(at_b(counter=1))  # unseen but fell out of it


def test_a_newer_run_of_a_sender_starts_afresh_and_its_older_runs_are_refused():
    b = ReplayWindows(B_TAG, 5)
    b.check(at_b(run=7, counter=100))
    b.check(at_b(run=8, counter=1))  # the sender restarted: counts from 1 again
    assert b.run_of(A_TAG) == 8 and b.binding_of(A_TAG) == binding(A_TAG, 8)
    with pytest.raises(codec.DecodeError) as info:
        b.check(at_b(run=7, counter=101))
    assert info.value.reason == "stale_run"


def test_unbound_packets_pass_the_window_and_teach_the_run_and_garbage_is_not_remembered():
    b = ReplayWindows(B_TAG, 5)
    assert b.binding_of(A_TAG) is None
    b.check(at_b(to=UNBOUND))
    assert b.binding_of(A_TAG) == binding(A_TAG, 7)
    with pytest.raises(codec.DecodeError, match="replay"):
        b.check(at_b(to=UNBOUND))


def test_the_sender_table_is_bounded():
    b = ReplayWindows(B_TAG, 5, max_senders=100)
    for i in range(300):
        b.check(at_b(sender=i.to_bytes(8, "big")))
    assert len(b) == 100 and b.evicted == 200


def test_a_run_number_grows_even_when_the_clock_is_behind():
    assert next_run(0, 1_000) == 1_000
    assert next_run(5_000, 1_000) == 5_001  # a clock behind the last run


def test_key_commands_round_trip_and_refuse_bad_shapes():
    """The keyring messages decode to what was sent; a bad key size is `shape`."""
    tag = codec.cluster_tag("c")
    msgs = [KeyCommand("install", K1, 3), KeyCommand("list", None, 0),
            KeyReply(True, "", (K1, K2), 3)]  # fmt: skip
    assert codec.decode_datagram(codec.encode_datagram(msgs, tag), tag) == msgs
    for bad in ([60, "install", b"short", 1], [60, "list", K1, 0], [60, "format", None, 0],
                [61, True, "", [K1] * 17, 0], [60, "install", K1, -1]):  # fmt: skip
        import cbor2

        with pytest.raises(codec.DecodeError):
            codec.decode_datagram(bytes([1, 0]) + tag + cbor2.dumps([bad]), tag)
    assert codec.decode_datagram(codec.encode_datagram([Ack(1)], tag), tag) == [Ack(1)]
