"""Porcupine's own test histories give Porcupine's verdicts here."""

from __future__ import annotations

import pytest

from shoal.sim.linearizability import Operation, Verdict, check
from tests.unit.sim.porcupine import (
    DATA,
    ETCD_LINEARIZABLE,
    KvModel,
    KvOp,
    RegisterModel,
    RegisterOp,
    RegisterOut,
    jepsen_history,
    kv_history,
)

_JEPSEN = sorted(int(path.stem.split("_")[1]) for path in (DATA / "jepsen").glob("etcd_*.log"))


def _register(ops: list[tuple[int, bool, int, float, int, float]]) -> list[Operation]:
    """TestRegisterModel's rows: (client, is_get, value, call, output, return)."""
    return [
        Operation(c, call, ret, RegisterOp(0 if get else 1, value), RegisterOut(True, True, out))
        for c, get, value, call, out, ret in ops
    ]


def test_register_model_examples() -> None:
    """TestRegisterModel: a read may see a concurrent write; a read after a read of it may not
    see the value before it."""
    good = _register(
        [(0, False, 100, 0, 0, 100), (1, True, 0, 25, 100, 75), (2, True, 0, 30, 0, 60)]
    )
    bad = _register(
        [(0, False, 200, 0, 0, 100), (1, True, 0, 10, 200, 30), (2, True, 0, 40, 0, 90)]
    )
    zero = RegisterModel()
    assert check(_with_initial_zero(good), zero).verdict is Verdict.OK
    assert check(_with_initial_zero(bad), zero).verdict is Verdict.ILLEGAL


def test_zero_duration_operations() -> None:
    """TestZeroDuration: an operation whose call and return are one instant is concurrent with
    what overlaps that instant, closed intervals."""
    good = _register(
        [
            (0, False, 100, 0, 0, 100),
            (1, True, 0, 25, 100, 75),
            (2, True, 0, 30, 0, 30),
            (3, True, 0, 30, 0, 30),
        ]
    )
    bad = _register(
        [
            (0, False, 200, 0, 0, 100),
            (1, True, 0, 10, 200, 10),
            (2, True, 0, 10, 200, 10),
            (3, True, 0, 40, 0, 90),
        ]
    )
    assert check(_with_initial_zero(good), RegisterModel()).verdict is Verdict.OK
    assert check(_with_initial_zero(bad), RegisterModel()).verdict is Verdict.ILLEGAL


def _with_initial_zero(ops: list[Operation]) -> list[Operation]:
    """Porcupine's register starts at 0, ours absent: a write of 0 before everything."""
    start = Operation("init", -2.0, -1.0, RegisterOp(1, 0), RegisterOut())
    return [start, *ops]


@pytest.mark.parametrize("number", _JEPSEN)
def test_etcd_jepsen(number: int) -> None:
    """Each of Jepsen's etcd register histories is linearizable exactly when Porcupine says so."""
    result = check(jepsen_history(number), RegisterModel())
    expected = Verdict.OK if number in ETCD_LINEARIZABLE else Verdict.ILLEGAL
    assert result.verdict is expected, result.explanation


@pytest.mark.parametrize("name", ["c01-ok", "c01-bad", "c10-ok", "c10-bad"])
def test_kv(name: str) -> None:
    """Porcupine's key-value histories (get, put, append per key) get its verdicts."""
    result = check(kv_history(name), KvModel())
    expected = Verdict.OK if name.endswith("-ok") else Verdict.ILLEGAL
    assert result.verdict is expected, result.explanation
    assert result.partitions == len(
        {op.input.key for op in kv_history(name) if isinstance(op.input, KvOp)}
    )
