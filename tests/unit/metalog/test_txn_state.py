"""Transactions in the metadata state machine: compares, one branch, one
revision, in order; and their form on the wire."""

from shoal.kernel import codec
from shoal.metalog.messages import Append, Entry, ProposeResult
from shoal.metalog.state import (
    CMP_EQUAL,
    CMP_GREATER,
    CMP_LESS,
    CMP_NOT_EQUAL,
    TARGET_CREATE,
    TARGET_MOD,
    TARGET_VALUE,
    TARGET_VERSION,
    Compare,
    KeyState,
    MetaDelete,
    MetaGet,
    MetaPut,
    MetaState,
    MetaTxn,
    TxnApplied,
)


def absent(key: bytes) -> Compare:
    return Compare(key, TARGET_CREATE, CMP_EQUAL, 0)


def test_a_txn_runs_its_success_branch_at_one_revision_when_its_compares_hold():
    state = MetaState()
    state.apply(1, MetaPut(b"count", b"1"))
    txn = MetaTxn(
        (absent(b"topic"), Compare(b"count", TARGET_MOD, CMP_EQUAL, 1)),
        (MetaPut(b"topic", b"t"), MetaPut(b"count", b"2"), MetaGet(b"count")),
        (MetaGet(b"topic"),),
    )
    result = state.apply(2, txn)
    assert result == TxnApplied(2, True, (None, None, KeyState(b"2", 1, 2, 2)))
    assert state.get(b"topic") == KeyState(b"t", 2, 2, 1)
    assert state.get(b"count") == KeyState(b"2", 1, 2, 2)


def test_a_txn_whose_compare_fails_runs_only_its_failure_branch():
    state = MetaState()
    state.apply(1, MetaPut(b"topic", b"t"))
    txn = MetaTxn(
        (absent(b"topic"),),
        (MetaPut(b"topic", b"u"), MetaDelete(b"x")),
        (MetaGet(b"topic"), MetaGet(b"nothing"), MetaDelete(b"topic")),
    )
    assert state.apply(2, txn) == TxnApplied(
        2, False, (KeyState(b"t", 1, 1, 1), None, KeyState(b"", 1, 1, 1))
    )
    assert state.get(b"topic") is None and state.revision == 2


def test_compares_follow_etcds_rules_for_each_target():
    state = MetaState()
    state.apply(1, MetaPut(b"k", b"b"))
    state.apply(2, MetaPut(b"k", b"c"))
    cases = [
        (Compare(b"k", TARGET_VALUE, CMP_EQUAL, value=b"c"), True),
        (Compare(b"k", TARGET_VALUE, CMP_LESS, value=b"d"), True),
        (Compare(b"k", TARGET_VALUE, CMP_GREATER, value=b"d"), False),
        (Compare(b"k", TARGET_VERSION, CMP_EQUAL, 2), True),
        (Compare(b"k", TARGET_CREATE, CMP_NOT_EQUAL, 1), False),
        (Compare(b"k", TARGET_MOD, CMP_GREATER, 1), True),
        (Compare(b"gone", TARGET_VALUE, CMP_NOT_EQUAL, value=b"x"), False),  # absent: no value
        (Compare(b"gone", TARGET_VERSION, CMP_LESS, 1), True),
    ]
    for index, (compare, held) in enumerate(cases, start=3):
        result = state.apply(index, MetaTxn((compare,), (MetaGet(b"k"),)))
        assert isinstance(result, TxnApplied) and result.succeeded is held, compare


def test_a_txn_and_its_result_cross_the_wire_unchanged():
    txn = MetaTxn(
        (Compare(b"a", TARGET_VALUE, CMP_NOT_EQUAL, value=b"\xff"),),
        (MetaPut(b"a", b"1"), MetaDelete(b"b")),
        (MetaGet(b"a"),),
    )
    entry = Entry(3, 7, txn, "n1", 42)
    result = ProposeResult(42, 0, 7, TxnApplied(7, False, (KeyState(b"v", 1, 2, 3), None)))
    append = Append(3, "n1", 6, 3, (entry,), 5)
    assert codec.decode_payload(codec.encode_payload((append, result))) == [append, result]


def test_a_malformed_or_oversized_txn_on_the_wire_is_refused():
    """Remote input: a transaction op of another shape, a compare of an
    unknown target, or more than 64 parts is a decode error, never a crash."""
    from shoal.kernel.codec import DecodeError
    from shoal.metalog.messages import _op

    good = [3, [[b"k", 3, 0, 1, b""]], [[1, b"k", b"v"]], [[3, b"k"]]]
    assert isinstance(_op(good), MetaTxn)
    bad_ones = [
        [3, [[b"k", 4, 0, 1, b""]], [], []],  # no such target
        [3, [[b"k", True, 0, 1, b""]], [], []],
        [3, [], [[True, b"k", b"v"]], []],
        [3, [], [[1, b"", b"v"]], []],  # an empty key
        [3, [], [[3, b"k"]] * 65, []],
        [3, [], "x", []],
    ]
    for bad in bad_ones:
        try:
            _op(bad)
        except DecodeError:
            continue
        raise AssertionError(f"accepted {bad!r}")
