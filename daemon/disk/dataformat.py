"""The data directory's format record, `<data_dir>/FORMAT`, and the steps
that bring an older directory forward.

FORMAT is a small JSON file an operator or a tool reads without RocksDB::

    {"format": 1, "cluster": "prod", "node_id": "<32 hex digits>",
     "written_by": "shoal 0.2.0"}

`format` is the one field every version keeps. A directory without the file
is format 0 (every build before the record existed). A build reads the
number before it creates, locks or opens anything in the directory, and
refuses one above its own `FORMAT_VERSION`, a file it cannot read as a
record, or a directory of another cluster: the directory is left as it was,
byte for byte, for the build that wrote it (docs/operations.md, "Data
directory format").

An older directory is migrated forward one numbered step at a time, under
the directory's lock. Each step:

1. `apply`: make the new layout durable, keeping the files it replaces.
   It is idempotent: a step killed half-way runs again from the start.
2. record: FORMAT with the step's number (tmp, fsync, rename, fsync of the
   directory). From here on the directory is of the new format.
3. `retire`: rename or remove the files the step replaced. The retire steps
   of the directory's format run again at every start, so a kill between 2
   and 3 is finished by the next start.

Format 1 is FORMAT itself and an identity kept in the database only: step 1
imports version 0.1's `identity.cbor` (or creates the identity of a new
directory) and retires the file as `identity.cbor.imported`. The database is
unchanged, so a build from before format 1 still runs on a format-1
directory (it never reads FORMAT): a rollback needs no restore.

Test-only: `SHOAL_TEST_MIGRATION_PAUSE=<step>:applied` (or `:recorded`)
stops the migration after that phase of that step: the process writes
`<fifo>.paused` (its pid) and then blocks opening the FIFO named by
`SHOAL_TEST_MIGRATION_FIFO` for reading, so a test can see it there and
kill it (tests/integration/test_datadir_format.py).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path

import cbor2
import msgspec
import structlog

from shoal import __version__
from shoal.kernel.errors import DataDirError
from shoal.storage.engine import Engine
from shoal.storage.records import NODE_ID_BYTES

log = structlog.get_logger("shoal")

FORMAT_FILE = "FORMAT"
FORMAT_VERSION = 1  # what this build writes; it reads 0 up to this
NODE_ID = b"node_id"  # the identity's names in the `local` column family
INCARNATION = b"incarnation"
LEGACY_IDENTITY = "identity.cbor"  # version 0.1's identity file (format 0)
PAUSE_ENV = "SHOAL_TEST_MIGRATION_PAUSE"
FIFO_ENV = "SHOAL_TEST_MIGRATION_FIFO"


class FormatRecord(msgspec.Struct, frozen=True):
    """What FORMAT says: the format, the cluster and node it belongs to, and
    the build that wrote it."""

    format: int
    cluster: str
    node_id: bytes
    written_by: str


class MigrationStep(msgspec.Struct, frozen=True):
    """One numbered step: from format `number - 1` to `number`."""

    number: int
    about: str
    apply: Callable[[Path, Engine], None]
    retire: Callable[[Path], None]


def check_format(path: Path, cluster: str) -> FormatRecord | None:
    """The directory's format record, or None for format 0 (or a directory
    not made yet). Reads only: a refusal leaves the directory untouched.

    Raises:
        DataDirError: a newer format, a damaged or foreign FORMAT file, or
            a directory of another cluster.
    """
    file = path / FORMAT_FILE
    try:
        text = file.read_bytes()
    except (FileNotFoundError, NotADirectoryError):
        return None  # (a data_dir that is a file fails where it is created)
    except OSError as exc:
        raise DataDirError(f"data_dir: cannot read {file}: {exc.strerror}") from None
    try:
        raw = json.loads(text)
    except ValueError:
        raw = None
    number = raw.get("format") if isinstance(raw, dict) else None
    if not isinstance(number, int) or isinstance(number, bool) or number < 1:
        raise _foreign(path, "no format number")
    assert isinstance(raw, dict)
    if number > FORMAT_VERSION:
        by = raw.get("written_by")
        raise DataDirError(
            f"data_dir: {path} is format {number}"
            + (f", written by {by}" if _printable(by) else "")
            + f"; this build (shoal {__version__}) reads formats 0 to {FORMAT_VERSION}: "
            "run the newer shoal, or restore the copy of the directory from before the upgrade"
        )  # fmt: skip
    record = _parse(path, number, raw)
    if record.cluster != cluster:
        raise DataDirError(f"data_dir: {path} belongs to cluster {record.cluster!r} "
                           f"(format {number}), not {cluster!r}: set cluster to "
                           f"{record.cluster!r} or use another data_dir")  # fmt: skip
    return record


def migrate(path: Path, engine: Engine, cluster: str, found: FormatRecord | None) -> int:
    """Bring the directory to `FORMAT_VERSION`, step by step; returns the
    format it had (0 for a new directory too).

    Raises:
        DataDirError: the database does not hold the node FORMAT names.
    """
    start = 0 if found is None else found.format
    if found is not None:
        _check_identity(path, engine, found)
    for step in STEPS[:start]:
        step.retire(path)  # finishes a retire a kill cut short
    fresh = (found is None and engine.local_get(NODE_ID) is None
             and not (path / LEGACY_IDENTITY).exists())  # fmt: skip
    began = time.monotonic()
    for step in STEPS[start:]:
        step.apply(path, engine)
        _pause_if_asked(step.number, "applied")
        node_id = engine.local_get(NODE_ID)
        assert node_id is not None, "every format from 1 on has an identity"
        write_format(path, FormatRecord(step.number, cluster, node_id, f"shoal {__version__}"))
        _pause_if_asked(step.number, "recorded")
        step.retire(path)
    if start < FORMAT_VERSION and not fresh:
        log.info("data directory migrated", data_dir=str(path), from_format=start,
                 to_format=FORMAT_VERSION, steps=[s.about for s in STEPS[start:]],
                 seconds=round(time.monotonic() - began, 3))  # fmt: skip
    return start


def write_format(path: Path, record: FormatRecord) -> None:
    """Write FORMAT atomically and durably."""
    body = {"format": record.format, "cluster": record.cluster,
            "node_id": record.node_id.hex(), "written_by": record.written_by}  # fmt: skip
    write_durably(path / FORMAT_FILE, json.dumps(body, indent=2) + "\n")


def write_durably(file: Path, text: str) -> None:
    """Replace `file` with `text` atomically (tmp, fsync, rename) and make
    the rename durable (fsync of the directory)."""
    tmp = file.with_name(file.name + ".tmp")
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, file)
    sync_directory(file.parent)


def sync_directory(path: Path) -> None:
    """fsync a directory: its entries (a create, a rename) survive a crash."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _parse(path: Path, number: int, raw: dict[str, object]) -> FormatRecord:
    cluster, node_id, by = raw.get("cluster"), raw.get("node_id"), raw.get("written_by")
    if not isinstance(cluster, str) or not cluster:
        raise _foreign(path, "no cluster")
    if not isinstance(node_id, str) or len(node_id) != 2 * NODE_ID_BYTES:
        raise _foreign(path, "no node_id")
    try:
        node = bytes.fromhex(node_id)
    except ValueError:
        raise _foreign(path, "no node_id") from None
    return FormatRecord(number, cluster, node, by if isinstance(by, str) else "")


def _printable(text: object) -> bool:
    """Fit for the one line of a refusal (a foreign file may hold anything)."""
    return isinstance(text, str) and text.isprintable() and 0 < len(text) <= 64


def _foreign(path: Path, why: str) -> DataDirError:
    return DataDirError(f"data_dir: {path / FORMAT_FILE} is damaged or not shoal's ({why}); "
                        f"this build writes format {FORMAT_VERSION}: restore the file "
                        "from a backup, or move the directory away")  # fmt: skip


def _check_identity(path: Path, engine: Engine, found: FormatRecord) -> None:
    held = engine.local_get(NODE_ID)
    if held != found.node_id:
        what = "no identity" if held is None else f"node {held.hex()}"
        raise DataDirError(f"data_dir: {path / FORMAT_FILE} names node {found.node_id.hex()} "
                           f"but the database in {path} holds {what}: restore the directory "
                           "from a backup, or move it away")  # fmt: skip


def _pause_if_asked(number: int, phase: str) -> None:
    """The test-only pause (module docstring)."""
    if os.environ.get(PAUSE_ENV) != f"{number}:{phase}":
        return
    fifo = os.environ.get(FIFO_ENV)
    if not fifo:
        raise DataDirError(f"{PAUSE_ENV} is set but {FIFO_ENV} is not")
    Path(fifo + ".paused").write_text(str(os.getpid()))
    with open(fifo, "rb"):  # blocks until a writer opens it (or the test kills us)
        pass


# -- the steps ---------------------------------------------------------------------


def _identity_into_database(path: Path, engine: Engine) -> None:
    """Step 1: the identity lives in the database only: version 0.1's file
    imported, or a new identity made (the database's wins if it has one)."""
    if engine.local_get(NODE_ID) is not None:
        return
    node_id, incarnation = _legacy_identity(path)
    engine.local_put(INCARNATION, incarnation.to_bytes(8, "big"))
    engine.local_put(NODE_ID, node_id)  # last: it says the identity is complete


def _legacy_identity(path: Path) -> tuple[bytes, int]:
    legacy = path / LEGACY_IDENTITY
    try:
        raw = cbor2.loads(legacy.read_bytes())
        node_id, incarnation = raw["node_id"], raw["incarnation"]
        if isinstance(node_id, bytes) and len(node_id) == NODE_ID_BYTES:
            if isinstance(incarnation, int) and incarnation >= 0:
                return node_id, incarnation
    except FileNotFoundError:
        return os.urandom(NODE_ID_BYTES), 0
    except (OSError, ValueError, KeyError, TypeError, cbor2.CBORDecodeError):
        pass
    raise DataDirError(f"data_dir: {legacy} is damaged; move it away")


def _retire_legacy_identity(path: Path) -> None:
    legacy = path / LEGACY_IDENTITY
    if legacy.exists():
        legacy.rename(legacy.with_name(LEGACY_IDENTITY + ".imported"))
        sync_directory(path)


STEPS = (
    MigrationStep(1, "identity in the database only; FORMAT written",
                  _identity_into_database, _retire_legacy_identity),
)  # fmt: skip
assert [s.number for s in STEPS] == list(range(1, FORMAT_VERSION + 1))
