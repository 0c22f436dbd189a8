"""A restore's kv records beside live ephemeral keys, on real agents
(docs/operations.md, "Restoring": "Ephemeral keys are left alone either
way"): a backed-up plain record under a key that an open session (or a
live member) holds now does not overwrite it, under `--kv merge` or
`--kv replace`; `--kv replace` does not delete a live ephemeral key the
backup lacks; the answer counts the records left alone; the session still
owns its keys (closing it deletes them). And a session's write racing the
restore is ordered as any two writes are: never replaced by an older
version, and a key the session still holds at the end is its own.
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

WRITER = b"\x09" * 16  # the agent that saved the backup: none of these


def backup_file(records: dict[str, str]) -> bytes:
    """A backup of one metadata key and these plain kv records."""
    state = MetaState()
    state.apply(1, MetaPut(b"cfg/0", b"restored"))
    recs = [Record(k.encode(), v.encode(), 1 << 40, WRITER) for k, v in sorted(records.items())]
    return build_backup({"cluster": "shoal", "meta_keys": 1}, snap.take(state, 1), recs)


def held(agent: AgentProcess, key: str) -> tuple[Any, ...] | None:
    """`key` as `agent` serves it: (value, hlc, ephemeral, owner); None: absent."""
    status, body = api_request(agent, "GET", f"/v1/kv/{key}")
    if status == 404:
        return None
    assert status == 200, body
    return body["value"], body["hlc"], body.get("ephemeral", False), body.get("owner")


def everywhere(members: list[AgentProcess], key: str) -> tuple[Any, ...] | None:
    """`key` once every agent serves the same version of it (polled)."""
    seen: list[tuple[Any, ...] | None] = []

    def agreed() -> bool:
        seen[:] = [held(a, key) for a in members]
        return seen[0] == seen[1] == seen[2]

    poll_until(agreed, 30, interval_s=0.2)
    return seen[0]


def restore(file: Any, asked: AgentProcess, mode: str) -> str:
    out = shoal_cli("snapshot", "restore", str(file), "--kv", mode, "--api", f"{asked.ip}:7947")
    assert out.returncode == 0, out.stderr
    return out.stdout.decode()


def test_merge_and_replace_leave_live_ephemeral_keys_alone(agents, tmp_path):
    """A session's key and a member's ephemeral key, each also in the
    backup as a plain record: `merge`, then `replace`, leave both exactly as
    they were on every agent (value, version, owner), and say how many they
    skipped; `replace` deletes a plain key the backup lacks but not a
    session's; closing the session then deletes its keys."""
    started = three(agents)
    asked = started[2]
    assert api_request(started[1], "PUT", "/v1/kv/e/member?ephemeral=1", b"member's")[0] == 200
    assert api_request(started[0], "PUT", "/v1/kv/p/plain", b"stale")[0] == 200
    with client_of(started[0]).session(ttl=60, name="holder") as session:
        session.put("e/session", "session's")
        session.put("e/only-live", "the backup lacks it")
        before = {k: everywhere(started, k) for k in ("e/member", "e/session", "e/only-live")}
        assert all(v is not None and v[2] for v in before.values()), before
        file = tmp_path / "backup.tar"
        file.write_bytes(backup_file({"e/member": "backed up", "e/session": "backed up",
                                      "p/plain": "backed up"}))  # fmt: skip

        said = restore(file, asked, "merge")
        assert everywhere(started, "p/plain")[0] == "backed up"  # type: ignore[index]
        for key, version in before.items():
            assert everywhere(started, key) == version, key
        assert "1 written, 0 deleted, 0 refused, 2 skipped" in said, said

        assert api_request(started[0], "PUT", "/v1/kv/p/extra", b"not in the backup")[0] == 200
        everywhere(started, "p/extra")
        said = restore(file, asked, "replace")
        assert everywhere(started, "p/extra") is None
        for key, version in before.items():
            assert everywhere(started, key) == version, key
        assert "1 written, 1 deleted, 0 refused, 2 skipped" in said, said
    # The session closed: its keys go, as they do only when it still owns them.
    assert everywhere(started, "e/session") is None
    assert everywhere(started, "e/only-live") is None
    assert everywhere(started, "e/member") == before["e/member"]


RECORDS = 3000


def test_a_sessions_writes_racing_a_restore_are_ordered_as_any_writes(agents, tmp_path):
    """While 3,000 records are restored with `merge` through one agent, a
    session writes keys the backup holds, through that agent and another.
    Each key ends as the last of its writes: the session's (ephemeral,
    owned by it: closing the session deletes it), or the restore's (plain,
    with the backup's value, written after the session's): never an older
    version. A write the agent asked acknowledged before the restore was
    sent is skipped by it (it is live there when its batch is written);
    one acknowledged after its answer stays."""
    started = three(agents)
    asked = started[1]
    file = tmp_path / "backup.tar"
    file.write_bytes(backup_file({f"r/{i:05}": f"backed up {i}" for i in range(RECORDS)}))
    acked: dict[str, tuple[str, int, float, bool]] = {}  # key -> (value, hlc, when, via asked)
    stop = threading.Event()
    with client_of(asked).session(ttl=60) as one, client_of(started[0]).session(ttl=60) as two:

        def write() -> None:
            i = 0
            while not stop.is_set():
                key, value = f"r/{i * 7 % RECORDS:05}", f"session's {i}"
                if key not in acked:
                    try:
                        done = (one if i % 2 else two).put(key, value)
                        acked[key] = (value, done.hlc, time.monotonic(), i % 2 == 1)
                    except Exception:  # noqa: BLE001 - an unanswered write: not acked
                        pass
                i += 1

        thread = threading.Thread(target=write, daemon=True)
        thread.start()
        poll_until(lambda: len(acked) > 20, 30)
        sent = time.monotonic()
        said = restore(file, asked, "merge")
        answered = time.monotonic()
        at_answer = len(acked)
        poll_until(lambda: len(acked) > at_answer + 20, 30)
        stop.set()
        thread.join(30)
        final = {k: everywhere(started, k) for k in acked}
        before = [k for k, (_, _, at, here) in acked.items() if at < sent and here]
        during = [k for k, (_, _, at, _) in acked.items() if sent < at < answered]
        assert before and during, (len(before), len(during))
        for key, (value, stamp, at, here) in acked.items():
            got = final[key]
            assert got is not None, key
            if (at < sent and here) or at > answered:
                assert got[:3] == (value, stamp, True), key  # skipped, or made after it
            elif got[1] == stamp:
                assert got[:3] == (value, stamp, True), key  # the session's, the last
            else:  # the restore's, written after the session's
                assert got[1] > stamp and got[0].startswith("backed up") and not got[2], key
        written, skipped = (int(said.split(f" {w}")[0].split()[-1]) for w in ("written", "skipped"))
        assert written + skipped == RECORDS and skipped >= len(before), said
        owned = [k for k, v in final.items() if v is not None and v[2]]
        print(
            f"\nacked {len(acked)}: {len(before)} before (via asked), {len(during)} during; "
            f"{skipped} skipped, {len(owned)} the session's at the end"
        )
    for key in owned:  # still the session's: closing it deleted them
        assert everywhere(started, key) is None, key
