"""The responder's side of anti-entropy: answering another node's session.

A session's initiator (storage/initiator.py) walks the two Merkle trees
top-down; this answers each of its requests from the store alone. The
responder keeps no session state: each request names everything needed to
answer it, so a crashed or slow initiator costs the responder nothing.

- `SyncTree` (the initiator's sums at one level, under the nodes that
  differed at the level above) is answered by `SyncTreeDiff`: the nodes
  whose sums differ, with our record counts under them;
- `SyncDigests` (the initiator's (key, version) under the differing
  subtrees) by `SyncRecords`: our newer records, up to the session's byte
  budget, and the keys of which we want the initiator's version.

A malformed request (a level or an index outside the tree) is counted as
`unexpected` and dropped; a tree of another depth as `depth_mismatch`.
"""

from __future__ import annotations

from collections.abc import Callable

from shoal.kernel.contract import Address, Channel, Send
from shoal.storage.config import SESSION_BUDGET_BYTES
from shoal.storage.merkle import FANOUT
from shoal.storage.messages import SyncDigests, SyncRecords, SyncTree, SyncTreeDiff
from shoal.storage.records import Record, frame_size
from shoal.storage.store import Replica
from shoal.storage.syncstate import SyncCounters


class Responder:
    """Answers the anti-entropy requests of other nodes' sessions."""

    def __init__(
        self,
        replica: Replica,
        counters: SyncCounters,
        sends: list[Send],
        on_difference: Callable[[], None],
    ) -> None:
        """`sends` is the core's outbox list; `on_difference` is called when
        a session finds the replicas differ (the periodic interval resets)."""
        self.replica = replica
        self.counters = counters
        self._send = sends
        self._on_difference = on_difference

    def on_sync_tree(self, msg: SyncTree, sender: Address, now: float) -> None:
        tree = self.replica.tree
        if msg.depth != tree.depth:
            self.counters.depth_mismatch += 1
            return
        if (
            msg.level > tree.depth
            or (msg.level == 0) != (not msg.parents)
            or any(p >= FANOUT ** (msg.level - 1) for p in msg.parents)
        ):
            self.counters.unexpected += 1
            return
        if msg.level == 0:
            mine = {0: tree.node(0, 0)} if tree.count else {}
        else:
            mine = {i: (s, c) for p in msg.parents for i, s, c in tree.children(msg.level - 1, p)}
        theirs = dict(msg.sums)
        differing = []
        for index in sorted(mine.keys() | theirs.keys()):
            my_sum, my_count = mine.get(index, (0, 0))
            if index not in mine or index not in theirs or my_sum != theirs[index]:
                differing.append((index, my_count))
        if msg.level == 0:
            self.counters.sessions_served += 1
            if differing:
                self._on_difference()
        self._reply(sender, SyncTreeDiff(msg.session, msg.level, tuple(differing)))

    def on_sync_digests(self, msg: SyncDigests, sender: Address, now: float) -> None:
        tree = self.replica.tree
        if any(level > tree.depth or index >= FANOUT**level for level, index in msg.ranges):
            self.counters.unexpected += 1
            return
        theirs = {key: (epoch, stamp, writer) for key, stamp, writer, epoch in msg.versions}
        newer: list[Record] = []
        budget, more = SESSION_BUDGET_BYTES, False
        for rec in self.replica.records_in(msg.ranges):
            other = theirs.pop(rec.key, None)
            if other is None or rec.version > other:
                budget -= frame_size(rec)
                if budget < 0:
                    more = True  # the rest goes in the next session
                    continue
                newer.append(rec)
            elif rec.version < other:
                theirs[rec.key] = other  # keep: we want theirs
        self.counters.records_sent += len(newer)
        self._reply(sender, SyncRecords(msg.session, tuple(newer), tuple(theirs), more))

    def _reply(self, to: Address, msg: SyncTreeDiff | SyncRecords) -> None:
        self._send.append(Send(to, (msg,), Channel.STREAM))
