"""Network coordinates through the agent (issue 29): `shoal rtt` and
`shoal members --near` against real agents on loopback."""

from __future__ import annotations

from tests.conftest import poll_until
from tests.integration.agents import shoal_cli


def test_rtt_estimates_and_members_near_sort_by_distance(agents):
    started = agents.start(3)
    agents.wait_all_see([a.name for a in started], "alive", started)
    a, b, _ = started
    api = ["--api", f"{a.ip}:7947"]

    def estimated() -> bool:
        return shoal_cli("rtt", *api, b.name).returncode == 0

    poll_until(estimated, 30, interval_s=0.5)  # once a has probed b directly
    out = shoal_cli("rtt", *api, b.name)
    assert f"{b.name} <-> {a.name}:" in out.stdout and " ms ± " in out.stdout, out.stdout
    assert "probed directly" in out.stdout
    near = shoal_cli("members", *api, "--near", a.name)
    assert near.returncode == 0, near.stderr
    rows = [line.split()[0] for line in near.stdout.splitlines()[1:]]
    assert rows[0] == a.name and sorted(rows) == sorted(x.name for x in started)
    missing = shoal_cli("rtt", *api, "no-such-node")
    assert missing.returncode == 1 and "no coordinate" in missing.stderr
