"""Key operations' pure rules (services/keyrounds.py): the version rule and
the round's count."""

import pytest

from shoal.kernel.sealing import KeyCommand, KeyReply, Keyring, KeyringError, format_key
from shoal.kernel.versions import THIS_BUILD
from shoal.membership.member import MemberState, MemberView
from shoal.services.keyrounds import NO_ANSWER, KeyRound, change, command_for, refusal, restore

K1, K2, K3 = b"\x01" * 32, b"\x02" * 32, b"\x03" * 32


def member(name: str, state: MemberState = MemberState.ALIVE) -> MemberView:
    return MemberView(name, name.encode() * 4, ("10.0.0.1", 1), {}, 1, state, THIS_BUILD)


def test_a_change_is_applied_once_and_a_copy_or_an_older_one_changes_nothing():
    ring = Keyring([K1], "c", version=3)
    command = command_for("install", K2, ring)
    assert command.version == 4 and refusal(ring, command) is None
    change(ring, command)
    assert ring.keys == (K1, K2) and ring.version == 4
    again = refusal(ring, command)
    assert again is not None and not again.ok and "version 4" in again.error
    assert refusal(ring, KeyCommand("remove", K2, 2)) is not None
    assert ring.keys == (K1, K2)


def test_list_and_a_ring_without_encryption_change_nothing():
    ring = Keyring([K1], "c")
    listed = refusal(ring, command_for("list", None, ring))
    assert listed == KeyReply(True, "", (K1,), 0)
    off = refusal(None, KeyCommand("install", K2, 1))
    assert off is not None and not off.ok and "encryption is off" in off.error


def test_an_impossible_change_raises_and_a_failed_write_is_undone():
    ring = Keyring([K1, K2], "c", version=1)
    with pytest.raises(KeyringError):
        change(ring, KeyCommand("remove", K1, 2))  # the primary
    change(ring, KeyCommand("use", K2, 2))
    restore(ring, (K1, K2), 1)  # the write failed
    assert ring.keys == (K1, K2) and ring.version == 1


def test_a_round_names_who_did_not_answer_and_counts_each_member_once():
    ring = Keyring([K1], "c")
    round_ = KeyRound(command_for("install", K2, ring), "me")
    round_.answer("me", KeyReply(True, "", (K1, K2), 1))
    targets = round_.targets([member("me"), member("b"), member("c", MemberState.SUSPECT),
                              member("d", MemberState.DEAD)])  # fmt: skip
    assert [name for name, _ in targets] == ["b", "c"]
    round_.answer("b", KeyReply(True, "", (K1, K2), 1))
    round_.answer("b", KeyReply(False, "late copy", (), 0))  # ignored
    outcome = round_.close()
    assert (outcome.members, outcome.acks) == (3, 2)
    assert outcome.errors == {"c": NO_ANSWER}
    assert outcome.keys[format_key(K2)] == 2 and outcome.primary[format_key(K1)] == 2


def test_a_member_ahead_moves_the_issuers_version_up():
    ring = Keyring([K1], "c", version=1)
    round_ = KeyRound(command_for("install", K2, ring), "me")
    round_.answer("b", KeyReply(False, "ahead", (K1,), 7))
    round_.close()
    round_.newest(ring)
    assert ring.version == 7 and command_for("use", K1, ring).version == 8
