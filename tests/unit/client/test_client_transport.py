"""Both clients against a scripted HTTP server on loopback (no agent): the
asyncio client's httptools parsing of plain and chunked answers, split
anywhere, and both watches resuming after the server drops them."""

from __future__ import annotations

import asyncio
import itertools
import json
import socket
import subprocess
import sys
import threading

import pytest

from shoal.client import (
    AsyncClient,
    Client,
    Compacted,
    Conflict,
    Gone,
    IncompatibleAgent,
    Unavailable,
)
from shoal.client.metawatch import MetaCursor


class ScriptedServer:
    """Answers each connection with the next scripted reply (raw bytes, sent
    in small pieces to split headers and chunks), records request lines,
    then closes the connection."""

    def __init__(self, replies: list[bytes]) -> None:
        self.replies = list(replies)
        self.requests: list[str] = []
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen()
        self.addr = f"127.0.0.1:{self.sock.getsockname()[1]}"
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while self.replies:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                head = b""
                while b"\r\n\r\n" not in head:
                    head += conn.recv(4096)
                self.requests.append(head.split(b"\r\n")[0].decode())
                # Read the body too: closing with unread bytes sends a reset,
                # which can reach the client before the reply does.
                header, _, body = head.partition(b"\r\n\r\n")
                length = next((int(line.split(b":")[1]) for line in header.split(b"\r\n")
                               if line.lower().startswith(b"content-length:")), 0)  # fmt: skip
                while len(body) < length:
                    body += conn.recv(4096)
                reply = self.replies.pop(0)
                for i in range(0, len(reply), 7):
                    conn.sendall(reply[i : i + 7])

    def close(self) -> None:
        self.sock.close()


def json_reply(status: int, body: object) -> bytes:
    data = json.dumps(body).encode()
    return b"HTTP/1.1 %d X\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s" % (
        status, len(data), data)  # fmt: skip


def stream_reply(*objs: object, end: bool = False) -> bytes:
    out = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n"
    for obj in objs:
        line = json.dumps(obj).encode() + b"\n"
        out += b"%x\r\n%s\r\n" % (len(line), line)
    return out + (b"0\r\n\r\n" if end else b"")  # no end: the connection just drops


def member(index: int, name: str) -> dict[str, object]:
    return {"index": index, "topic": "members", "type": "member-joined", "name": name,
            "node_id": "ab", "address": "127.0.0.1:7946", "status": "alive",
            "incarnation": 1, "tags": {}}  # fmt: skip


HELLO = {"type": "hello", "run": "r1", "index": 0}
# First connection: two events, dropped mid-stream. Second: the agent resends
# event 2 (a copy), then 3. Third: another run (restart): 410, then a re-list.
SCRIPT = [
    stream_reply(HELLO, member(1, "a"), member(2, "b")),
    stream_reply(
        {"type": "hello", "run": "r1", "index": 2},
        member(2, "b"),
        {"type": "ping", "index": 2},
        member(3, "c"),
    ),  # fmt: skip
    json_reply(410, {"error": "restarted", "run": "r2", "index": 1}),
    json_reply(
        200,
        {
            "members": [
                {
                    "name": "a",
                    "node_id": "ab",
                    "address": "127.0.0.1:7946",
                    "status": "alive",
                    "incarnation": 1,
                    "tags": {},
                }
            ],
            "index": 1,
            "run": "r2",
        },
    ),  # fmt: skip
    stream_reply({"type": "hello", "run": "r2", "index": 1}, member(2, "e")),
]


def _expected(server: ScriptedServer) -> None:
    assert server.requests[1].endswith("index=2&run=r1 HTTP/1.1")
    assert server.requests[2].endswith("index=3&run=r1 HTTP/1.1")
    assert server.requests[3] == "GET /v1/members HTTP/1.1"
    assert server.requests[4].endswith("index=1&run=r2 HTTP/1.1")


def test_the_blocking_watch_resumes_drops_copies_and_resyncs_after_a_restart():
    server = ScriptedServer(SCRIPT)
    try:
        with Client(server.addr, token="", timeout=5).watch_members() as watch:
            got = [(e.index, e.name, e.type, e.resync) for e in itertools.islice(watch, 6)]
        assert got == [
            (1, "a", "member-joined", False),
            (2, "b", "member-joined", False),
            (3, "c", "member-joined", False),
            (1, "b", "member-reaped", True),
            (1, "c", "member-reaped", True),
            (2, "e", "member-joined", False),
        ]
        _expected(server)
    finally:
        server.close()


def test_the_async_watch_does_the_same():
    server = ScriptedServer(SCRIPT)

    async def main() -> list[tuple[int, str, bool]]:
        got = []
        async with AsyncClient(server.addr, token="", timeout=5).watch_members() as watch:
            async for event in watch:
                got.append((event.index, event.name, event.resync))
                if len(got) == 6:
                    break
        return got

    try:
        assert asyncio.run(main()) == [
            (1, "a", False),
            (2, "b", False),
            (3, "c", False),
            (1, "b", True),
            (1, "c", True),
            (2, "e", False),
        ]
        _expected(server)
    finally:
        server.close()


def change(revision: int, key: str) -> dict[str, object]:
    return {"type": "changes", "revision": revision,
            "events": [{"type": "put", "key": key, "revision": revision, "value_base64": "eA==",
                        "mod_revision": revision}]}  # fmt: skip


# A metadata watch from now: first connection, the hello (from 5) and two
# revisions, dropped; the second resends revision 6 (a copy), then 7; the
# third is refused, its revision compacted.
META_SCRIPT = [
    stream_reply({"type": "hello", "revision": 4, "from": 5}, change(5, "a/x"), change(6, "a/y")),
    stream_reply({"type": "hello", "revision": 6, "from": 7}, change(6, "a/y"), change(7, "a/z")),
    json_reply(410, {"error": "revision 8 is compacted", "compacted_revision": 12}),
]


def _expected_meta(server: ScriptedServer) -> None:
    assert server.requests[0] == "GET /v1/meta/?prefix=a%2F&watch=1 HTTP/1.1"
    assert server.requests[1] == "GET /v1/meta/?prefix=a%2F&watch=1&from=7 HTTP/1.1"
    assert server.requests[2] == "GET /v1/meta/?prefix=a%2F&watch=1&from=8 HTTP/1.1"


def test_the_blocking_meta_watch_resumes_drops_copies_and_says_compacted():
    """A dropped metadata watch resumes after the last revision it delivered,
    each change comes once, and a compacted revision raises Compacted."""
    server = ScriptedServer(list(META_SCRIPT))
    got = []
    try:
        with pytest.raises(Compacted) as gone:
            with Client(server.addr, token="", timeout=5).meta.watch("a/") as watch:
                for event in watch:
                    got.append((event.revision, event.key))
        assert got == [(5, "a/x"), (6, "a/y"), (7, "a/z")] and gone.value.revision == 12
        _expected_meta(server)
    finally:
        server.close()


def test_the_async_meta_watch_does_the_same():
    server = ScriptedServer(list(META_SCRIPT))
    got = []

    async def main() -> None:
        async with AsyncClient(server.addr, token="", timeout=5).meta.watch("a/") as watch:
            async for event in watch:
                got.append((event.revision, event.key))

    try:
        with pytest.raises(Compacted) as gone:
            asyncio.run(main())
        assert got == [(5, "a/x"), (6, "a/y"), (7, "a/z")] and gone.value.revision == 12
        _expected_meta(server)
    finally:
        server.close()


def test_a_meta_watch_retries_after_a_tenth_of_a_second_doubling_to_two():
    """Reconnects back off as the other watches' do, and soon again once a
    stream opened."""
    cursor = MetaCursor("a/")
    assert [cursor.backoff() for _ in range(7)] == [0.1, 0.2, 0.4, 0.8, 1.6, 2.0, 2.0]
    assert cursor.opened(b'{"type": "hello", "revision": 4, "from": 5}\n')
    assert cursor.backoff() == 0.1


def test_the_async_client_reads_answers_split_anywhere_and_maps_refusals():
    server = ScriptedServer([
        json_reply(200, {"key": "k", "value_base64": "aGk=", "hlc": 1}),
        json_reply(409, {"error": "overtaken", "fence": 1, "epoch": 2}),
        json_reply(404, {"error": "no GET /v1/watch"}),
    ])  # fmt: skip

    async def main() -> None:
        client = AsyncClient(server.addr, token="tok", timeout=5)
        assert (await client.kv.get("k")).value == b"hi"
        with pytest.raises(Conflict) as refused:
            await client.kv.put("k", "v", fence=1)
        assert (refused.value.fence, refused.value.epoch) == (1, 2)
        with pytest.raises(IncompatibleAgent):
            await anext(aiter(client.watch()))

    try:
        asyncio.run(main())
        assert server.requests[1] == "PUT /v1/kv/k?fence=1 HTTP/1.1"
    finally:
        server.close()


def test_no_agent_is_unavailable_for_both_clients():
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        addr = f"127.0.0.1:{free.getsockname()[1]}"
    with pytest.raises(Unavailable, match="cannot reach the agent"):
        Client(addr, token="").members()
    with pytest.raises(Unavailable):
        asyncio.run(AsyncClient(addr, token="").members())
    with pytest.raises(Unavailable):
        next(Client(addr, token="").watch())  # a first connection that fails raises


def test_a_410_on_a_plain_call_is_gone():
    server = ScriptedServer([json_reply(410, {"error": "old", "run": "r", "index": 3})])
    try:
        with pytest.raises(Gone):
            Client(server.addr, token="").request("GET", "/v1/anything")
    finally:
        server.close()


def test_importing_the_client_loads_neither_asyncio_nor_httptools():
    """The `shoal` command line imports it and must start fast."""
    code = ("import sys, shoal.client; bad = [m for m in ('asyncio', 'httptools', 'uvloop') "
            "if m in sys.modules]; print(bad)")  # fmt: skip
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_the_public_names_are_pinned():
    import shoal.client

    assert sorted(shoal.client.__all__) == sorted([
        "AsyncClient", "AsyncKvApi", "AsyncMetaApi", "AsyncSession", "AsyncWatch", "BadRequest",
        "Busy", "Check", "MetaApi", "MetaValue", "MetaWritten", "NotApplied", "Unknown",
        "CheckListing", "Client", "Conflict", "Controller", "ControllerEvent", "Event",
        "EventSent", "Gone", "IncompatibleAgent", "JoinResult", "KeyValue", "KvApi", "KvEvent",
        "Member", "MemberAnswer", "MemberEvent", "NotFound", "QueryResult", "SelfInfo",
        "Session", "SessionInfo", "ShoalError", "TooLarge", "Unauthorized", "Unavailable",
        "UserEvent", "Watch", "Written",
        "Compare", "TxnDelete", "TxnGet", "TxnItem", "TxnPut", "TxnResult",
        "AsyncMetaWatch", "Compacted", "MetaEvent", "MetaListing", "MetaWatch",  # meta watches
    ])  # fmt: skip
    for name in shoal.client.__all__:
        assert getattr(shoal.client, name) is not None
