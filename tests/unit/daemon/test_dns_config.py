"""`[dns]`: off by default; a bad setting is one line naming it, exit code 2."""

import subprocess
import sys

import pytest

from shoal.daemon import config
from shoal.daemon.dns.config import DnsConfig
from shoal.kernel.errors import ConfigError


def test_dns_is_off_unless_bind_is_set():
    """An agent configured as before answers no DNS."""
    cfg = config.build([{"node_name": "a"}])
    assert cfg.dns == DnsConfig() and cfg.dns.bind is None


def test_a_dns_table_is_read_and_the_domain_normalised():
    """`domain = "Cluster.Example"` answers for cluster.example., lower case, final dot."""
    cfg = config.build([{"node_name": "a", "dns": {"bind": "127.0.0.1:8600",
                                                   "domain": "Cluster.Example", "ttl_s": 5,
                                                   "only_passing": True}}])  # fmt: skip
    assert cfg.dns == DnsConfig(("127.0.0.1", 8600), "cluster.example.", 5, True, 0)


def test_bind_without_a_port_uses_8600():
    """Consul's port is the default, as resolvers that forward a domain expect."""
    cfg = config.build([{"node_name": "a", "dns": {"bind": "127.0.0.1"}}])
    assert cfg.dns.bind == ("127.0.0.1", 8600)


@pytest.mark.parametrize(
    ("table", "setting"),
    [
        ({"bind": "localhost:99999"}, "dns.bind"),
        ({"bind": 8600}, "dns.bind"),
        ({"domain": "bad domain."}, "dns.domain"),
        ({"domain": ""}, "dns.domain"),
        ({"ttl_s": -1}, "dns.ttl_s"),
        ({"ttl_s": 1.5}, "dns.ttl_s"),
        ({"only_passing": "yes please"}, "dns.only_passing"),
        ({"udp_answer_limit": True}, "dns.udp_answer_limit"),
        ({"port": 53}, "dns.port"),
    ],
)
def test_bad_dns_settings_name_the_setting(table, setting):
    """Each mistake names the setting it is in."""
    with pytest.raises(ConfigError) as err:
        config.build([{"node_name": "a", "dns": table}])
    assert str(err.value).startswith(setting)


def test_a_bad_dns_table_in_a_file_is_one_line_and_exit_2(tmp_path):
    """The user sees one line naming the setting, never a traceback."""
    path = tmp_path / "shoal.toml"
    path.write_text('[dns]\nbind = "127.0.0.1:8600"\ndomain = "no spaces please"\n')
    result = subprocess.run([sys.executable, "-m", "shoal.daemon.cli", "agent", "--config",
                             str(path), "--data-dir", str(tmp_path / "data")],
                            capture_output=True, text=True, timeout=60)  # fmt: skip
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("shoal: dns.domain")
