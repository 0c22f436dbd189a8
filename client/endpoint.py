"""Where the agent is and how to prove we may talk to it.

An address is "ADDR:PORT" (TCP; a host name works too) or "unix:PATH" (the
agent's `api_socket`). Without one, $SHOAL_API_ADDR, else 127.0.0.1:7947.
The token comes from the argument, else the file named by the argument,
else the file named by $SHOAL_API_TOKEN_FILE, else $SHOAL_API_TOKEN: the
order the `shoal` command line reads them in. A token file must not be
readable by other users (the agent's rule for its own).

`Endpoint.connect` opens an http.client connection to it (TCP or unix),
and `headers` says who we are: what `Client` and a `Session`'s own
keepalive connection share.
"""

from __future__ import annotations

import http.client
import os
import socket
import stat
from dataclasses import dataclass
from pathlib import Path

DEFAULT_ADDR = "127.0.0.1:7947"


@dataclass(frozen=True, slots=True)
class Endpoint:
    """One agent's API: a TCP host and port, or a unix socket path."""

    host: str = ""
    port: int = 0
    path: str = ""

    @property
    def base(self) -> str:
        """How messages name the agent: `http://HOST:PORT` or `unix:PATH`."""
        return f"unix:{self.path}" if self.path else f"http://{self.host}:{self.port}"

    def connect(self, timeout_s: float | None) -> http.client.HTTPConnection:
        """A connection to the agent (opened at its first request)."""
        if self.path:
            return UnixConnection(self.path, timeout_s)
        return http.client.HTTPConnection(self.host, self.port, timeout=timeout_s)


def headers(token: str, data: bytes | None) -> dict[str, str]:
    """The headers of a request with body `data`, bearing `token` if any."""
    out = {"Content-Type": "application/json"} if data is not None else {}
    if token:
        out["Authorization"] = f"Bearer {token}"
    return out


def parse_endpoint(addr: str | None = None) -> Endpoint:
    """The endpoint for `addr` ("ADDR:PORT" or "unix:PATH"; None: the default).

    Raises:
        ValueError: `addr` is neither form.
    """
    text = addr if addr is not None else os.environ.get("SHOAL_API_ADDR") or DEFAULT_ADDR
    if text.startswith("unix:"):
        if not text[len("unix:") :]:
            raise ValueError(f"expected unix:PATH, got {text!r}")
        return Endpoint(path=text[len("unix:") :])
    host, sep, port_text = text.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not sep or not host or not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise ValueError(f"expected ADDR:PORT or unix:PATH, got {text!r}")
    return Endpoint(host=host, port=int(port_text))


def resolve_token(token: str | None = None,
                  token_file: str | os.PathLike[str] | None = None) -> str:  # fmt: skip
    """The API token to send, or "" for none.

    Raises:
        OSError: the token file cannot be read.
        ValueError: the token file is empty or readable by other users.
    """
    if token:
        return token
    token_file = token_file or os.environ.get("SHOAL_API_TOKEN_FILE") or None
    if token_file is None:
        return os.environ.get("SHOAL_API_TOKEN", "")
    path = Path(token_file)
    text = path.read_text().strip()
    if path.stat().st_mode & stat.S_IRWXO:
        raise ValueError(f"the token file {path} is readable by other users; chmod 600 it")
    if not text:
        raise ValueError(f"the token file {path} is empty")
    return text


class UnixConnection(http.client.HTTPConnection):
    """HTTP over a unix stream socket (the agent's `api_socket`)."""

    def __init__(self, path: str, timeout: float | None) -> None:
        super().__init__("localhost", timeout=timeout)
        self.unix_path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        try:
            sock.connect(self.unix_path)
        except OSError:
            sock.close()
            raise
        self.sock = sock
