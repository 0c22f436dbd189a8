"""Who may use the local API: an optional token and an optional unix socket.

    api = "127.0.0.1:7947"          # TCP listener (loopback by default)
    api_socket = "/run/shoal/api.sock"   # also listen here, mode 0660
    api_token_file = "/etc/shoal/api-token"   # or api_token = "…"

With a token, every state-changing call (POST, PUT, DELETE), every key
operation and Prometheus' service discovery (api/sd.py, which lists every
agent's API address) needs `Authorization: Bearer <token>`; when the TCP
listener is not on loopback, every call needs it, and an agent refuses to start
without a token there (a member list is reconnaissance for an attacker).
The CLI reads the token from the same file (`--token-file`, $SHOAL_API_TOKEN
or $SHOAL_API_TOKEN_FILE). Tokens are compared in constant time.
"""

from __future__ import annotations

import ipaddress
import stat
from pathlib import Path
from typing import Any

import msgspec

from shoal.kernel.contract import Address
from shoal.kernel.errors import ConfigError

MIN_TOKEN_CHARS = 16
_READ_ONLY = ("GET", "HEAD")
# the keyring; every API address of the cluster; a backup (every key)
_TOKEN_ALWAYS = ("/v1/keys", "/v1/sd", "/v1/snapshot")


class ApiAccess(msgspec.Struct, frozen=True):
    """The validated access settings."""

    token: str = ""
    socket: str = ""
    open_reads: bool = True  # False when the TCP listener is beyond loopback

    def allows(self, method: str, path: str, authorization: str) -> bool:
        """Whether a request with this Authorization header may proceed."""
        if not self.token:
            return True
        if self.open_reads and method in _READ_ONLY and not path.startswith(_TOKEN_ALWAYS):
            return True
        import hmac  # (not at module level: the agent's start does not need it)

        scheme, _, given = authorization.partition(" ")
        if not given and scheme:
            # A bare token: Prometheus (2.42) sends that from an http_sd_configs
            # entry whose `authorization` leaves `type` out (docs: Bearer).
            scheme, given = "bearer", scheme
        return scheme.lower() == "bearer" and hmac.compare_digest(
            given.strip().encode(), self.token.encode()
        )


def parse_access(raw: dict[str, Any], api: Address) -> ApiAccess:
    """The access settings from the merged config layers.

    Raises:
        ConfigError: a bad setting, an unreadable token file, or a listener
            beyond loopback without a token.
    """
    token = raw.get("api_token", "")
    token_file = raw.get("api_token_file", "")
    sock = raw.get("api_socket", "")
    for name, value in (("api_token", token), ("api_token_file", token_file),
                        ("api_socket", sock)):  # fmt: skip
        if not isinstance(value, str):
            raise ConfigError(f"{name}: expected a string, got {value!r}")
    if token and token_file:
        raise ConfigError("api_token: set api_token or api_token_file, not both")
    if token_file:
        token = read_token_file(Path(token_file), "api_token_file")
    if token and len(token) < MIN_TOKEN_CHARS:
        raise ConfigError(f"api_token: at least {MIN_TOKEN_CHARS} characters "
                          "(shoal keys generate makes a good one)")  # fmt: skip
    loopback = ipaddress.IPv4Address(api[0]).is_loopback
    if not loopback and not token:
        raise ConfigError(f"api: listening on {api[0]}, beyond loopback, needs api_token_file")
    return ApiAccess(token, sock, open_reads=loopback)


def read_token_file(path: Path, setting: str) -> str:
    """The token in `path`, which must not be readable by others.

    Raises:
        ConfigError: naming `setting`.
    """
    try:
        mode = path.stat().st_mode
        text = path.read_text().strip()
    except OSError as exc:
        raise ConfigError(f"{setting}: cannot read {path}: {exc.strerror}") from None
    if mode & stat.S_IRWXO:
        raise ConfigError(f"{setting}: {path} is readable by other users "
                          f"(mode {stat.S_IMODE(mode):04o}); chmod 640 or 600 it")  # fmt: skip
    if not text:
        raise ConfigError(f"{setting}: {path} is empty")
    return text


def generate_token() -> str:
    """A random API token."""
    import secrets

    return secrets.token_urlsafe(32)
