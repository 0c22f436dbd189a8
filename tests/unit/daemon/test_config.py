"""Configuration errors are one clear line naming the setting, exit code 2."""

import subprocess
import sys
from pathlib import Path

import pytest

from shoal.daemon import config
from shoal.daemon.network.addresses import choose_advertise
from shoal.kernel.errors import ConfigError


def shoal(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "shoal.daemon.cli", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )


@pytest.mark.parametrize(
    ("flags", "setting"),
    [
        (["--bind", "localhost"], "bind"),
        (["--bind", "1.2.3.4:99999"], "bind"),
        (["--join", "not-an-ip"], "join"),
        (["--tag", "novalue"], "tags"),
        (["--profile", "fast"], "profile"),
        (["--log-level", "loud"], "log_level"),
    ],
)
def test_bad_flags_exit_2_with_one_line_naming_the_setting(flags, setting, tmp_path):
    """A user who mistypes a flag is told which one, without a traceback."""
    result = shoal("agent", "--data-dir", str(tmp_path), *flags)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"shoal: {setting}")


@pytest.mark.parametrize(
    ("text", "setting"),
    [
        ("bind = 3\n", "bind"),
        ("nonsense = 1\n", "nonsense"),
        ("[swim]\nprobe_interval_s = -1\n", "swim"),
        ("[swim]\nprobe_timeout = 1\n", "swim.probe_timeout"),
        ("[swim]\nindirect_checks = 1.5\n", "swim.indirect_checks"),
        ("[faults]\nfsync_delay_s = -0.5\n", "faults.fsync_delay_s"),
        ("[election]\nrequest_timeout_s = 2.5\n", "election"),
        ("this is not toml", "config"),
        ("\udcff\udcfe", "config"),  # bytes ff fe: not UTF-8 (a traceback before)
    ],
)
def test_bad_config_files_exit_2_naming_the_setting(text, setting, tmp_path):
    """A broken config file is reported in one line, naming what to fix."""
    path = tmp_path / "shoal.toml"
    path.write_bytes(text.encode("utf-8", "surrogateescape"))
    result = shoal("agent", "--config", str(path), "--data-dir", str(tmp_path))
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"shoal: {setting}"), result.stderr


def test_unknown_flag_is_a_usage_error():
    """argparse's own usage errors also exit 2."""
    assert shoal("agent", "--frobnicate").returncode == 2


def test_file_then_environment_then_flags(tmp_path):
    """Flags beat SHOAL_* variables, which beat the config file."""
    path = tmp_path / "shoal.toml"
    path.write_text('cluster = "from-file"\nnode_name = "file"\ntags = { rack = "r1" }\n'
                    "[swim]\nprobe_interval_s = 2.0\n")  # fmt: skip
    env = {"SHOAL_CLUSTER": "from-env", "SHOAL_NODE_NAME": "env"}
    cfg = config.load({"config": str(path), "node_name": "flag"}, env)
    assert (cfg.node_name, cfg.cluster, cfg.tags) == ("flag", "from-env", (("rack", "r1"),))
    assert cfg.swim.probe_interval_s == 2.0 and cfg.swim.probe_timeout_s == 0.5


def test_profiles_select_memberlist_timings():
    """The local profile has memberlist's DefaultLocalConfig timings."""
    cfg = config.load({"node_name": "x", "profile": "local"}, {})
    assert cfg.swim.probe_timeout_s == 0.2 and cfg.swim.suspicion_mult == 3


def test_advertise_is_predictable_and_ambiguity_is_an_error():
    """With several candidate addresses the agent refuses to guess."""
    one = [("lo", "127.0.0.1"), ("eth0", "10.1.2.3"), ("docker0", "169.254.1.1")]
    addr, why = choose_advertise(("0.0.0.0", 7946), None, one)
    assert addr == ("10.1.2.3", 7946) and "eth0" in why
    two = [("eth0", "10.1.2.3"), ("eth1", "192.168.5.5")]
    with pytest.raises(ConfigError, match="advertise.*10.1.2.3 on eth0.*192.168.5.5 on eth1"):
        choose_advertise(("0.0.0.0", 7946), None, two)
    assert choose_advertise(("10.0.0.7", 7000), None, two)[0] == ("10.0.0.7", 7000)
    assert choose_advertise(("0.0.0.0", 7946), ("10.9.9.9", 7946), two)[0] == ("10.9.9.9", 7946)


def test_the_shipped_config_file_is_valid_and_lists_every_setting():
    """systemd/shoal.toml loads, and names every setting the agent has."""
    import msgspec.structs

    from shoal.daemon.config import AgentConfig
    from shoal.membership.profiles import SwimConfig
    from shoal.storage.antientropy import SyncConfig

    path = Path(__file__).resolve().parents[3] / "systemd" / "shoal.toml"
    cfg = config.load({"config": str(path), "node_name": "x"}, {})
    assert cfg.swim == SwimConfig()
    text = path.read_text()
    for f in msgspec.structs.fields(AgentConfig):
        if f.name in ("swim", "store", "election", "history", "encryption", "dns", "meta"):
            assert f"[{f.name}]" in text
        elif f.name == "access":
            assert all(f"{k} =" in text for k in ("api_socket", "api_token_file"))
        elif f.name != "faults":  # test-only fault injection is not advertised
            assert f"{f.name} =" in text, f.name
    from shoal.daemon.keys import EncryptionConfig
    from shoal.election.config import LeaseConfig
    from shoal.storage.history import HistoryConfig

    fields = msgspec.structs.fields(SwimConfig) + msgspec.structs.fields(SyncConfig)
    fields += msgspec.structs.fields(EncryptionConfig)
    from shoal.daemon.config import MetaSettings

    fields += msgspec.structs.fields(MetaSettings)
    for f in fields + msgspec.structs.fields(LeaseConfig) + msgspec.structs.fields(HistoryConfig):
        assert f"{f.name} =" in text, f.name
    assert cfg.store == SyncConfig()


def test_uncommenting_every_setting_of_the_shipped_file_gives_the_defaults(tmp_path):
    """Each commented `key = value` sits in the right table and is the default."""
    import re

    from shoal.daemon.config import AgentConfig

    shipped = Path(__file__).resolve().parents[3] / "systemd" / "shoal.toml"
    lines = [
        re.sub(r"^# ([a-z_]+ = .*)$", r"\1", line) for line in shipped.read_text().splitlines()
    ]
    active = tmp_path / "all.toml"
    active.write_text("\n".join(lines) + "\n")
    cfg = config.load({"config": str(active), "node_name": "x"}, {})
    defaults = config.load({"node_name": "x"}, {})
    for f in AgentConfig.__struct_fields__:
        if f not in ("node_name", "advertise", "join", "tags", "discovery_interfaces"):  # examples
            assert getattr(cfg, f) == getattr(defaults, f), f


def test_a_simulation_too_big_for_memory_is_refused_up_front():
    """100,000 simulated nodes hold 10^10 view entries (about 1 TiB): the
    user is told so at once, instead of the machine running out of memory."""
    result = shoal("simulate", "--nodes", "100000", "--formed", "--duration", "1")
    assert result.returncode == 2
    message = result.stderr.strip()
    assert message.startswith("shoal: --nodes: 100000 nodes need about"), message


def test_host_names_resolve_to_ipv4_and_ipv6_is_refused_with_the_reason():
    assert config.parse_address("join", "localhost:7946") == ("127.0.0.1", 7946)
    assert config.parse_address("join", "localhost", 7946) == ("127.0.0.1", 7946)
    for text, words in (("[::1]:7946", "IPv6"), ("fe80::1", "IPv6"),
                        ("no-such-host.invalid:1", "cannot resolve"),
                        ("bad host:1", "IPv4 address or a host name")):  # fmt: skip
        with pytest.raises(ConfigError, match=words):
            config.parse_address("join", text, 7946)


@pytest.mark.parametrize("text,words", [
    ('tags = "web"', "tags: expected KEY=VALUE, got 'web'"),
    ("[election]\nlease_s = -3", "election.lease_s: must not be negative, got -3"),
    ("[election]\nlease_s = 0.1", "election.lease_s = 0.1: renew_interval_s must be above 0"),
])  # fmt: skip
def test_a_config_error_names_the_setting_the_user_wrote(tmp_path, text, words):
    path = tmp_path / "c.toml"
    path.write_text(text + "\n")
    with pytest.raises(ConfigError) as err:
        config.load({"config": str(path), "node_name": "x"}, {})
    assert words in str(err.value)


def test_serf_event_names_are_accepted_in_handlers():
    cfg = config.load({"node_name": "x", "event_handlers": [
        "member-join=a", "member-leave=b", "member-failed=c", "member-update=d", "user:deploy=e",
        "query:load=f"]}, {})  # fmt: skip
    assert cfg.event_handlers == (("member-joined", "a"), ("member-left", "b"),
                                  ("member-failed", "c"), ("member-updated", "d"),
                                  ("user:deploy", "e"), ("query:load", "f"))  # fmt: skip


def test_the_metadata_log_is_off_unless_enabled_and_its_settings_are_checked():
    """`[meta] enabled` (or `--meta`) turns the preview on; a bad value is one
    line naming the setting."""
    assert config.build([{"node_name": "x"}]).meta.enabled is False
    flags = {"meta": {"enabled": True}}  # what `--meta` gives
    cfg = config.build([{"node_name": "x", "meta": {"heartbeat_s": 0.2}}, flags])
    assert cfg.meta.enabled and cfg.meta.heartbeat_s == 0.2
    with pytest.raises(ConfigError, match=r"^meta\.enabled: expected true or false"):
        config.build([{"node_name": "x", "meta": {"enabled": "yes"}}])
    with pytest.raises(ConfigError, match=r"meta\.heartbeat_s = 9.*0\.01 to 5 seconds"):
        config.build([{"node_name": "x", "meta": {"heartbeat_s": 9}}])
    with pytest.raises(ConfigError, match=r"^meta\.voters: unknown setting"):
        config.build([{"node_name": "x", "meta": {"voters": 3}}])
