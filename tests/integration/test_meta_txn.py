"""Transactions of the metadata log on real agents: `POST /v1/meta/txn`,
`client.meta.txn` and `shoal meta txn`, as a user of them sees them."""

import asyncio
import json
import random
import signal
import threading
import time
from collections.abc import Sequence
from typing import Any

import pytest

from shoal.client import (
    AsyncClient,
    Compare,
    NotApplied,
    TooLarge,
    TxnDelete,
    TxnGet,
    TxnPut,
    TxnResult,
    Unknown,
)
from shoal.sim import metamodel
from shoal.sim.linearizability import Operation
from shoal.sim.metahistory import check_meta
from shoal.sim.metamodel import Cmp, Get, Put, Read, Txn, TxnDone
from tests.conftest import poll_until
from tests.integration.agents import api_request
from tests.integration.metaagents import (
    META,
    client_of,
    controller_name,
    crash_the_controller,
    meta_cluster,
    shoal_cli,
    three,
    writable,
)
from tests.integration.metaclients import History


def create_topic(client, name: str) -> TxnResult:
    """A broker's step: create the topic if absent and bump the count, at once."""
    count = client.meta.get("topic-count")
    return client.meta.txn(
        compare=[Compare.absent(f"topics/{name}"),
                 Compare("topic-count", "mod_revision", "=", count.mod_revision)],
        success=[TxnPut(f"topics/{name}", "partitions=3"),
                 TxnPut("topic-count", str(int(count.value) + 1))],
        failure=[TxnGet(f"topics/{name}"), TxnGet("topic-count")])  # fmt: skip


def test_of_two_brokers_creating_one_topic_one_succeeds_and_the_count_moves_once(agents):
    """Two agents run the same create-if-absent-and-count transaction at
    once: exactly one succeeds, both its puts at one revision; the other
    ran its failure branch and read what the winner wrote."""
    started = three(agents)
    client_of(started[0]).meta.put("topic-count", "0")
    answers: list[TxnResult] = []

    def broker(agent) -> None:
        answers.append(create_topic(client_of(agent), "orders"))

    threads = [threading.Thread(target=broker, args=(started[i],)) for i in (1, 2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    won = [a for a in answers if a.succeeded]
    lost = [a for a in answers if not a.succeeded]
    assert len(won) == 1 and len(lost) == 1, answers
    assert [r.op for r in won[0].results] == ["put", "put"]
    assert all(r.revision == won[0].revision for r in won[0].results)
    topic, count = lost[0].results  # applied after the winner's: it reads what that wrote
    assert topic.found and topic.value == b"partitions=3" and topic.mod_revision == won[0].revision
    assert count.value == b"1" and count.version == 2
    for agent in started:
        got = client_of(agent).meta.get("topic-count")
        assert got.value == b"1" and got.mod_revision == won[0].revision
        assert client_of(agent).meta.get("topics/orders").create_revision == won[0].revision
    with client_of(started[0]).meta.watch("topic", from_revision=won[0].revision) as watch:
        changes = [next(watch), next(watch)]  # a watch sees both puts, at the one revision
    assert {(e.type, e.key, e.revision) for e in changes} == {
        ("put", "topics/orders", won[0].revision),
        ("put", "topic-count", won[0].revision),
    }
    again = create_topic(client_of(started[0]), "orders")
    assert not again.succeeded and again.results[0].found and again.results[1].value == b"1"


def test_gets_see_the_branchs_writes_and_values_cross_as_base64(agents):
    """Operations run in order: a get after a put in the same transaction
    reads it; a delete says whether there was something; a value that is
    not UTF-8, and one larger than a datagram, come back whole through an
    agent that is not the controller (asyncio client too)."""
    started = three(agents)
    blob = bytes(range(256)) * 800
    client_of(started[0]).meta.put("blobs/big", blob)
    client_of(started[0]).meta.put("old", "x")
    follower = next(a for a in started if a.name != controller_name(started[0]))
    done = client_of(follower).meta.txn(
        success=[TxnPut("bin", b"\xff\x00"), TxnGet("bin"), TxnDelete("old"),
                 TxnDelete("nothing"), TxnGet("blobs/big")])  # fmt: skip
    assert done.succeeded
    put, got, first, second, big = done.results
    assert got.found and got.value == b"\xff\x00" and got.mod_revision == done.revision
    assert (first.deleted, second.deleted) == (1, 0)
    assert big.value == blob and put.revision == done.revision

    async def with_asyncio() -> TxnResult:
        client = AsyncClient(f"{follower.ip}:7947")
        return await client.meta.txn(
            compare=[Compare("bin", "version", ">", 1)],
            success=[TxnPut("never", "x")],
            failure=[TxnGet("bin")],
        )

    failed = asyncio.run(asyncio.wait_for(with_asyncio(), 30))
    assert not failed.succeeded and failed.results[0].value == b"\xff\x00"
    assert failed.results[0].version == 1 and failed.revision > done.revision


def test_the_cli_runs_a_document_and_says_which_branch_ran(agents, tmp_path):
    """`shoal meta txn FILE|-`: the answer as JSON, exit 0 on success and 1
    when the failure branch ran; a bad document is one line and exit 2."""
    started = three(agents)
    api = f"{started[1].ip}:7947"
    doc = {"compare": [{"key": "cfg/mode", "target": "absent"}],
           "success": [{"op": "put", "key": "cfg/mode", "value": "fast"}],
           "failure": [{"op": "get", "key": "cfg/mode"}]}  # fmt: skip
    path = tmp_path / "txn.json"
    path.write_text(json.dumps(doc))
    first = shoal_cli("meta", "txn", "--api", api, str(path))
    assert first.returncode == 0, first.stderr
    shown = json.loads(first.stdout)
    assert shown["succeeded"] is True and shown["results"][0]["op"] == "put"
    second = shoal_cli("meta", "txn", "--api", api, "-", stdin=json.dumps(doc).encode())
    assert second.returncode == 1 and b"failure branch ran" in second.stderr
    assert json.loads(second.stdout)["results"][0]["value"] == "fast"
    bad = shoal_cli("meta", "txn", "--api", api, "-", stdin=b'{"success": [{"op": "put"}]}')
    assert bad.returncode == 2 and len(bad.stderr.splitlines()) == 1, bad.stderr
    assert b"key" in bad.stderr


def test_bad_and_oversized_transactions_are_refused_before_anything_is_proposed(agents):
    """400 for what is not a transaction, 413 over a limit, each with a
    JSON error; nothing of them is committed."""
    started = three(agents)
    agent = started[0]
    for body, status, words in [
        (b"not json", 400, "JSON transaction"),
        ({"compare": [{"key": "k", "target": "color", "op": "="}]}, 400, "target"),
        (
            {"success": [{"op": "put", "key": "k", "value": "1"}, {"op": "delete", "key": "k"}]},
            400,
            "at most once",
        ),  # fmt: skip
        ({"success": [{"op": "get", "key": f"k{i}"} for i in range(65)]}, 413, "at most 64"),
        (
            {
                "success": [
                    {"op": "put", "key": f"big{i}", "value": "x" * 400_000} for i in range(3)
                ]
            },
            413,
            "bytes together",
        ),  # fmt: skip
    ]:
        got, answer = api_request(agent, "POST", "/v1/meta/txn", body)
        assert got == status and words in answer["error"], (
            body if isinstance(body, bytes) else list(body),
            answer,
        )
    with pytest.raises(TooLarge):
        client_of(agent).meta.txn(success=[TxnGet(f"k{i}") for i in range(65)])
    status, _ = api_request(agent, "GET", "/v1/meta/k")
    assert status == 404  # the refused put never happened


def test_without_a_controller_a_txn_is_not_applied(agents):
    """Alone (no controller elected), an agent answers 503 not applied."""
    (alone,) = agents.start(1, extra=META)
    poll_until(lambda: alone.members(), 10)
    with pytest.raises(NotApplied):
        client_of(alone).meta.txn(success=[TxnPut("k", "v")])
    status, body = api_request(alone, "POST", "/v1/meta/txn", {})
    assert status == 503 and body["outcome"] == "not_applied"


def test_a_txn_whose_controller_went_silent_is_unknown_never_a_branch(agents):
    """With the controller paused after taking it, a transaction's outcome
    is unknown (504, or Unknown when the client gives up first)."""
    started = three(agents)
    leader = next(a for a in started if a.name == controller_name(started[0]))
    asker = next(a for a in started if a is not leader)
    leader.signal(signal.SIGSTOP)
    try:
        with pytest.raises(Unknown):  # the client gave up after handing it over
            client_of(asker, timeout=0.3).meta.txn(success=[TxnPut("q", "v")])
        status, body = api_request(asker, "POST", "/v1/meta/txn",
                                   {"success": [{"op": "put", "key": "p", "value": "v"}]},
                                   timeout_s=30)  # fmt: skip
        assert status == 504 and body["outcome"] == "unknown", body
    finally:
        leader.signal(signal.SIGCONT)
    poll_until(lambda: any(writable(a, "resumed") for a in started), 30, interval_s=0.2)


class TxnRecorder(History):
    """Client threads running transfers over two keys, and reads of them,
    recorded for the checker on one monotonic timeline."""

    KEYS = ("acct/a", "acct/b")

    def run_client(self, client: int, members: Sequence[Any], seed: int) -> None:
        rng = random.Random(seed)
        last: dict[str, int] = {}
        while not self.stop.is_set():
            agent = rng.choice(members)
            if rng.random() < 0.3:
                self._call(client, agent, _reads(self.KEYS), last)
                continue
            n = self.next_value()
            compares = [Cmp(k, "mod", "=", last.get(k, 0)) for k in self.KEYS]
            puts = [Put(k, f"{k[-1]}{n}") for k in self.KEYS]
            self._call(client, agent, Txn(tuple(compares), tuple(puts), _reads(self.KEYS).success),
                       last)  # fmt: skip

    def _call(self, client: int, agent, txn: Txn, last: dict[str, int]) -> None:
        at = time.monotonic()
        try:
            status, body = api_request(agent, "POST", "/v1/meta/txn", _txn_json(txn), 8.0)
        except OSError:
            self._add(Operation(client, at, None, txn, None))  # unknown
            return
        done = time.monotonic()
        if status == 503:
            self._add(Operation(client, at, done, txn, metamodel.NotApplied()))
        elif status != 200:
            self._add(Operation(client, at, None, txn, None))  # 504: unknown
        else:
            results = tuple(Read(r["value"], r["mod_revision"]) if r.get("found") else
                            (Read(None, 0) if r["op"] == "get" else None)
                            for r in body["results"])  # fmt: skip
            for op, r in zip(txn.success if body["succeeded"] else txn.failure, results):
                last[op.key] = body["revision"] if r is None else r.mod_revision
            self._add(
                Operation(
                    client, at, done, txn, TxnDone(body["succeeded"], body["revision"], results)
                )
            )


def _reads(keys: tuple[str, ...]) -> Txn:
    """Both keys at one revision: a transaction of gets alone."""
    return Txn((), tuple(Get(k) for k in keys), ())


def _txn_json(txn: Txn) -> dict:
    def ops(branch) -> list:
        return [{"op": "put", "key": o.key, "value": o.value} if isinstance(o, Put)
                else {"op": "get", "key": o.key} for o in branch]  # fmt: skip

    compares = [{"key": c.key, "target": "mod_revision", "op": "=", "value": c.operand}
                for c in txn.compares]  # fmt: skip
    return {"compare": compares, "success": ops(txn.success), "failure": ops(txn.failure)}


def test_transfer_histories_through_a_controller_crash_are_linearizable(agents):
    """Four clients run transfers (both keys, only if neither changed since
    they last saw them) and two-key reads through three agents, the
    controller killed with -9 and restarted in the middle: the checker finds
    the history linearizable over both keys at once, and transfers both
    succeeded and failed."""
    members = meta_cluster(agents)
    rec = TxnRecorder()
    threads = rec.start(4, members)
    crash_the_controller(members, lambda: len(rec.ops), 100)
    rec.stop.set()
    for t in threads:
        t.join(15)
    done = [op.output for op in rec.ops if isinstance(op.output, TxnDone) and op.input.compares]
    assert sum(d.succeeded for d in done) > 10 and sum(not d.succeeded for d in done) > 10
    verdict = check_meta(rec.ops, max_steps=5_000_000)
    print(f"txn history: {len(rec.ops)} operations, checked in {verdict.steps} steps")
    assert verdict.ok, verdict.explanation
