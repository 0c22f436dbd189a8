#!/usr/bin/env python3
"""What the node's per-datagram test for lost senders costs (SwimNode.heard_from).

`ShoalNode.receive_all` asks membership's `table.lost` (the addresses of the
members held suspect or dead) about the sender of every datagram, when it is
not empty, so that any datagram from a lost member is a sign of a heal. This
times `receive_all` for one datagram, on one node knowing `--members`
others, in three states:

- quiet: nobody lost (the test is one truth test of an empty dict);
- lost: one member dead, the datagram from another (one dict lookup);
- from the lost: the datagram from the dead member itself (the lookup, and
  the sign: `Reconnects.sign`).

Two datagrams: a late `Ack` (the cheapest thing membership handles: counted,
nothing sent) and a `NoticeQuery` (the election's; a member asks for a
notice, and a node that is not the controller drops it). Last, the test
alone, timed by itself. Figures: SwimNode.heard_from's docstring. On a
busy machine the first three columns move by more than the test costs
(take the best of several runs); the last line is steadier.

    .venv/bin/python bench/heard_from.py [--members 60] [--repeat 5] [--number 200000]
"""

from __future__ import annotations

import argparse
import random
import timeit
from typing import Any

from shoal.election.messages import NoticeQuery
from shoal.membership.member import NodeIdentity
from shoal.membership.messages import Ack, Alive, Dead
from shoal.membership.profiles import PROFILES
from shoal.node.composition import ShoalNode


def ident(i: int) -> NodeIdentity:
    """Member `i`'s identity."""
    addr = (f"10.0.{i // 256}.{i % 256}", 7946)
    return NodeIdentity(f"n{i}", bytes([i % 256, i // 256]) * 8, addr)


def node(members: int, dead: bool) -> ShoalNode:
    """n0 knowing n1..n`members`, with n1 dead if `dead`."""
    n = ShoalNode(ident(0), PROFILES["lan"], random.Random(1))
    n.start(0.0)
    n.receive_all([Alive(1, ident(i)) for i in range(1, members + 1)], ident(1).addr, 0.0)
    if dead:
        n.receive_all([Dead(1, "n1", "n2")], ident(2).addr, 0.0)
    n.drain()
    return n


def per_datagram_ns(cases: list[tuple[ShoalNode, list[Any], int]], repeat: int,
                    number: int) -> list[float]:  # fmt: skip
    """For each (node, messages, sender) the best of `repeat` timings of
    `receive_all`, in ns per datagram; the cases take turns, so that a
    busy machine slows each alike."""
    best = [float("inf")] * len(cases)
    for _ in range(repeat):
        for k, (n, messages, sender) in enumerate(cases):
            addr = ident(sender).addr
            receive = n.receive_all

            def run() -> None:
                for _ in range(number):
                    receive(messages, addr, 10.0)

            best[k] = min(best[k], timeit.timeit(run, number=1) / number * 1e9)
            n.drain()
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--members", type=int, default=60)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--number", type=int, default=200_000)
    args = parser.parse_args()
    print(f"receive_all of one datagram, {args.members} members, best of {args.repeat} "
          f"x {args.number}")  # fmt: skip
    print("datagram     quiet_ns  lost_ns  from_lost_ns")
    for label, messages in (("late Ack", [Ack(999_999)]), ("NoticeQuery", [NoticeQuery(1)])):
        cases = [(node(args.members, False), messages, 3), (node(args.members, True), messages, 3),
                 (node(args.members, True), messages, 1)]  # fmt: skip
        quiet, lost, heard = per_datagram_ns(cases, args.repeat, args.number)
        print(f"{label:11s}  {quiet:8.0f}  {lost:7.0f}  {heard:12.0f}")
    print("the test alone (receive_all's two lines), ns:", test_alone_ns(args.repeat, args.number))


def test_alone_ns(repeat: int, number: int) -> str:
    """`lost and sender in lost` timed by itself: nobody lost, and one
    member lost that is not the sender (the loop's own cost subtracted)."""
    sender = ident(3).addr
    out = []
    for lost in ({}, {ident(1).addr: ("n1", 0.0)}):
        env = {"lost": lost, "sender": sender}
        test = min(timeit.repeat("lost and sender in lost", globals=env, number=number,
                                 repeat=repeat))  # fmt: skip
        empty = min(timeit.repeat("pass", globals=env, number=number, repeat=repeat))
        out.append(f"{(test - empty) / number * 1e9:.0f}")
    return f"nobody lost {out[0]}, a member lost {out[1]}"


if __name__ == "__main__":
    main()
