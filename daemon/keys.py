"""Encryption settings and the keyring file.

    [encryption]
    key = "base64…"          # seeds the keyring file when there is none (serf's encrypt_key)
    keyring_file = ""        # default <data_dir>/keyring
    verify_incoming = true   # refuse plaintext packets
    verify_outgoing = true   # seal what we send
    replay_window_s = 30     # ignored since 0.2: packets are bound to runs, not stamped

The keyring file is `{"version": N, "keys": [base64 keys, primary first]}`
(version 0.1 wrote the bare array, the shape of Serf's keyring file; it is
read as version 0). The agent rewrites it on every `shoal keys`
change, so a restarted agent keeps the rotated keys; it must be private to
the agent's user (no group or other permission bits), like an SSH key.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import msgspec
import structlog

from shoal.kernel.errors import ConfigError
from shoal.kernel.sealing import KEY_BYTES, Keyring, KeyringError, format_key, parse_key

log = structlog.get_logger("shoal")
KEYRING_NAME = "keyring"


class EncryptionConfig(msgspec.Struct, frozen=True):
    """The `[encryption]` table, validated."""

    key: str = ""
    keyring_file: str = ""
    verify_incoming: bool = True
    verify_outgoing: bool = True
    # Read and checked so that 0.1's config files still load; nothing uses
    # it since packets carry run numbers and counters instead of stamps.
    replay_window_s: float = 30.0

    def keyring_path(self, data_dir: Path) -> Path:
        """Where the keyring file lives."""
        return Path(self.keyring_file) if self.keyring_file else data_dir / KEYRING_NAME


def parse_encryption(raw: Any) -> EncryptionConfig:
    """`[encryption]` from the merged config layers.

    Raises:
        ConfigError: naming the setting.
    """
    if not isinstance(raw, Mapping):
        raise ConfigError("encryption: expected a table of settings")
    out: dict[str, Any] = {}
    for name, value in raw.items():
        setting = f"encryption.{name}"
        if name == "key":
            if value == "":
                continue
            try:
                parse_key(value if isinstance(value, str) else "")
            except KeyringError as exc:
                raise ConfigError(f"{setting}: {exc}") from None
        elif name == "keyring_file":
            if not isinstance(value, str):
                raise ConfigError(f"{setting}: expected a path")
        elif name in ("verify_incoming", "verify_outgoing"):
            if not isinstance(value, bool):
                raise ConfigError(f"{setting}: expected true or false, got {value!r}")
        elif name == "replay_window_s":
            if isinstance(value, bool) or not isinstance(value, (int, float)) \
                    or not 1 <= value <= 3600:  # fmt: skip
                raise ConfigError(f"{setting}: expected 1 to 3600 seconds, got {value!r}")
            value = float(value)
        else:
            raise ConfigError(f"{setting}: unknown setting")
        out[name] = value
    return EncryptionConfig(**out)


def generate_key() -> str:
    """A new random key, base64 (`shoal keys generate`)."""
    import secrets  # (not at module level: the agent's start does not need it)

    return format_key(secrets.token_bytes(KEY_BYTES))


def load_keyring(cfg: EncryptionConfig, data_dir: Path, cluster: str) -> Keyring | None:
    """The keyring for the agent: from the file, else seeded from `key`.

    Returns None when encryption is off (no file and no key).

    Raises:
        ConfigError: the file is readable by others, unreadable or malformed.
    """
    path = cfg.keyring_path(data_dir)
    if path.exists():
        keys, version = read_keyring_file(path)
        if cfg.key and parse_key(cfg.key) not in keys:
            log.warning("encryption.key is ignored: the keyring file exists and wins",
                        keyring=str(path))  # fmt: skip
        return Keyring(keys, cluster, version)
    if not cfg.key:
        return None
    ring = Keyring([parse_key(cfg.key)], cluster)
    save_keyring(path, ring)
    return ring


def read_keyring_file(path: Path) -> tuple[list[bytes], int]:
    """The keys in a keyring file, primary first, and the version of the last
    key command applied (`{"version": N, "keys": [...]}`; a bare array, as
    version 0.1 wrote it, is version 0).

    Raises:
        ConfigError: as for `load_keyring`.
    """
    try:
        mode = path.stat().st_mode
        if mode & (stat.S_IRWXG | stat.S_IRWXO):
            raise ConfigError(f"encryption.keyring_file: {path} is accessible by other users "
                              f"(mode {stat.S_IMODE(mode):04o}); chmod 600 it")  # fmt: skip
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(f"encryption.keyring_file: cannot read {path}: {exc.strerror}") from None
    try:
        raw = json.loads(text)
        items, version = (raw, 0) if isinstance(raw, list) else _versioned(raw)
        if not isinstance(items, list) or not items:
            raise ValueError("expected a JSON array of base64 keys")
        return [parse_key(item if isinstance(item, str) else "") for item in items], version
    except ValueError as exc:  # KeyringError and JSONDecodeError are ValueErrors
        raise ConfigError(f"encryption.keyring_file: {path}: {exc}") from None


def _versioned(raw: object) -> tuple[object, int]:
    if not isinstance(raw, dict) or set(raw) != {"version", "keys"}:
        raise ValueError('expected {"version": N, "keys": [base64 keys]}')
    version = raw["version"]
    if type(version) is not int or not 0 <= version < 2**63:
        raise ValueError("the version is a whole number")
    return raw["keys"], version


def save_keyring(path: Path, ring: Keyring) -> None:
    """Write the keyring file atomically, mode 0600.

    Raises:
        OSError: the directory is not writable.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump({"version": ring.version, "keys": [format_key(k) for k in ring.keys]}, f)
        f.write("\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
