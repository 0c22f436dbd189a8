"""HybridClock: a hybrid logical clock (Kulkarni et al., "Logical Physical
Clocks", 2014), packed into one 64-bit integer.

A timestamp is ``physical_ms << 16 | logical``: the wall-clock millisecond
in the high 48 bits and a counter in the low 16, so timestamps compare as
plain ints and fit a CBOR uint64 on the wire.

- `now(wall_ms)` (a local write) returns a value above every value this
  clock has returned or observed, and at least the wall clock: ``max(last +
  1, wall_ms << 16)``. More than 65,535 writes in one millisecond carry into
  the physical part, so the clock runs a little ahead instead of going
  backwards.
- `observe(remote, wall_ms)` (a record from a peer) moves the clock up to a
  remote timestamp, so a later local write orders after it. A remote
  timestamp more than `max_skew_ms` ahead of our wall clock is refused (the
  caller counts and drops the record): one peer with a clock set to 2099
  could otherwise drag every clock in the cluster into the future, after
  which no honest write could ever win again. With that bound the clock's
  physical part never exceeds our wall clock plus `max_skew_ms`.

The clock is pure: wall time comes in as an argument.
"""

from __future__ import annotations

LOGICAL_BITS = 16
LOGICAL_MASK = (1 << LOGICAL_BITS) - 1
MAX_HLC = 2**64 - 1


def pack(physical_ms: int, logical: int = 0) -> int:
    """The timestamp for `physical_ms` and counter `logical`."""
    return physical_ms << LOGICAL_BITS | logical


def physical_ms(hlc: int) -> int:
    """The wall-clock millisecond part of a timestamp."""
    return hlc >> LOGICAL_BITS


class HybridClock:
    """One node's hybrid logical clock (see the module docstring)."""

    __slots__ = ("last", "max_skew_ms", "refused")

    def __init__(self, max_skew_ms: int, last: int = 0) -> None:
        """Start a clock.

        Args:
            max_skew_ms: how far ahead of our wall clock a remote timestamp
                may be and still be accepted.
            last: the highest timestamp known from a previous run (the
                newest record in the store), so a restart after the wall
                clock stepped back still moves forward.
        """
        self.max_skew_ms = max_skew_ms
        self.last = last
        self.refused = 0

    def now(self, wall_ms: int) -> int:
        """A fresh timestamp for a local write, above all seen so far."""
        self.last = max(self.last + 1, wall_ms << LOGICAL_BITS)
        assert self.last <= MAX_HLC
        return self.last

    def acceptable(self, remote: int, wall_ms: int) -> bool:
        """Whether a remote timestamp is within the skew bound."""
        return physical_ms(remote) <= wall_ms + self.max_skew_ms

    def observe(self, remote: int, wall_ms: int) -> bool:
        """Take in a remote timestamp; False (and counted) if it is too far
        in the future to accept."""
        if not self.acceptable(remote, wall_ms):
            self.refused += 1
            return False
        if remote > self.last:
            self.last = remote
        return True
