"""The metadata log in the data directory (daemon/disk/datadir.py): what a
restarted agent finds is exactly the log it last made durable."""

from __future__ import annotations

import pytest

from shoal.daemon.disk.datadir import DataDir
from shoal.kernel.errors import DataDirError
from shoal.metalog.log import PersistLog
from shoal.metalog.messages import Entry
from shoal.metalog.state import MetaDelete, MetaPut, NoOp


def _entries(epoch: int, first: int, n: int) -> tuple[Entry, ...]:
    return tuple(Entry(epoch, i, MetaPut(b"k%d" % i, b"v%d" % epoch, None if i % 2 else i - 1))
                 for i in range(first, first + n))  # fmt: skip


def test_a_log_written_then_cut_and_replaced_comes_back_as_last_written(tmp_path):
    """Appends, a conflicting tail replaced by a shorter one, a reopen: the
    entries are the latest, in order, and nothing of the cut tail is left."""
    data = DataDir(tmp_path, 4, "prod")
    assert data.load_log() == ()
    first = (Entry(1, 1, NoOp()), *_entries(1, 2, 5), Entry(1, 7, MetaDelete(b"k2", 3)))
    data.save_log(PersistLog(1, first))
    data.save_log(PersistLog(4, _entries(2, 4, 2)))  # 4-5 replaced, 6-7 cut
    data.engine.sync()
    data.close()
    again = DataDir(tmp_path, 4, "prod")
    assert again.load_log() == first[:3] + _entries(2, 4, 2)
    again.save_log(PersistLog(6, _entries(3, 6, 1)))
    again.close()
    third = DataDir(tmp_path, 4, "prod")
    assert third.load_log()[-1] == Entry(3, 6, MetaPut(b"k6", b"v3", 5))
    third.close()


def test_a_damaged_log_entry_is_a_clear_error(tmp_path):
    """Bytes that are not an entry make the start fail with one line."""
    data = DataDir(tmp_path, 4, "prod")
    data.engine.local_put(b"meta/log/" + (1).to_bytes(8, "big"), b"\xff\x00")
    with pytest.raises(DataDirError, match="metadata log .* is damaged"):
        data.load_log()
    data.close()
