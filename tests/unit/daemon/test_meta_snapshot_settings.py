"""`[meta] snapshot_every` and `keep_entries`: taken from the config file,
and a bad value is one line naming the setting."""

import pytest

from shoal.daemon import config
from shoal.kernel.errors import ConfigError


def test_snapshot_settings_are_read_and_checked():
    cfg = config.build([{"node_name": "x", "meta": {"snapshot_every": 50, "keep_entries": 0}}])
    assert (cfg.meta.snapshot_every, cfg.meta.keep_entries) == (50, 0)
    default = config.build([{"node_name": "x"}]).meta
    assert (default.snapshot_every, default.keep_entries) == (10_000, 1_000)
    with pytest.raises(ConfigError, match=r"^meta\.snapshot_every = 5: .*10 to 10,000,000"):
        config.build([{"node_name": "x", "meta": {"snapshot_every": 5}}])
    with pytest.raises(ConfigError, match=r"^meta\.keep_entries"):
        config.build([{"node_name": "x", "meta": {"keep_entries": -1}}])
    with pytest.raises(ConfigError, match=r"^meta\.snapshot_every: expected a number"):
        config.build([{"node_name": "x", "meta": {"snapshot_every": "often"}}])


def test_max_snapshot_bytes_is_read_and_checked():
    """The cap on an incoming snapshot: 512 MiB unless set; below 1 MiB,
    above 1 TiB or not a whole number is one line naming the setting."""
    default = config.build([{"node_name": "x"}]).meta
    assert default.max_snapshot_bytes == 512 * 1024 * 1024
    cfg = config.build([{"node_name": "x", "meta": {"max_snapshot_bytes": 2 << 20}}])
    assert cfg.meta.max_snapshot_bytes == 2 << 20
    for bad, says in ((1000, r"1 MiB \(1048576\) to 1 TiB"), (2 << 40, "to 1 TiB"),
                      (1.5e6, "expected a whole number"), ("1G", "expected a number")):  # fmt: skip
        with pytest.raises(ConfigError, match=rf"^meta\.max_snapshot_bytes.*{says}") as err:
            config.build([{"node_name": "x", "meta": {"max_snapshot_bytes": bad}}])
        assert "\n" not in str(err.value)
