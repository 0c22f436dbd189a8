"""Where the client connects and which token it sends, as the CLI decides them."""

import os

import pytest

from shoal.client.endpoint import Endpoint, parse_endpoint, resolve_token


def test_addresses_are_tcp_or_a_unix_socket(monkeypatch):
    monkeypatch.delenv("SHOAL_API_ADDR", raising=False)
    assert parse_endpoint("10.0.0.1:7000") == Endpoint(host="10.0.0.1", port=7000)
    assert parse_endpoint("unix:/run/shoal/api.sock") == Endpoint(path="/run/shoal/api.sock")
    assert parse_endpoint(None) == Endpoint(host="127.0.0.1", port=7947)
    monkeypatch.setenv("SHOAL_API_ADDR", "unix:/tmp/s")
    assert parse_endpoint(None).base == "unix:/tmp/s"


@pytest.mark.parametrize("bad", ["127.0.0.1", "host:port", "h:0", "h:70000", "unix:", ":80"])
def test_a_malformed_address_is_a_value_error(bad):
    with pytest.raises(ValueError, match="ADDR:PORT|unix:PATH"):
        parse_endpoint(bad)


def test_the_token_comes_from_the_argument_then_the_files_then_the_environment(
        tmp_path, monkeypatch):  # fmt: skip
    """The CLI's order: --token-file (or $SHOAL_API_TOKEN_FILE) over $SHOAL_API_TOKEN."""
    monkeypatch.delenv("SHOAL_API_TOKEN", raising=False)
    monkeypatch.delenv("SHOAL_API_TOKEN_FILE", raising=False)
    assert resolve_token() == ""
    monkeypatch.setenv("SHOAL_API_TOKEN", "from-env")
    assert resolve_token() == "from-env"
    path = tmp_path / "token"
    path.write_text("from-file\n")
    os.chmod(path, 0o600)
    monkeypatch.setenv("SHOAL_API_TOKEN_FILE", str(path))
    assert resolve_token() == "from-file"
    assert resolve_token(token_file=path) == "from-file"
    assert resolve_token(token="given") == "given"


def test_a_token_file_others_can_read_or_an_empty_one_is_refused(tmp_path):
    path = tmp_path / "token"
    path.write_text("secret")
    os.chmod(path, 0o644)
    with pytest.raises(ValueError, match="readable by other users"):
        resolve_token(token_file=path)
    path.write_text("")
    os.chmod(path, 0o600)
    with pytest.raises(ValueError, match="empty"):
        resolve_token(token_file=path)
