"""Porcupine's test models and history parsers, transcribed (anishathalye/porcupine, MIT).

porcupine_test.go checks two families of recorded histories, kept in
data/porcupine/ beside this file:

- `jepsen/etcd_NNN.log`: Jepsen against etcd 2.0 (from ahorn/linearizability-
  checker), one register with read, write and CAS on the value, timed-out
  operations; `etcdModel` and `parseJepsenLog`.
- `kv/cNN-ok|bad.txt`: a key-value store with get, put and append, per-key
  partitions; `kvModel` and `parseKvLog`.

Porcupine reads them as events (no times): here the line number is the time,
and a call with no return is indeterminate (`return_at` None), which is
Porcupine's return at the end with an "unknown" output.
"""

from __future__ import annotations

import re
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from pathlib import Path

from shoal.sim.linearizability import Operation

DATA = Path(__file__).parent / "data" / "porcupine"

# The verdicts in porcupine_test.go (TestEtcdJepsenNNN): True = linearizable.
ETCD_LINEARIZABLE = frozenset(
    {2, 5, 7, 18, 25, 31, 38, 45, 48, 49, 51, 53, 56, 67, 75, 76, 80, 87, 92, 98, 100, 101, 102}
)


@dataclass(frozen=True, slots=True)
class RegisterOp:
    """etcdInput: op 0 read, 1 write, 2 cas(arg1 -> arg2)."""

    op: int
    arg1: int = 0
    arg2: int = 0


@dataclass(frozen=True, slots=True)
class RegisterOut:
    """etcdOutput, without `unknown` (a timeout is output None here)."""

    ok: bool = False
    exists: bool = False
    value: int = 0


class RegisterModel:
    """etcdModel with the state boxed in a 1-tuple, since None means illegal here."""

    def split(
        self, input: object, output: object | None
    ) -> Sequence[tuple[Hashable, object, object | None]]:
        return (("register", input, output),)

    def init(self) -> tuple[int | None]:
        return (None,)

    def step(
        self, state: tuple[int | None], input: object, output: object | None
    ) -> tuple[int | None] | None:
        assert isinstance(input, RegisterOp)
        assert output is None or isinstance(output, RegisterOut)
        (value,) = state
        if input.op == 0:
            legal = output is None or (
                (not output.exists and value is None) or (output.exists and value == output.value)
            )
            return state if legal else None
        if input.op == 1:
            return (input.arg1,)
        matches = input.arg1 == value
        if output is not None and output.ok != matches:
            return None
        return (input.arg2,) if matches else state

    def describe(self, input: object, output: object | None) -> str:
        return f"{input} -> {'unknown' if output is None else output}"

    def describe_state(self, state: tuple[int | None]) -> str:
        return repr(state[0])


@dataclass(frozen=True, slots=True)
class KvOp:
    """kvInput: op 0 get, 1 put, 2 append."""

    op: int
    key: str
    value: str = ""


class KvModel:
    """porcupine_test.go's kvModel: one partition per key, the state a string."""

    def split(
        self, input: object, output: object | None
    ) -> Sequence[tuple[Hashable, object, object | None]]:
        assert isinstance(input, KvOp)
        return ((input.key, input, output),)

    def init(self) -> str:
        return ""

    def step(self, state: str, input: object, output: object | None) -> str | None:
        assert isinstance(input, KvOp)
        if input.op == 0:
            return state if output is None or output == state else None
        if input.op == 1:
            return input.value
        return state + input.value

    def describe(self, input: object, output: object | None) -> str:
        return f"{input} -> {output!r}"

    def describe_state(self, state: str) -> str:
        return repr(state)


_JEPSEN = re.compile(r"^INFO\s+jepsen\.util\s+-\s+(\d+)\s+:(\w+)\s+:(\w+)\s+(.*)$")


def jepsen_history(number: int) -> list[Operation]:
    """parseJepsenLog: etcd_NNN.log as operations (time = line number).

    As there, only these lines close a call: an ok read, write or cas, a
    failed cas, a timed-out read (output None); any other outcome leaves the
    call open, indeterminate.
    """
    calls: dict[int, tuple[float, RegisterOp]] = {}
    ops: list[Operation] = []
    path = DATA / "jepsen" / f"etcd_{number:03d}.log"
    for at, line in enumerate(path.read_text().splitlines()):
        found = _JEPSEN.match(line)
        if found is None:
            continue
        process, kind, f, arg = int(found[1]), found[2], found[3], found[4].strip()
        if kind == "invoke":
            if process in calls:  # a new call before the last one closed
                open_at, open_input = calls[process]
                ops.append(Operation(process, open_at, None, open_input, None))
            calls[process] = (float(at), _register_input(f, arg))
            continue
        output = _register_output(kind, f, arg)
        if output is not False and process in calls:
            call_at, input = calls.pop(process)
            ops.append(Operation(process, call_at, float(at), input, output))
    ops += [Operation(p, at, None, input, None) for p, (at, input) in calls.items()]
    return ops


def _register_output(kind: str, f: str, arg: str) -> RegisterOut | None | bool:
    """The output a line closes its call with; None: timed out; False: leaves it open."""
    if kind == "ok" and f == "read":
        return RegisterOut(exists=arg != "nil", value=0 if arg == "nil" else int(arg))
    if kind == "ok" and f == "write":
        return RegisterOut()
    if kind in ("ok", "fail") and f == "cas":
        return RegisterOut(ok=kind == "ok")
    if kind == "fail" and f == "read" and arg == ":timed-out":
        return None
    return False


def _register_input(f: str, arg: str) -> RegisterOp:
    if f == "read":
        return RegisterOp(0)
    if f == "write":
        return RegisterOp(1, int(arg))
    start, end = arg.strip("[]").split()
    return RegisterOp(2, int(start), int(end))


_KV = re.compile(
    r'^\{:process (\d+), :type :(\w+), :f :(\w+), :key "(.*?)", :value (nil|"(.*)")\}$'
)


def kv_history(name: str) -> list[Operation]:
    """parseKvLog: kv/NAME.txt as operations (time = line number)."""
    calls: dict[int, tuple[float, KvOp]] = {}
    ops: list[Operation] = []
    lines = (DATA / "kv" / f"{name}.txt").read_text().splitlines()
    for at, line in enumerate(lines):
        found = _KV.match(line)
        if found is None:
            continue
        process, kind, f, key, value = int(found[1]), found[2], found[3], found[4], found[6]
        if kind == "invoke":
            op = {"get": 0, "put": 1, "append": 2}[f]
            calls[process] = (float(at), KvOp(op, key, value or ""))
            continue
        call_at, input = calls.pop(process)
        output = (value or "") if f == "get" else ""
        ops.append(Operation(process, call_at, float(at), input, output))
    # Porcupine returns the open calls at the end with an empty output.
    end = float(len(lines))
    ops += [Operation(p, at, end, input, "") for p, (at, input) in calls.items()]
    return ops
