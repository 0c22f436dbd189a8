"""The metadata model's sessions (sim/sessionmodel.py) on small histories
written by hand: a session's end deletes the keys it owns, a write under an
ended session changes nothing, and a timed-out write under a session that
nobody saw is still what its end may have deleted."""

from shoal.sim.linearizability import Operation
from shoal.sim.metahistory import check_meta
from shoal.sim.metamodel import Get, Put, Read, Written
from shoal.sim.sessionmodel import End, NoSession


def op(client, call_at, return_at, input, output):
    return Operation(client, call_at, return_at, input, output)


def end(session, revision, at, keys=("k",)):
    return op("log", at, at + 0.1, End(session, revision, keys), Written(revision))


def test_a_read_after_the_end_that_still_sees_the_sessions_key_is_illegal():
    history = [
        op(1, 0.0, 1.0, Put("k", "v", session="S"), Written(3)),
        end("S", 5, 2.0),
        op(2, 3.0, 4.0, Get("k"), Read("v", 3)),
    ]
    verdict = check_meta(history)
    assert not verdict.ok
    assert "end('S') -> ok(5)" in verdict.explanation


def test_a_read_after_the_end_finds_the_key_absent():
    history = [
        op(1, 0.0, 1.0, Put("k", "v", session="S"), Written(3)),
        end("S", 5, 2.0),
        op(2, 3.0, 4.0, Get("k"), Read(None, 0)),
    ]
    assert check_meta(history).ok


def test_a_read_concurrent_with_the_end_may_see_either():
    for seen in (Read("v", 3), Read(None, 0)):
        history = [
            op(1, 0.0, 1.0, Put("k", "v", session="S"), Written(3)),
            end("S", 5, 2.0),
            op(2, 1.5, 4.0, Get("k"), seen),
        ]
        assert check_meta(history).ok, seen


def test_a_key_overwritten_without_the_session_survives_its_end():
    history = [
        op(1, 0.0, 1.0, Put("k", "v", session="S"), Written(3)),
        op(2, 1.0, 1.5, Put("k", "w"), Written(4)),
        end("S", 5, 2.0),
        op(2, 3.0, 4.0, Get("k"), Read("w", 4)),
    ]
    assert check_meta(history).ok
    vanished = [*history[:3], op(2, 3.0, 4.0, Get("k"), Read(None, 0))]
    assert not check_meta(vanished).ok


def test_a_key_of_a_live_session_does_not_vanish():
    history = [
        op(1, 0.0, 1.0, Put("k", "v", session="S"), Written(3)),
        op(2, 3.0, 4.0, Get("k"), Read(None, 0)),
    ]
    assert not check_meta(history).ok


def test_a_write_under_an_ended_session_is_refused():
    written = [
        op(1, 0.0, 1.0, Put("k", "v", session="S"), Written(3)),
        end("S", 5, 2.0),
        op(1, 3.0, 4.0, Put("k", "x", session="S"), Written(7)),
    ]
    assert not check_meta(written).ok
    refused = [*written[:2], op(1, 3.0, 4.0, Put("k", "x", session="S"), NoSession())]
    assert check_meta(refused).ok


def test_a_refusal_for_want_of_a_session_that_had_not_ended_is_illegal():
    history = [
        op(1, 0.0, 1.0, Put("k", "v", session="S"), Written(3)),
        op(1, 2.0, 3.0, Put("k", "x", session="S"), NoSession()),
        end("S", 5, 4.0),
    ]
    assert not check_meta(history).ok


def test_a_timed_out_write_under_a_session_nobody_saw_may_be_what_its_end_deleted():
    """The key held "v0" (no session); a put under S timed out and no read
    returned its value; S ended; the key is absent. Only the timed-out put
    explains it: `prepare` keeps it (for a key without sessions it drops
    such a put)."""
    history = [
        op(1, 0.0, 1.0, Put("k", "v0"), Written(2)),
        op(2, 1.0, None, Put("k", "v1", session="S"), None),
        end("S", 9, 3.0),
        op(1, 4.0, 5.0, Get("k"), Read(None, 0)),
    ]
    assert check_meta(history).ok
    without = [history[0], history[2], history[3]]
    assert not check_meta(without).ok
