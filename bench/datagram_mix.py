#!/usr/bin/env python3
"""Where shoal's datagrams go in a quiet cluster, by message type (the simulator).

bench/detect_vs_serf.py counts UDP datagrams per agent per second beside
Serf's (2.00 at every N: one ping and one ack per agent per probe
interval, memberlist's floor, and nothing else while nothing happens). This
says what shoal's figure is made of, in the simulator (LAN profile,
default lease, no loss, no metadata log, as the bench's agents run): N
agents join through one, `--settle-s` of virtual time pass, then every
datagram sent in `--window-s` is counted by the type of its first message.

Besides the counts it prints the floor of the election as it is designed:
the controller renews its lease with each other voter every
`renew_interval_s` (a request and a grant), and a member may name a
controller only for the lease its last notice vouched for (issue 28), so
every member needs a notice from the controller at each renewal won
(`election/notices.py`). Ping and ack at Serf's figure plus the renewals
are the least shoal can send, however the notices travel.

With `--relay-model`, it also prints what carrying the notices on ping
and ack instead would cost, in a contact model of the same timing (one
ping and one ack per member per second at random phases, renewals won
every second with 1.96 s of lease left; each datagram carries the
sender's freshest notice, the receiver keeps the later end; a member
asks, and is answered at once, 0.25 s before its notice runs out, two
datagrams; the controller also tells every P-th member directly at each
renewal, in turn). P = 1 is today's design.

With `--star`, it prints the arithmetic of the one design that fits under
Serf's figure with an election (docs/performance.md, "Traffic beside
Serf"): the controller pings every member at each renewal, its notice
(and, to a voter, its lease request) riding on the ping and the grant on
the ack, and no other member probes. What that costs is printed beside it:
the controller's own datagrams, and how many members still time a round
trip (Vivaldi coordinates and clock offsets are learned from one's own
direct acks, probing.py).

    .venv/bin/python bench/datagram_mix.py [--sizes 20 50] [--seed 1] [--relay-model]
"""

from __future__ import annotations

import argparse
import collections
import random

from shoal.election.config import LeaseConfig
from shoal.kernel.contract import Address, Channel
from shoal.membership.profiles import PROFILES
from shoal.sim.cluster import SimCluster


def mix(n: int, seed: int, settle_s: float, window_s: float) -> dict[str, float]:
    """Datagrams per agent per second by the type of their first message."""
    cluster = SimCluster(n, seed, PROFILES["lan"])
    cluster.start(0, 0.0, [])
    for i in range(1, n):
        cluster.start(i, 0.01 * i, [0])
    cluster.run_until(settle_s)
    counts: collections.Counter[str] = collections.Counter()

    def sent(i: int, to: Address, messages: tuple[object, ...], channel: Channel) -> None:
        if channel is not Channel.STREAM:
            counts[type(messages[0]).__name__] += 1

    cluster.send_hooks.append(sent)
    cluster.run_until(settle_s + window_s)
    return {kind: c / window_s / n for kind, c in counts.most_common()}


def relay_model(n: int, every: int, loss: float, ask: bool = True, seed: int = 1,
                duration_s: float = 300.0) -> tuple[float, float]:  # fmt: skip
    """(notice datagrams per agent per second, share of member-seconds
    without a known controller) in the contact model of the docstring;
    `every` 0: never told directly; without `ask`, nobody asks."""
    rng = random.Random(seed)
    events = [(k + rng.random(), i) for i in range(n) for k in range(int(duration_s))]
    events += [(k + 0.01, -k - 1) for k in range(int(duration_s))]  # renewal k won
    events.sort()
    until = [0.0] * n  # the end of the lease each member knows; 0 is the controller
    sent = asked = 0
    lapsed_s, last, start = 0.0, 10.0, 10.0  # counted after a start-up
    for t, what in events:
        if t > start:
            for j in range(1, n):
                lapsed_s += max(0.0, t - max(until[j], last))
                if ask and until[j] - 0.25 < t:
                    asked += 1
                    until[j] = until[0]
            last = t
        if what < 0:
            until[0] = t + 1.96
            for j in range(1, n):
                if every and (j - what) % every == 0:
                    sent += t > start
                    if rng.random() >= loss:
                        until[j] = until[0]
            continue
        j = rng.randrange(n - 1)  # any other node, the controller included
        j += j >= what
        for a, b in ((what, j), (j, what)):  # the ping, then the ack
            if rng.random() >= loss:
                until[b] = max(until[a], until[b])
    seconds = duration_s - start
    return (sent + 2 * asked) / seconds / n, lapsed_s / seconds / (n - 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[20, 50])
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--settle-s", type=float, default=40.0)
    parser.add_argument("--window-s", type=float, default=60.0)
    parser.add_argument("--relay-model", action="store_true")
    parser.add_argument("--star", action="store_true")
    args = parser.parse_args()
    lease = LeaseConfig()
    for n in args.sizes:
        per = mix(n, args.seed, args.settle_s, args.window_s)
        voters = min(lease.max_voters, n)
        renewals = 2 * (voters - 1) / lease.renew_interval_s / n
        notices = (n - 1) / lease.renew_interval_s / n
        print(f"\nN = {n}: UDP datagrams per agent per second, by first message "
              f"(simulator, seed {args.seed}, {args.window_s:.0f} s)")  # fmt: skip
        for kind, rate in per.items():
            print(f"  {kind:24} {rate:6.3f}")
        print(f"  {'total':24} {sum(per.values()):6.3f}")
        print(f"  floor: ping + ack 2.000 (Serf's whole figure) + lease renewals "
              f"{renewals:.3f} ({voters} voters) = {2 + renewals:.3f}; notices at each "
              f"renewal won, one datagram each: {notices:.3f}")  # fmt: skip
        if args.relay_model:
            print("  notices relayed on ping and ack (contact model): datagrams per agent "
                  "per s for notices and asks, 0 % / 10 % loss")  # fmt: skip
            for every in (1, 2, 3, 4):
                cost = [relay_model(n, every, loss, True, args.seed)[0] for loss in (0.0, 0.1)]
                print(f"    told directly every {every} renewal(s): "
                      f"{cost[0]:.3f} / {cost[1]:.3f}")  # fmt: skip
            _, lapsed = relay_model(n, 0, 0.0, False, args.seed)
            print(f"    relayed only, nobody asking: members know no controller "
                  f"{lapsed:.0%} of the time")  # fmt: skip
        if args.star:
            star(n, voters, lease)


def star(n: int, voters: int, lease: LeaseConfig) -> None:
    """The controller probes everyone (see the module docstring), per second."""
    per_round = 2 * (n - 1)  # a ping to each member, an ack from each
    # With notices vouching for the lease just won, a voter needs three
    # datagrams a renewal: the request (its ping), the grant (its ack), and
    # the outcome; a notice one renewal behind vouches for lease_s - 2 %
    # - renew_interval_s, which must outlast the next renewal (with margin).
    behind_s = lease.holder_lease_s - lease.renew_interval_s
    print("  controller-led probing (the controller pings every member each renewal):")
    print(f"    notices of the lease just won: {(per_round + voters - 1) / n:.3f} per agent "
          f"(the voters' outcome notices, {voters - 1} a renewal, stay separate)")  # fmt: skip
    print(f"    notices one renewal behind: {per_round / n:.3f} per agent, but they vouch "
          f"for {behind_s:.2f} s against a renewal every {lease.renew_interval_s:.2f} s: "
          f"a lease of 2.2 s or more")  # fmt: skip
    print(f"    the controller alone: {n - 1} datagrams sent and {n - 1} received a second "
          f"(N = 1,000: 999 each way); members timing round trips: 1 of {n} "
          f"(today {n} of {n})")  # fmt: skip


if __name__ == "__main__":
    main()
