"""Agents on a virtual LAN find each other by multicast, with no address configured."""

import json
from datetime import datetime

import pytest

from tests.conftest import poll_until

pytestmark = [pytest.mark.root, pytest.mark.netns]


def all_see(hosts, names, status="alive"):
    def check():
        return all(all(h.members().get(n) == status for n in names) for h in hosts)

    return check


def wait_all_see(hosts, names, timeout_s, status="alive"):
    """Poll until every host lists every name with `status`; on timeout, fail
    with each host's view and the end of its agent log."""
    try:
        poll_until(all_see(hosts, names, status), timeout_s)
    except AssertionError:
        report = [f"{h.ns}: {h.members()}\n  " + "\n  ".join(h.log().splitlines()[-5:])
                  for h in hosts]  # fmt: skip
        raise AssertionError(f"not all see {names} {status}:\n" + "\n".join(report)) from None


def names_of(hosts):
    return [f"host-{h.index}" for h in hosts]


def test_five_agents_with_no_join_find_each_other(make_lan):
    """Five machines on a LAN, nothing configured: all list five alive."""
    lan = make_lan(5)
    for host in lan.hosts:
        host.start_agent()
    wait_all_see(lan.hosts, names_of(lan.hosts), 20)
    # Nobody was told an address: every join came from discovery.
    assert any("discovered peer, joining" in h.log() for h in lan.hosts)


def test_an_agent_started_later_joins_by_itself(make_lan):
    """A machine added to a running cluster joins with no configuration."""
    lan = make_lan(4)
    first = lan.hosts[:3]
    for host in first:
        host.start_agent()
    wait_all_see(first, names_of(first), 20)
    lan.hosts[3].start_agent()
    wait_all_see(lan.hosts, names_of(lan.hosts), 20)


def test_an_agent_of_another_cluster_stays_out(make_lan):
    """Two clusters on one LAN do not merge; the log says why."""
    lan = make_lan(4)
    ours = lan.hosts[:3]
    for host in ours:
        host.start_agent()
    other = lan.hosts[3].start_agent(extra=("--cluster", "other"))
    wait_all_see(ours, names_of(ours), 20)
    poll_until(lambda: "another cluster" in ours[0].log(), 10)
    for host in ours:
        assert "host-4" not in host.members()
    assert set(other.members()) == {"host-4"}


def test_they_converge_with_10_percent_loss(make_lan):
    """Lossy links slow discovery down but do not stop it."""
    lan = make_lan(5)
    for host in lan.hosts:
        host.drop_incoming(10)
    for host in lan.hosts:
        host.start_agent()
    wait_all_see(lan.hosts, names_of(lan.hosts), 40)


def test_a_cut_off_host_is_marked_dead_and_comes_back(make_lan):
    """Unplugging a machine makes it failed; plugging it back makes it alive."""
    lan = make_lan(4)
    for host in lan.hosts:
        host.start_agent()
    wait_all_see(lan.hosts, names_of(lan.hosts), 20)
    victim, others = lan.hosts[3], lan.hosts[:3]
    victim.cut()
    wait_all_see(others, ["host-4"], 30, status="dead")
    victim.reconnect()
    # It refutes as soon as anyone reaches it: the others' reconnect pings
    # (membership/reconnect.py) or its own probes and gossip.
    wait_all_see(lan.hosts, names_of(lan.hosts), 60)


def test_discovery_works_while_ipv6_is_half_configured(make_lan):
    """Duplicate-address detection failing on IPv6 does not stall discovery.

    Two hosts get the same IPv6 address with DAD on, so one of them holds a
    `dadfailed` address and both start with tentative addresses: the state
    in which Serf's mDNS query is abandoned for a minute.
    """
    lan = make_lan(3, disable_dad=False)
    for host in lan.hosts:
        host.run("sysctl", "-q", "-w", "net.ipv6.conf.eth0.accept_dad=1")
        host.run("ip", "-6", "addr", "add", "fd00:5:5::1/64", "dev", "eth0")
    for host in lan.hosts:
        host.start_agent()
    wait_all_see(lan.hosts, names_of(lan.hosts), 20)
    states = " ".join(h.run("ip", "-6", "addr", "show", "dev", "eth0") for h in lan.hosts)
    assert "dadfailed" in states or "tentative" in states


def test_a_static_seed_list_works_when_multicast_is_blocked(make_lan):
    """Where the network filters mDNS, `--join` addresses still form the cluster."""
    lan = make_lan(4)
    for host in lan.hosts:
        host.block_multicast()
    seed = lan.hosts[0]
    seed.start_agent()
    for host in lan.hosts[1:]:
        host.start_agent(extra=("--join", seed.ip))
    wait_all_see(lan.hosts, names_of(lan.hosts), 20)
    assert not any("discovered peer" in h.log() for h in lan.hosts)


def _logged_at(host, event):
    """When `host`'s agent first logged `event` (seconds since the epoch)."""
    for line in host.log().splitlines():
        if line.startswith("{"):
            record = json.loads(line)
            if record.get("event") == event:
                return datetime.fromisoformat(record["timestamp"]).timestamp()
    return None


def test_discovery_waits_for_an_answering_seed_and_not_for_a_dead_one(make_lan):
    """With `--join`, discovery starts 5 s after a seed answered; with a seed
    that never answers it starts at once, and the agent still gets in."""
    lan = make_lan(3)
    first, seeded, stranded = lan.hosts
    first.start_agent()
    # The seed must be listening before the join, or the join fails and discovery
    # starts at once, which is the other case.
    poll_until(lambda: _logged_at(first, "agent started"), 20)
    seeded.start_agent(extra=("--join", first.ip))
    stranded.start_agent(extra=("--join", "10.250.0.1"))  # nobody there
    wait_all_see(lan.hosts, names_of(lan.hosts), 20)
    poll_until(lambda: all(_logged_at(h, "discovery started") for h in lan.hosts), 20)

    def wait_s(host):
        return _logged_at(host, "discovery started") - _logged_at(host, "agent started")

    assert wait_s(seeded) >= 5.0
    assert wait_s(stranded) < 5.0
    assert _logged_at(stranded, "join failed: no answer") is not None


def test_a_partitioned_lan_heals_into_one_cluster(make_lan):
    """Split in two halves, each side declares the other failed; healed, they merge."""
    lan = make_lan(4)
    for host in lan.hosts:
        host.start_agent(extra=("--profile", "local"))
    wait_all_see(lan.hosts, names_of(lan.hosts), 20)
    left, right = lan.hosts[:2], lan.hosts[2:]
    lan.partition(left, right)
    wait_all_see(left, names_of(right), 40, status="dead")
    wait_all_see(right, names_of(left), 40, status="dead")
    lan.heal(lan.hosts)
    wait_all_see(lan.hosts, names_of(lan.hosts), 60)


def test_a_node_that_left_is_no_longer_advertised(make_lan):
    """After `shoal leave` the agent withdraws its advertisement and stays out; a
    newcomer that starts afterwards discovers the members but not the one that
    left, and the one that left does not join the newcomer by itself. The leave comes
    right after start, while the advertisement may still be registering."""
    lan = make_lan(4)
    first = lan.hosts[:3]
    for host in first:
        host.start_agent()
    wait_all_see(first, names_of(first), 20)
    leaver = first[2]
    leaver.post("/v1/leave")
    wait_all_see(first[:2], ["host-3"], 10, status="left")
    newcomer = lan.hosts[3].start_agent(extra=("--log-level", "debug"))
    wait_all_see([newcomer], ["host-1", "host-2"], 20)

    def resolved(name: str) -> bool:  # or found a member already, by its label
        return any("discovered peer" in line and (f'"{name}"' in line or f'"{name}-' in line)
                   for line in newcomer.log().splitlines())  # fmt: skip

    # Once the newcomer has found both advertised members by mDNS, the third
    # would have been found in the same browse, had it been there.
    poll_until(lambda: resolved("host-1") and resolved("host-2"), 20)
    assert not resolved("host-3")
    assert newcomer.members().get("host-3") in (None, "left")
    assert "discovered peer, joining" not in leaver.log().split('"member-left"')[-1]


def test_an_encrypted_cluster_is_found_only_by_agents_with_its_key(make_lan):
    """Encrypted agents find each other by multicast; one without the key
    stays out and logs why, instead of retrying silently."""
    from shoal.daemon.keys import generate_key

    key = generate_key()
    lan = make_lan(4)
    ours = lan.hosts[:3]
    for host in ours:
        host.start_agent(extra=("--encrypt", key))
    keyless = lan.hosts[3].start_agent()
    wait_all_see(ours, names_of(ours), 20)
    poll_until(lambda: "it needs the cluster key and this agent has none" in keyless.log(), 15)
    poll_until(lambda: "it sends plaintext and this agent requires encryption" in ours[0].log(),
               15)  # fmt: skip
    for host in ours:
        assert "host-4" not in host.members()
    assert set(keyless.members()) == {"host-4"}
