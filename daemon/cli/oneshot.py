"""One GET to the agent's API on a plain socket, for `shoal members`.

Scripts, health checks and monitoring run `shoal members` in loops, so the
command's cost is the interpreter's start plus what it imports (issue 42).
`shoal.client.Client` sits on http.client, which loads email, ssl and
urllib, and decodes into msgspec structs (msgspec loads inspect, ast, uuid
and decimal): together more CPU than the rest of the command. One GET with
`Connection: close` needs neither: this sends it on a socket and returns the
body of a plain 200 answer (a Content-Length body). Anything else (no agent,
a refusal, a chunked or malformed answer) returns None, and the caller asks
again through `Client`, whose errors say what went wrong in the words every
other command uses; that costs only the failing call.
"""

from __future__ import annotations

import socket

_MAX_BYTES = 64 * 1024 * 1024  # a member list of 100,000 members is about 20 MB


def get(api: str, path: str, token: str, timeout_s: float = 10.0) -> bytes | None:
    """The body of the agent's 200 answer to `GET path`, or None.

    Args:
        api: "ADDR:PORT" (checked by the caller) or "unix:PATH".
        path: the request path and query, already encoded.
        token: the API token ("" for none).
        timeout_s: for the connection and each read.
    """
    try:
        sock = _connect(api, timeout_s)
    except (OSError, ValueError):
        return None
    auth = f"Authorization: Bearer {token}\r\n" if token else ""
    request = f"GET {path} HTTP/1.1\r\nHost: shoal\r\n{auth}Connection: close\r\n\r\n"
    try:
        with sock:
            sock.sendall(request.encode())
            answer = _read_all(sock)
    except OSError:
        return None
    return None if answer is None else _body_of_200(answer)


def _connect(api: str, timeout_s: float) -> socket.socket:
    if api.startswith("unix:"):
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        address: str | tuple[str, int] = api[len("unix:") :]
    else:
        host, _, port = api.rpartition(":")
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        address = (host, int(port))
    sock.settimeout(timeout_s)
    try:
        sock.connect(address)
    except OSError:
        sock.close()
        raise
    return sock


def _read_all(sock: socket.socket) -> bytes | None:
    parts: list[bytes] = []
    size = 0
    while True:
        chunk = sock.recv(65536)
        if not chunk:
            return b"".join(parts)
        parts.append(chunk)
        size += len(chunk)
        if size > _MAX_BYTES:
            return None


def _body_of_200(answer: bytes) -> bytes | None:
    head, sep, body = answer.partition(b"\r\n\r\n")
    if not sep:
        return None
    lines = head.split(b"\r\n")
    status = lines[0].split(b" ", 2)
    if len(status) < 2 or status[1] != b"200":
        return None
    length = None
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        name = name.strip().lower()
        if name == b"transfer-encoding":
            return None  # chunked: the caller asks through Client
        if name == b"content-length" and value.strip().isdigit():
            length = int(value.strip())
    if length is None or len(body) != length:
        return None
    return body
