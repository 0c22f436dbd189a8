"""A restore's kv batches sized to a time budget per pass of the loop
(daemon/api/snapshot.py `_next_size`, `_next_batch`)."""

from __future__ import annotations

from shoal.daemon.api.snapshot import (
    _KV_BATCH,
    _KV_BATCH_BYTES,
    _KV_BATCH_MIN,
    _KV_BUDGET_S,
    _next_batch,
    _next_size,
)


def test_a_batch_is_sized_to_the_time_budget():
    """A batch that took twice the budget halves the next; a fast one at
    most doubles it; never under the floor nor over the cap."""
    assert _next_size(512, 2 * _KV_BUDGET_S) == 256
    assert _next_size(100, _KV_BUDGET_S / 10) == 200
    assert _next_size(_KV_BATCH, 0.0) == _KV_BATCH
    assert _next_size(64, 100 * _KV_BUDGET_S) == _KV_BATCH_MIN


def test_batches_cover_every_change_once_in_order_within_the_byte_cap():
    """Cut at the size asked, or at the byte cap (the record crossing it
    included), and together exactly the changes."""
    changes = [(b"k%05d" % i, b"v" * 100) for i in range(1000)]
    changes[500] = (b"big", b"x" * _KV_BATCH_BYTES)
    changes[501] = (b"gone", None)
    out, start = [], 0
    while start < len(changes):
        chunk = _next_batch(changes, start, 300)
        assert 0 < len(chunk) <= 300
        out.append(chunk)
        start += len(chunk)
    assert [c for chunk in out for c in chunk] == changes
    assert [len(chunk) for chunk in out] == [300, 201, 300, 199]
