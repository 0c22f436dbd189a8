"""The API's HTTP server (daemon/api/http.py) as a client sees it: keep-alive,
pipelined requests answered in order, paths and queries, body limits and
JSON errors for bad requests, on a real loopback socket."""

from __future__ import annotations

import asyncio
import json
import socket
from typing import Any

from shoal.daemon.api.answers import HttpError, Request
from shoal.daemon.api.http import HttpServer

LIMIT = 64


def _handler(request: Request) -> Any:
    if request.path == "/fail":
        raise HttpError(409, "no", extra=1)
    return 200, {"method": request.method, "path": request.path, "query": request.query,
                 "body": request.body.decode()}  # fmt: skip


async def _exchange(raw: bytes, answers: int) -> list[tuple[int, dict[str, Any], bytes]]:
    """Send `raw` on one connection; read `answers` responses (status, JSON
    body, head)."""
    server = HttpServer(_handler, lambda method, path: LIMIT)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    await server.start(sock)
    reader, writer = await asyncio.open_connection(*sock.getsockname())
    writer.write(raw)
    out = []
    try:
        for _ in range(answers):
            head = await reader.readuntil(b"\r\n\r\n")
            fields = dict(line.split(b": ", 1) for line in head.split(b"\r\n")[1:-2])
            body = await reader.readexactly(int(fields[b"content-length"]))
            out.append((int(head.split()[1]), json.loads(body), head))
    finally:
        writer.close()
        server.close()
    return out


def _run(raw: bytes, answers: int = 1) -> list[tuple[int, dict[str, Any], bytes]]:
    return asyncio.run(_exchange(raw, answers))


def test_pipelined_requests_on_one_connection_are_answered_in_order():
    raw = b"".join(b"PUT /v1/kv/k%d?a=1&b=%d HTTP/1.1\r\nhost: x\r\ncontent-length: 2\r\n\r\nv%d"
                   % (i, i, i) for i in range(3))  # fmt: skip
    answers = _run(raw, 3)
    assert [a[1]["path"] for a in answers] == ["/v1/kv/k0", "/v1/kv/k1", "/v1/kv/k2"]
    assert [a[1]["query"] for a in answers] == [{"a": ["1"], "b": [str(i)]} for i in range(3)]
    assert [a[1]["body"] for a in answers] == ["v0", "v1", "v2"]
    assert all(a[0] == 200 and b"connection: close" not in a[2] for a in answers)


def test_a_bare_flag_in_the_query_is_present():
    # `GET /v1/meta/k?stale` as curl sends it: the flag counts, with the value "".
    ((status, body, _),) = _run(b"GET /v1/meta/k?stale&watch=&a=1 HTTP/1.1\r\nhost: x\r\n\r\n")
    assert status == 200 and body["query"] == {"stale": [""], "watch": [""], "a": ["1"]}


def test_an_absolute_url_and_a_chunked_body_are_understood():
    raw = (b"POST http://h:1/p/q?x=%20y HTTP/1.1\r\nhost: h\r\ntransfer-encoding: chunked\r\n\r\n"
           b"2\r\nab\r\n1\r\nc\r\n0\r\n\r\n")  # fmt: skip
    ((status, body, _),) = _run(raw)
    assert status == 200 and body["path"] == "/p/q" and body["query"] == {"x": [" y"]}
    assert body["body"] == "abc"


def test_a_body_over_the_limit_is_a_413_with_a_json_error_and_the_connection_closes():
    raw = b"PUT /a HTTP/1.1\r\ncontent-length: %d\r\n\r\n" % (LIMIT + 1) + b"x" * (LIMIT + 1)
    ((status, body, head),) = _run(raw)
    assert status == 413 and "over" in body["error"] and b"connection: close" in head


def test_bad_requests_get_4xx_json_errors():
    ((status, body, _),) = _run(b"NOT HTTP\r\n\r\n")
    assert status == 400 and "bad HTTP request" in body["error"]
    huge = b"GET /a HTTP/1.1\r\nx: " + b"y" * 17_000 + b"\r\n\r\n"
    assert _run(huge)[0][0] == 431
    ((status, body, _),) = _run(b"GET /fail HTTP/1.1\r\n\r\n")
    assert status == 409 and body == {"error": "no", "extra": 1}
