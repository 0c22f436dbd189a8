"""A real partition between network namespaces: the minority side never has a
controller, the majority elects one with a higher epoch, and after the heal
there is exactly one."""

import time

import pytest

from tests.conftest import poll_until

pytestmark = [pytest.mark.root, pytest.mark.netns]


def controller_of(host):
    try:
        return host.api("/v1/controller")
    except OSError:
        return None


def agreed(hosts):
    seen = {(c["controller"], c["epoch"]) if c else None for c in map(controller_of, hosts)}
    if len(seen) == 1:
        (only,) = seen
        if only and only[0] is not None:
            return only
    return None


def test_the_minority_side_of_a_partition_never_has_a_controller(make_lan):
    lan = make_lan(5)
    for host in lan.hosts:
        host.start_agent(extra=("--bootstrap-expect", "5"))
    name, epoch = poll_until(lambda: agreed(lan.hosts), 40)
    old = next(h for h in lan.hosts if f"host-{h.index}" == name)
    minority = [old, next(h for h in lan.hosts if h is not old)]
    majority = [h for h in lan.hosts if h not in minority]
    lan.partition(minority, majority)
    cut_at = time.monotonic()
    new = poll_until(lambda: (f := agreed(majority)) and f[1] > epoch and f, 15)
    assert new[0] != name
    # From one lease (2 s, plus the drift margin) after the cut, no minority
    # node may claim the lease; watch for a while.
    poll_until(lambda: time.monotonic() > cut_at + 2.2, 5)
    watch_until = time.monotonic() + 6.0

    def minority_quiet_until_the_end() -> bool:
        for host in minority:
            info = controller_of(host)
            assert not (info and info["is_self"]), f"{host.ns} claims the lease while cut off"
        return time.monotonic() > watch_until

    poll_until(minority_quiet_until_the_end, 10, interval_s=0.1)
    lan.heal(lan.hosts)
    final = poll_until(lambda: agreed(lan.hosts), 30)
    holders = [h for h in lan.hosts if (controller_of(h) or {}).get("is_self")]
    assert len(holders) == 1 and final[1] >= new[1]
