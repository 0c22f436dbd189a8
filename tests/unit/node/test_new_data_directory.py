"""A member back with a new data directory, as one agent tells it (issue 39):
the tracker of voter ids (node/wiped.py), the `voter-replaced` event as the
log, `/v1/events` and the history log carry it, and the Voter column of
`shoal members --detailed`."""

from __future__ import annotations

from shoal.daemon.cli.format import format_members
from shoal.daemon.cli.history import format_row
from shoal.election.events import VoterReplaced, election_fields
from shoal.election.voters import VoterConfig
from shoal.membership.member import MemberState, MemberView
from shoal.node.history import Observer, history_row
from shoal.node.wiped import WipedVoters
from shoal.storage.history import EVENTS, FIELD_NAMES

OLD, NEW, A, C = b"\x0b" * 16, b"\x0c" * 16, b"\x0a" * 16, b"\x0e" * 16
LINEAGE = b"\x01" * 16


def member(name: str, node_id: bytes) -> MemberView:
    return MemberView(name, node_id, ("10.0.0.2", 7946), (), 1, MemberState.ALIVE)


def config(version: int, **ids: bytes) -> VoterConfig:
    names = tuple(sorted(ids))
    return VoterConfig(LINEAGE, version, names, tuple(ids[n] for n in names))


def test_a_voter_back_with_a_new_data_directory_is_flagged_through_every_step():
    """Named with its old id (the `replaced` step), removed (a non-voter
    catching up), added back with its new id: the member under its new id
    is flagged with the old one all along; its neighbours never are."""
    seen = WipedVoters()
    seen.saw(config(1, a=A, b=OLD, c=C))
    assert seen.former_ids([member("a", A), member("b", OLD), member("c", C)]) == {}
    back = member("b", NEW)
    assert seen.former_ids([member("a", A), back]) == {"b": OLD}  # still named with OLD
    seen.saw(config(2, a=A, c=C))  # the old identity left the voter set
    assert seen.former_ids([back]) == {"b": OLD}
    seen.saw(config(3, a=A, b=NEW, c=C))  # a voter again, under its new id
    assert seen.former_ids([member("a", A), back, member("c", C)]) == {"b": OLD}


def test_a_stale_row_an_unknown_name_and_names_without_ids_are_not_flagged():
    seen = WipedVoters()
    seen.saw(VoterConfig(LINEAGE, 1, ("a", "b"), ()))  # below feature level 2: names only
    assert seen.former_ids([member("b", NEW)]) == {}
    seen.saw(config(2, a=A, b=OLD))
    seen.saw(config(3, a=A, b=NEW))
    # The view still holds the old row (not yet declared failed): it is not
    # the member that came back, and a name never a voter is nobody's.
    assert seen.former_ids([member("b", OLD), member("z", NEW)]) == {}
    third = b"\x0d" * 16  # its disk replaced a second time
    seen.saw(config(4, a=A))
    assert seen.former_ids([member("b", third)]) == {"b": NEW}


def test_the_event_says_what_happens_and_the_history_keeps_it():
    event = VoterReplaced("b", OLD, NEW)
    fields = election_fields(event)
    assert fields["type"] == "voter-replaced" and fields["node"] == "b"
    assert (fields["old_id"], fields["new_id"]) == (OLD.hex(), NEW.hex())
    assert fields["reason"] == "came back with a new data directory"
    assert str(fields["action"]).startswith("its old id leaves the voter set; it rejoins as a "
                                            "non-voter")  # fmt: skip
    row = history_row(Observer("prod", "a", A.hex()), 42, event)
    assert row is not None and list(row) == list(FIELD_NAMES)
    assert row["event"] == "voter-replaced" == fields["type"] and row["event"] in EVENTS
    assert (row["node"], row["node_id"], row["source"]) == ("b", NEW.hex(), OLD.hex())
    line = format_row(row)
    assert f"voter-replaced      b came back with a new data directory {NEW.hex()}" in line
    assert line.endswith(f"(was {OLD.hex()})")


def test_the_voter_column_notes_a_new_data_directory_with_the_old_id():
    rows = [{"name": n, "address": "10.0.0.1:7946", "status": "alive", "incarnation": 1,
             "tags": {}, "versions": None, "voter": v, "former_node_id": f}
            for n, v, f in (("a", "voter", None), ("b", "non-voter", OLD.hex()),
                            ("c", "voter", NEW.hex()), ("d", "replaced", None),
                            ("e", "non-voter", None))]  # fmt: skip
    header, *lines = format_members(rows, detailed=True).splitlines()
    voter_at = header.index("Voter")
    column = {line.split()[0]: line[voter_at:].strip() for line in lines}
    assert column == {
        "a": "voter",
        "b": "non-voter (new data directory, was 0b0b0b0b)",
        "c": "voter (new data directory, was 0c0c0c0c)",
        "d": "replaced (new data directory)",
        "e": "",
    }
    assert "Voter" not in format_members(rows).splitlines()[0]  # not without --detailed
