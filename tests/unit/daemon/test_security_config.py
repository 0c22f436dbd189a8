"""Encryption and API-access settings: bad ones are one clear ConfigError."""

import os

import pytest

from shoal.daemon import config
from shoal.daemon.api.access import ApiAccess, parse_access
from shoal.daemon.keys import (
    EncryptionConfig,
    generate_key,
    load_keyring,
    parse_encryption,
    save_keyring,
)
from shoal.kernel.errors import ConfigError
from shoal.kernel.sealing import parse_key

KEY = generate_key()


def test_a_key_seeds_a_private_keyring_file_that_wins_afterwards(tmp_path):
    """The first start writes <data_dir>/keyring (0600); later starts read it."""
    ring = load_keyring(EncryptionConfig(key=KEY), tmp_path, "c")
    assert ring is not None and ring.keys == (parse_key(KEY),)
    path = tmp_path / "keyring"
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    other = generate_key()
    again = load_keyring(EncryptionConfig(key=other), tmp_path, "c")
    assert again is not None and again.keys == (parse_key(KEY),)
    assert load_keyring(EncryptionConfig(), tmp_path / "none", "c") is None


def test_the_keyring_file_keeps_its_version_and_a_0_1_file_still_loads(tmp_path):
    """The version of the last key command survives a restart (a replayed
    command must not apply after it); 0.1's bare array reads as version 0."""
    path = tmp_path / "keyring"
    path.write_text(f'["{KEY}"]')
    os.chmod(path, 0o600)
    ring = load_keyring(EncryptionConfig(), tmp_path, "c")
    assert ring is not None and ring.version == 0 and ring.keys == (parse_key(KEY),)
    ring.version = 12
    save_keyring(path, ring)
    again = load_keyring(EncryptionConfig(), tmp_path, "c")
    assert again is not None and again.version == 12 and again.keys == ring.keys


@pytest.mark.parametrize(
    ("content", "mode", "message"),
    [
        (f'["{KEY}"]', 0o644, "accessible by other users"),
        ("not json", 0o600, "keyring_file"),
        ('["c2hvcnQ="]', 0o600, "32 bytes"),
        ("[]", 0o600, "JSON array"),
        (f'{{"version": -1, "keys": ["{KEY}"]}}', 0o600, "whole number"),
        (f'{{"keys": ["{KEY}"]}}', 0o600, "version"),
    ],
    # Named by what they refuse: KEY is random, and the test's name must be the
    # same in every process that collects it (make test runs two: pytest-xdist).
    ids=["world-readable", "not-json", "short-key", "empty", "negative-version", "no-version"],
)
def test_a_bad_keyring_file_is_refused_naming_the_setting(tmp_path, content, mode, message):
    """A world-readable, malformed or short-keyed file stops the agent (exit 2)."""
    path = tmp_path / "keyring"
    path.write_text(content)
    os.chmod(path, mode)
    with pytest.raises(ConfigError, match=message) as info:
        load_keyring(EncryptionConfig(), tmp_path, "c")
    assert str(info.value).startswith("encryption.keyring_file")


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"key": "abc"}, "encryption.key: a key is 32 bytes"),
        ({"verify_incoming": "yes"}, "encryption.verify_incoming: expected true or false"),
        ({"replay_window_s": 0}, "encryption.replay_window_s"),
        ({"cipher": "rot13"}, "encryption.cipher: unknown setting"),
    ],
)
def test_bad_encryption_settings_name_the_setting(raw, message):
    with pytest.raises(ConfigError, match=message):
        parse_encryption(raw)


def test_the_encrypt_flag_and_environment_set_the_key():
    """`--encrypt KEY` or $SHOAL_ENCRYPT, as `serf agent -encrypt`."""
    cfg = config.load({"node_name": "x", "encrypt": KEY}, {})
    assert cfg.encryption.key == KEY
    cfg = config.load({"node_name": "x"}, {"SHOAL_ENCRYPT": KEY})
    assert cfg.encryption.key == KEY


def test_a_token_guards_changes_and_keys_but_not_loopback_reads(tmp_path):
    """With a token: reads open on loopback, writes and key calls need it."""
    token_file = tmp_path / "token"
    token_file.write_text("s3cret-token-of-enough-length\n")
    os.chmod(token_file, 0o600)
    access = parse_access({"api_token_file": str(token_file)}, ("127.0.0.1", 7947))
    assert access.allows("GET", "/v1/members", "")
    assert not access.allows("GET", "/v1/keys", "")
    assert not access.allows("POST", "/v1/leave", "")
    assert not access.allows("POST", "/v1/leave", "Bearer wrong")
    assert access.allows("POST", "/v1/leave", "Bearer s3cret-token-of-enough-length")
    assert ApiAccess().allows("POST", "/v1/leave", "")  # no token configured


def test_an_api_beyond_loopback_needs_a_token_and_then_guards_every_call(tmp_path):
    """Listening on a LAN address without a token is a config error."""
    with pytest.raises(ConfigError, match="beyond loopback"):
        config.load({"node_name": "x", "api": "10.1.2.3:7947"}, {})
    access = parse_access({"api_token": "x" * 20}, ("10.1.2.3", 7947))
    assert not access.allows("GET", "/v1/members", "")


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"api_token": "short"}, "at least 16"),
        ({"api_token": "x" * 20, "api_token_file": "/x"}, "not both"),
        ({"api_token_file": "/nonexistent/token"}, "cannot read"),
        ({"api_socket": 5}, "api_socket: expected a string"),
    ],
)
def test_bad_access_settings_name_the_setting(raw, message):
    with pytest.raises(ConfigError, match=message):
        parse_access(raw, ("127.0.0.1", 7947))


def test_a_world_readable_token_file_is_refused(tmp_path):
    path = tmp_path / "token"
    path.write_text("x" * 20)
    os.chmod(path, 0o644)
    with pytest.raises(ConfigError, match="readable by other users"):
        parse_access({"api_token_file": str(path)}, ("127.0.0.1", 7947))
