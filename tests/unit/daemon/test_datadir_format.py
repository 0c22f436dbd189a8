"""The data directory's format record (`<data_dir>/FORMAT`) on a real disk:
written, migrated forward, and a directory this build must not touch refused."""

from __future__ import annotations

import json
from pathlib import Path

import cbor2
import pytest

from shoal import __version__
from shoal.daemon.disk.datadir import DataDir
from shoal.kernel.errors import DataDirError
from tests.conftest import tree_digest


def format_record(path: Path) -> dict[str, object]:
    record = json.loads((path / "FORMAT").read_text())
    assert isinstance(record, dict)
    return record


def made(path: Path, cluster: str = "prod") -> bytes:
    """A data directory an agent of this build has used; its node id."""
    data = DataDir(path, 4, cluster)
    node_id = data.load_identity().node_id
    data.save_tags((("rack", "r7"),))
    data.close()
    return node_id


def test_a_new_directory_records_its_format_cluster_and_node(tmp_path):
    """FORMAT is plain JSON: format 1, the cluster, the node id, the build."""
    data = DataDir(tmp_path / "d", 4, "prod")
    node_id = data.load_identity().node_id
    data.close()
    assert format_record(tmp_path / "d") == {
        "format": 1, "cluster": "prod", "node_id": node_id.hex(),
        "written_by": f"shoal {__version__}",
    }  # fmt: skip
    assert not (tmp_path / "d" / "FORMAT.tmp").exists()


def test_a_format_0_directory_is_migrated_and_keeps_its_identity(tmp_path):
    """A directory of a build before FORMAT (no file) starts as the same node."""
    data = DataDir(tmp_path, 4, "prod")
    node_id = data.load_identity().node_id
    data.save_incarnation(7)
    data.close()
    (tmp_path / "FORMAT").unlink()  # the only difference between format 0 and 1
    again = DataDir(tmp_path, 4, "prod")
    assert again.migrated_from == 0
    assert again.load_identity() == type(again.load_identity())(node_id, 7)
    again.close()
    assert format_record(tmp_path)["node_id"] == node_id.hex()
    third = DataDir(tmp_path, 4, "prod")
    assert third.migrated_from == 1
    third.close()


def test_the_identity_file_of_version_0_1_is_imported_once(tmp_path):
    """An upgraded node keeps its node id and incarnation; the old file is
    renamed once FORMAT is durable."""
    node_id = bytes(range(16))
    (tmp_path / "identity.cbor").write_bytes(cbor2.dumps({"node_id": node_id, "incarnation": 9}))
    data = DataDir(tmp_path, 4, "prod")
    assert data.load_identity().node_id == node_id
    assert data.load_identity().incarnation == 9
    data.close()
    assert not (tmp_path / "identity.cbor").exists()
    assert (tmp_path / "identity.cbor.imported").exists()
    assert format_record(tmp_path)["node_id"] == node_id.hex()


def test_a_damaged_identity_file_is_a_clear_error_and_nothing_is_recorded(tmp_path):
    (tmp_path / "identity.cbor").write_bytes(b"\xff\x00garbage")
    with pytest.raises(DataDirError, match="identity.cbor is damaged"):
        DataDir(tmp_path, 4, "prod")
    assert not (tmp_path / "FORMAT").exists()
    assert (tmp_path / "identity.cbor").exists()


NEWER = {"format": 2, "layout": "whatever format 2 is", "written_by": "shoal 9.0.0"}


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (json.dumps(NEWER), "{d} is format 2, written by shoal 9.0.0; this build "
         f"(shoal {__version__}) reads formats 0 to 1: run the newer shoal, or restore "
         "the copy of the directory from before the upgrade"),
        ('{"format": 7, "written_by": "x\\ny"}', f"{{d}} is format 7; this build (shoal "
         f"{__version__}) reads"),
        ("not json at all", "{d}/FORMAT is damaged or not shoal's (no format number); "
         "this build writes format 1: restore the file from a backup, or move the "
         "directory away"),
        ("[1, 2]", "{d}/FORMAT is damaged or not shoal's (no format number)"),
        ('{"format": "1"}', "{d}/FORMAT is damaged or not shoal's (no format number)"),
        ('{"format": true}', "{d}/FORMAT is damaged or not shoal's (no format number)"),
        ('{"format": 0}', "{d}/FORMAT is damaged or not shoal's (no format number)"),
        ('{"format": 1, "node_id": "00"}', "{d}/FORMAT is damaged or not shoal's (no cluster)"),
        ('{"format": 1, "cluster": "prod", "node_id": "zz"}', "(no node_id)"),
        ("", "{d}/FORMAT is damaged or not shoal's (no format number)"),
        (None, "{d} belongs to cluster 'other' (format 1), not 'prod': set cluster to "
         "'other' or use another data_dir"),
    ],
    ids=["newer", "newer-bare", "not-json", "array", "string", "bool", "zero",
         "no-cluster", "bad-node-id", "empty", "other-cluster"],
)  # fmt: skip
def test_a_directory_this_build_must_not_touch_is_refused_and_left_as_it_was(
    tmp_path, content, message
):  # fmt: skip
    """One line naming the directory and the formats; not a byte changed,
    not even a LOCK file created."""
    d = tmp_path / "d"
    made(d, cluster="other" if content is None else "prod")
    if content is not None:
        (d / "FORMAT").write_text(content)
    (d / "LOCK").unlink()  # as a copy restored from a backup may be
    before = tree_digest(d)
    with pytest.raises(DataDirError) as refused:
        DataDir(d, 4, "prod")
    text = str(refused.value)
    assert text.startswith("data_dir: ") and "\n" not in text
    assert message.format(d=d) in text
    assert tree_digest(d) == before


def test_a_format_record_of_another_node_than_the_database_is_refused(tmp_path):
    """A database swapped under FORMAT (another node's, or removed) is not
    taken for this node."""
    made(tmp_path / "a")
    made(tmp_path / "b")
    (tmp_path / "a" / "FORMAT").replace(tmp_path / "b" / "FORMAT")
    with pytest.raises(DataDirError, match="FORMAT names node .* but the database .* holds node"):
        DataDir(tmp_path / "b", 4, "prod")
    again = DataDir(tmp_path / "a", 4, "prod")  # no FORMAT now: format 0, migrated
    again.close()


def test_the_tags_file_is_written_atomically_beside_the_format_record(tmp_path):
    """`shoal tags` still leaves plain JSON and no temporary file."""
    made(tmp_path)
    assert json.loads((tmp_path / "tags.json").read_text()) == {"rack": "r7"}
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")) == []
