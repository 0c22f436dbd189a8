"""A restore's kv records on real agents, written in batches (daemon/api/snapshot.py):
thousands of records restored with `--kv replace` leave every agent with
exactly the backup's records, and an ordinary write made while the restore
runs wins or loses as against any other write (docs/operations.md,
"Restoring"): never to a version stamped before it.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from shoal.daemon.backup import build_backup
from shoal.metalog import snapshot as snap
from shoal.metalog.state import MetaPut, MetaState
from shoal.storage.records import Record
from tests.conftest import poll_until
from tests.integration.agents import AgentProcess, api_request
from tests.integration.metaagents import client_of, shoal_cli, three

RECORDS = 5000


def backup_file() -> bytes:
    """A backup of two metadata keys and RECORDS kv records (r/00000...,
    100 bytes each, one of them `fenced`), as another agent saved it."""
    state = MetaState()
    for i in range(2):
        state.apply(i + 1, MetaPut(f"cfg/{i}".encode(), b"restored"))
    writer = b"\x09" * 16
    records = [Record(b"r/%05d" % i, b"%05d" % i + b"b" * 95, 1 << 40, writer)
               for i in range(RECORDS)]  # fmt: skip
    records.append(Record(b"s/fenced", b"fenced in the backup", 1 << 40, writer, 1))
    return build_backup({"cluster": "shoal", "meta_keys": 2}, snap.take(state, 2), records)


def kv_listing(agent: AgentProcess) -> dict[str, tuple[str, int, str]]:
    """Every visible key: (value, hlc, writer's name), read page by page."""
    out: dict[str, tuple[str, int, str]] = {}
    after = ""
    while True:
        status, body = api_request(agent, "GET", f"/v1/kv/?prefix=&limit=10000&after={after}")
        assert status == 200, body
        out.update({i["key"]: (i["value"], i["hlc"], i["writer"]) for i in body["items"]})
        if body["next_after"] is None:
            return out
        after = body["next_after"]


class Writer:
    """Sequential puts through the agents in turn, each key written once:
    new keys (w/...) and keys the backup holds (r/...), alternately; the
    acknowledged ones: key -> (value, hlc, when acknowledged)."""

    def __init__(self, members: list[AgentProcess]) -> None:
        self.members = members
        self.acked: dict[str, tuple[str, int, float]] = {}
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        i = 0
        while not self.stopped.is_set():
            key = f"w/{i:05}" if i % 2 else f"r/{i * 7 % RECORDS:05}"
            value = f"written {i}"
            try:
                status, body = api_request(self.members[i % 3], "PUT", f"/v1/kv/{key}",
                                           value.encode(), 5.0)  # fmt: skip
            except OSError:
                status, body = 0, None
            if status == 200:
                self.acked[key] = (value, body["hlc"], time.monotonic())
            i += 1

    def stop(self) -> None:
        self.stopped.set()
        self.thread.join(30)


def test_a_replace_restore_leaves_every_agent_exactly_the_backups_kv_records(agents, tmp_path):
    """5,000 kv records restored with --kv replace: every agent lists the
    backup's records (written anew by the agent asked; a fenced one
    fenced), the live keys it does not hold are gone; and no write
    acknowledged while the restore ran is replaced by an older version:
    one the restore reached after it is overwritten (its version is newer),
    one made after the restore's answer stays."""
    started = three(agents)
    asked = started[1]
    epoch = client_of(started[0]).controller().epoch
    for key, value in (("r/00003", "stale"), ("gone/1", "x"), ("gone/2", "y")):
        assert api_request(started[0], "PUT", f"/v1/kv/{key}", value.encode())[0] == 200
    assert api_request(started[0], "PUT", f"/v1/kv/s/fenced?fence={epoch}", b"live")[0] == 200
    file = tmp_path / "backup.tar"
    file.write_bytes(backup_file())
    writer = Writer(started)
    poll_until(lambda: len(writer.acked) > 20, 30)
    sent = time.monotonic()
    out = shoal_cli("snapshot", "restore", str(file), "--kv", "replace", "--api",
                    f"{asked.ip}:7947")  # fmt: skip
    answered = time.monotonic()
    assert out.returncode == 0, out.stderr
    assert f"{RECORDS + 1} written" in out.stdout.decode() and "0 refused" in out.stdout.decode()
    during = [k for k, (_, _, at) in writer.acked.items() if sent < at < answered]
    acked_at_answer = len(writer.acked)
    poll_until(lambda: len(writer.acked) > acked_at_answer + 20, 30)  # writes after it
    writer.stop()
    assert during  # the restore ran while the writer wrote

    listings: list[Any] = []

    def agreed() -> bool:
        listings[:] = [kv_listing(a) for a in started]
        return listings[0] == listings[1] == listings[2]

    poll_until(agreed, 60, interval_s=0.5)
    final = listings[0]
    assert final["s/fenced"][0] == "fenced in the backup"
    for i in range(RECORDS):
        key = f"r/{i:05}"
        if key not in writer.acked:
            assert final[key][0] == f"{i:05}" + "b" * 95 and final[key][2] == asked.name
    assert "gone/1" not in final and "gone/2" not in final
    for key, (value, stamp, at) in writer.acked.items():
        if at > answered:
            assert final[key][:2] == (value, stamp)  # made after the restore: it stays
        elif key in final:
            assert final[key][1] >= stamp  # never replaced by an older version
            if final[key][1] > stamp:
                assert final[key][2] == asked.name and final[key][0] != value  # the restore's
        else:
            assert key.startswith("w/")  # listed live before the replace: deleted after it
    assert set(final) <= {f"r/{i:05}" for i in range(RECORDS)} | set(writer.acked) | {"s/fenced"}
