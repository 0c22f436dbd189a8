"""Clients of the metadata log for tests with real agents: each call and
its return recorded on one monotonic timeline, for the simulator's
linearizability checker (sim/metahistory.py).

A recorder does not know how an agent is reached: it is given `request`
(agent, method, path, body) -> (HTTP status, JSON answer), which raises
OSError when no answer came (refused, reset, timed out). A write with no
answer, or answered 504, is recorded as indeterminate (output None); a read
with no answer changed nothing and is left out.
"""

from __future__ import annotations

import http.client
import json
import random
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from shoal.sim.linearizability import CheckResult, Operation, Verdict
from shoal.sim.metahistory import check_meta
from shoal.sim.metamodel import Conflict, Get, NotApplied, Put, Read, Written

Request = Callable[[Any, str, str, bytes | None], tuple[int, Any]]

KEYS = ["h0", "h1", "h2"]
Outcome = Written | Conflict | NotApplied | None  # None: unknown


def http_exchange(conn: http.client.HTTPConnection, method: str, path: str,
                  body: bytes | None) -> tuple[int, Any]:  # fmt: skip
    """One request on `conn` (closed after): (status, JSON answer or None).
    Any failure to get a whole answer is an OSError."""
    try:
        conn.request(method, path, body=body)
        resp = conn.getresponse()
        raw = resp.read()
        return resp.status, (json.loads(raw) if raw else None)
    except (http.client.HTTPException, ValueError) as exc:  # cut mid-answer
        raise OSError(f"no whole answer: {exc!r}") from exc
    finally:
        conn.close()


class History:
    """Client threads, each running `run_client` until `stop`, and their
    operations on one monotonic timeline."""

    def __init__(self) -> None:
        self.ops: list[Operation] = []
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.values = 0

    def run_client(self, client: int, agents: Sequence[Any], seed: int) -> None:
        raise NotImplementedError

    def start(self, clients: int, agents: Sequence[Any]) -> list[threading.Thread]:
        """`clients` threads through `agents`, client i seeded with i."""
        threads = [threading.Thread(target=self.run_client, args=(c, agents, c), daemon=True)
                   for c in range(clients)]  # fmt: skip
        for t in threads:
            t.start()
        return threads

    def next_value(self) -> int:
        """A number no other client's write uses."""
        with self.lock:
            self.values += 1
            return self.values

    def _add(self, op: Operation) -> None:
        with self.lock:
            self.ops.append(op)


class Recorder(History):
    """Client threads' puts and gets of single keys."""

    def __init__(self, request: Request, keys: Sequence[str] = KEYS, read_query: str = "") -> None:
        """`read_query` "?stale=1" makes every read one of the agent's own
        state (not linearizable: for a control that must fail the check)."""
        super().__init__()
        self.request = request
        self.keys = list(keys)
        self.read_query = read_query

    def run_client(self, client: int, agents: Sequence[Any], seed: int) -> None:
        """Puts (a third of them compare-and-set) and reads through agents
        chosen at random, until `stop`."""
        rng = random.Random(seed)
        last: dict[str, int] = {}
        while not self.stop.is_set():
            agent = rng.choice(agents)
            key = rng.choice(self.keys)
            roll = rng.random()
            if roll < 0.4:
                self.get(client, agent, key, last)
            else:
                cas = last.get(key, 0) if roll < 0.6 else None
                self.put(client, agent, key, cas, last)

    def get(self, client: int, agent: Any, key: str, last: dict[str, int]) -> Read | None:
        at = time.monotonic()
        try:
            status, body = self.request(agent, "GET", f"/v1/meta/{key}{self.read_query}", None)
        except OSError:
            return None  # a read that was not answered changed nothing
        done = time.monotonic()
        if status == 200:
            out = Read(body["value"], body["mod_revision"])
        elif status == 404:
            out = Read(None, 0)
        else:
            return None  # not served
        last[key] = out.mod_revision
        self._add(Operation(client, at, done, Get(key), out))
        return out

    def put(self, client: int, agent: Any, key: str, cas: int | None, last: dict[str, int],
            value: str | None = None) -> Outcome:  # fmt: skip
        if value is None:
            value = f"v{self.next_value()}"
        query = "" if cas is None else f"?cas={cas}"
        at = time.monotonic()
        try:
            status, body = self.request(agent, "PUT", f"/v1/meta/{key}{query}", value.encode())
        except OSError:
            self._add(Operation(client, at, None, Put(key, value, cas), None))  # unknown
            return None
        done = time.monotonic()
        out: Outcome
        if status == 200:
            out = Written(body["revision"])
            last[key] = body["revision"]
        elif status == 409:
            out = Conflict(body["current"])
            last[key] = body["current"]
        elif status == 503:
            out = NotApplied()
        else:
            out = None  # 504 (unknown), or anything else: not known
        self._add(Operation(client, at, None if out is None else done, Put(key, value, cas), out))
        return out

    def count(self, kind: type) -> int:
        with self.lock:
            return sum(1 for op in self.ops if isinstance(op.output, kind))


def outcomes(ops: Sequence[Operation]) -> dict[str, int]:
    """How many of each outcome: writes ok / conflict / not applied /
    unknown, and reads."""
    writes = [op for op in ops if isinstance(op.input, Put)]
    return {
        "ok": sum(1 for op in writes if isinstance(op.output, Written)),
        "conflict": sum(1 for op in writes if isinstance(op.output, Conflict)),
        "not applied": sum(1 for op in writes if isinstance(op.output, NotApplied)),
        "unknown": sum(1 for op in writes if op.output is None),
        "reads": sum(1 for op in ops if isinstance(op.output, Read)),
    }


def check_and_report(ops: Sequence[Operation], label: str, faults: Sequence[str] = (),
                     expect: Verdict = Verdict.OK) -> CheckResult:  # fmt: skip
    """Run the checker over `ops`, print the figures, assert its verdict."""
    started = time.monotonic()
    result = check_meta(list(ops), max_steps=5_000_000)
    took = time.monotonic() - started
    print(f"\n{label}: {len(ops)} operations {outcomes(ops)}; faults: {', '.join(faults) or '-'}; "
          f"checker: {result.verdict.name} ({result.steps} steps, {took:.1f} s)")  # fmt: skip
    assert result.verdict is expect, result.explanation or result.verdict.name
    return result
