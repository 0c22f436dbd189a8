"""`shoal recover`'s decision (node/recovery.py) and the recovery count in
the voter configurations' order, on the wire and on disk (issue 39)."""

import base64

import cbor2
import msgspec
import pytest

from shoal.daemon.disk.datadir import DataDir
from shoal.election.messages import ControllerNotice, LeaseRequest
from shoal.election.voters import VoterConfig
from shoal.kernel import codec
from shoal.metalog.messages import Entry, entry_from_wire, entry_to_wire
from shoal.metalog.state import VoterSet
from shoal.node import recovery
from shoal.node.recovery import RecoveryRefused, Survivor, audit_entry, from_token, plan, to_token

LINEAGE = b"L" * 8
NAMES = ("a", "b", "c", "d", "e")
IDS = {n: bytes([i + 1]) * 16 for i, n in enumerate(NAMES)}
OLD = VoterConfig(LINEAGE, 7, NAMES, tuple(IDS[n] for n in NAMES))


def survivor(name: str, last: tuple[int, int], granted: int = 0, snap: int = 0,
             config: VoterConfig | None = OLD) -> Survivor:  # fmt: skip
    return Survivor(name, IDS[name], granted, config, last[0], last[1], snap)


# -- the order ---------------------------------------------------------------------


def test_a_recovered_configuration_supersedes_every_earlier_one():
    """Two voters, a version below a removed voter's, another lineage: the
    recovery count comes first (election/voters.py, "Recovery")."""
    recovered = VoterConfig(LINEAGE, 8, ("a", "b"), (IDS["a"], IDS["b"]), 1)
    later_change = VoterConfig(LINEAGE, 9, NAMES, OLD.ids)  # one the survivors never saw
    bigger = VoterConfig(b"Z" * 8, 50, NAMES)
    for old in (OLD, later_change, bigger):
        assert recovered.supersedes(old) and not old.supersedes(recovered)
    # Every change after a recovery carries it on.
    grown = recovered.with_voter("c", IDS["c"])
    assert grown.recovery == 1 and grown.supersedes(recovered)
    assert grown.without_voter("c").recovery == 1 and recovered.without_ids().recovery == 1


def test_a_removed_voter_with_its_old_configuration_cannot_count():
    """Its configuration is superseded, and in the recovered one it is no voter."""
    recovered = VoterConfig(LINEAGE, 8, ("a", "b"), (IDS["a"], IDS["b"]), 1)
    assert not recovered.identifies("c", IDS["c"])
    assert not recovered.has_quorum(["a", "c", "d", "e"]) and recovered.has_quorum(["a", "b"])


# -- the wire and the disk ---------------------------------------------------------


RECOVERED = VoterConfig(LINEAGE, 8, ("a", "b"), (IDS["a"], IDS["b"]), 3)


@pytest.mark.parametrize("config", [RECOVERED, VoterConfig(LINEAGE, 8, ("a", "b"), (), 2)])
def test_the_recovery_count_crosses_the_wire(config):
    for msg in (ControllerNotice(9, "a", 1, 100, config, 2),
                LeaseRequest(7, 9, "a", config, 3, 9, IDS["a"])):  # fmt: skip
        assert codec.decode_payload(codec.encode_payload([msg])) == [msg]


def test_a_configuration_without_recovery_keeps_its_shape_on_the_wire():
    notice = ControllerNotice(9, "a", 1, 100, OLD, 2)
    assert len(cbor2.loads(codec.encode_payload([notice]))[0][5]) == 4


def test_the_audit_record_crosses_the_wire_and_a_plain_change_keeps_its_shape():
    audit = Entry(1001, 41, VoterSet(LINEAGE, 8, ("a", "b"), (IDS["a"], IDS["b"]), 1))
    assert entry_from_wire(entry_to_wire(audit)) == audit
    plain = Entry(3, 40, VoterSet(LINEAGE, 8, ("a", "b"), (IDS["a"], IDS["b"])))
    assert entry_from_wire(entry_to_wire(plain)) == plain
    assert len(entry_to_wire(plain)[2]) == 5  # the shape before recoveries


def test_the_recovery_count_is_kept_in_the_data_directory(tmp_path):
    data = DataDir(tmp_path, 4, "prod")
    data.save_election(1001, RECOVERED)
    data.close()
    again = DataDir(tmp_path, 4, "prod")
    assert again.load_election() == (1001, RECOVERED)
    again.save_election(1002, VoterConfig(LINEAGE, 9, ("a",), (), 1))
    again.close()
    third = DataDir(tmp_path, 4, "prod")
    assert third.load_election() == (1002, VoterConfig(LINEAGE, 9, ("a",), (), 1))
    third.close()


# -- the decision ------------------------------------------------------------------


def test_the_base_is_the_survivor_whose_log_is_most_up_to_date():
    """The last entry's epoch first (Raft's order), then its index: a longer
    log of an older epoch is not the base."""
    a = survivor("a", (5, 130), granted=6, snap=100)
    b = survivor("b", (6, 120), granted=9, snap=90)
    d = plan(["a", "b"], [a, b])
    assert d.base == "b"
    assert d.epoch == 9 + recovery.EPOCH_STEP  # above every epoch granted or logged
    assert d.config == VoterConfig(LINEAGE, 8, ("a", "b"), (IDS["a"], IDS["b"]), 1)
    assert d.audit_index == 121 and d.committed == 100
    assert audit_entry(d) == Entry(d.epoch, 121, VoterSet(LINEAGE, 8, ("a", "b"),
                                                          (IDS["a"], IDS["b"]), 1))  # fmt: skip


def test_every_survivor_decides_alike_whatever_the_order_given():
    a, b = survivor("a", (6, 120), snap=100), survivor("b", (6, 120), snap=110)
    assert plan(["a", "b"], [a, b]) == plan(["b", "a"], [b, a])
    assert plan(["a", "b"], [a, b]).base == "b"  # a tie: the higher snapshot


def test_a_second_recovery_goes_above_the_first():
    first = VoterConfig(LINEAGE, 8, ("a", "b", "c"), (IDS["a"], IDS["b"], IDS["c"]), 1)
    d = plan(["a"], [survivor("a", (1001, 200), granted=1004, config=first)])
    assert d.config.recovery == 2 and d.config.version == 9 and d.epoch == 2004
    assert d.config.supersedes(first)


@pytest.mark.parametrize("survivors, summaries, why", [
    (["a", "b"], [survivor("a", (1, 1))], "one summary for each survivor"),
    (["a"], [survivor("a", (1, 1)), survivor("b", (1, 1))], "one summary for each survivor"),
    (["a", "b"], [survivor("a", (1, 1)), survivor("b", (1, 1), config=None)],
     "no voter configuration"),
    (["a", "b"], [survivor("a", (1, 1)),
                  survivor("b", (1, 1), config=VoterConfig(b"O" * 8, 7, NAMES))],
     "different clusters"),
    (["a", "b", "c"], [survivor(n, (1, 1)) for n in "abc"], "a majority of the voters"),
])  # fmt: skip
def test_a_recovery_that_cannot_be_decided_is_refused(survivors, summaries, why):
    with pytest.raises(RecoveryRefused, match=why):
        plan(survivors, summaries)


def test_a_summary_travels_as_one_word():
    s = survivor("a", (6, 120), granted=9, snap=100)
    word = to_token(s)
    assert word.isprintable() and " " not in word and "," not in word
    assert from_token(word) == s
    one_id_short = msgspec.msgpack.encode({
        "name": "a", "node_id": IDS["a"], "granted_epoch": 1, "last_epoch": 1, "last_index": 1,
        "snapshot_index": 0,
        "config": {"lineage": LINEAGE, "version": 1, "voters": ["a", "b"], "ids": [IDS["a"]]},
    })  # fmt: skip
    negative = msgspec.msgpack.encode(msgspec.structs.replace(s, last_index=-1))
    forged = [base64.urlsafe_b64encode(raw).decode() for raw in (one_id_short, negative)]
    for bad in ("", "not-a-summary", word[:-6], *forged):
        with pytest.raises(RecoveryRefused, match="is not a summary"):
            from_token(bad)
