"""The metadata log's follower side: appends and snapshot chunks from the
leader (metalog/core.py, "Following").

A part of `MetaLog` (core.py), which sets everything declared here: a
follower refuses an append or a chunk of an epoch below the highest it
knows or has granted; otherwise it cuts a conflicting tail, appends, and
answers once those entries are durable (the answer rides on the write), or
installs the snapshot once its chunks are all in. Pure.
"""

from __future__ import annotations

from collections.abc import Callable

import msgspec

from shoal.kernel.contract import Address, Send
from shoal.kernel.outbox import Outbox
from shoal.metalog import snapshot as snap
from shoal.metalog.events import MetaCounters
from shoal.metalog.log import Log
from shoal.metalog.messages import Append, AppendAck
from shoal.metalog.snapshot import PersistSnapshot, Snapshot, SnapshotAck, SnapshotChunk
from shoal.metalog.state import MetaState


class Following:
    """The follower's handlers (a part of `MetaLog`)."""

    name: str
    epoch: int | None
    commit: int
    log: Log
    state: MetaState
    snapshot: Snapshot | None
    out: Outbox
    counters: MetaCounters
    _receiver: snap.Receiver
    _highest_epoch: Callable[[], int]
    _saw_epoch: Callable[[int], None]

    def _step_down(self) -> None:
        raise NotImplementedError  # MetaLog's

    def _apply(self, now: float) -> None:
        raise NotImplementedError  # MetaLog's

    def _from_leader(self, epoch: int, sender: Address, read_seq: int) -> bool:
        """Whether to follow a leader of `epoch` (else refused: deposed)."""
        if self.epoch is not None and epoch > self.epoch:
            self._step_down()  # a successor leads: the election will say so too
        highest = self._highest_epoch()
        if epoch < highest or (self.epoch is not None and epoch <= self.epoch):
            self.counters.appends_refused_epoch += 1
            refusal = AppendAck(max(highest, self.epoch or 0), self.name, False,
                                self.log.last_index, read_seq)  # fmt: skip
            self.out.send(Send(sender, (refusal,)))
            return False
        self._saw_epoch(epoch)
        return True

    def _on_append(self, msg: Append, sender: Address, now: float) -> None:
        if not self._from_leader(msg.epoch, sender, msg.read_seq):
            return
        log = self.log
        if msg.prev_index < log.offset:  # compacted here: committed, so the same
            msg = msgspec.structs.replace(msg, prev_index=log.offset, prev_epoch=log.offset_epoch,
                                          entries=tuple(e for e in msg.entries
                                                        if e.index > log.offset))  # fmt: skip
        if log.epoch_at(msg.prev_index) != msg.prev_epoch:
            self.counters.appends_refused_gap += 1
            hint = min(log.last_index, msg.prev_index - 1)
            self.out.send_durable(Send(sender, (AppendAck(msg.epoch, self.name, False, hint,
                                                          msg.read_seq),)))  # fmt: skip
            return
        log.merge(msg.entries)
        matched = msg.prev_index + len(msg.entries)
        write = log.take_persist()
        if write is not None:
            self.out.persist(write)
        ack = AppendAck(msg.epoch, self.name, True, matched, msg.read_seq)
        self.out.send_durable(Send(sender, (ack,)))  # once what it confirms is durable
        commit = min(msg.commit, matched)
        if commit > self.commit:
            self.commit = commit
            self._apply(now)

    def _on_chunk(self, msg: SnapshotChunk, sender: Address, now: float) -> None:
        if not self._from_leader(msg.epoch, sender, 0):
            return
        if msg.index <= self.commit:  # held already (its state, or later)
            self.out.send_durable(Send(sender, (AppendAck(msg.epoch, self.name, True,
                                                          msg.index),)))  # fmt: skip
            return
        received, done = self._receiver.take(msg)
        receiver, counters = self._receiver, self.counters
        counters.snapshot_chunks_refused = receiver.refused
        counters.snapshot_chunks_too_large = receiver.too_large
        counters.snapshot_chunks_inconsistent = receiver.inconsistent
        if done is None:
            self.out.send(Send(sender, (SnapshotAck(msg.epoch, self.name, msg.index, received),)))
            return
        whole, self.state = done
        through = self.log.install(whole.index, whole.epoch)
        self.commit, self.snapshot = whole.index, whole
        self.counters.snapshots_installed += 1
        self.out.persist(PersistSnapshot(whole, through))
        ack = AppendAck(msg.epoch, self.name, True, whole.index)
        self.out.send_durable(Send(sender, (ack,)))  # once the snapshot is durable
