"""The data directory's format on real agents (issue 43): an older directory
is migrated, even across a kill -9 in the middle of the migration; one this
build must not touch is refused in one line and left as it was."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import cbor2
import pytest

from shoal import __version__
from tests.conftest import poll_until, tree_digest
from tests.integration.agents import AgentCluster, AgentProcess, shoal_cli

SOLO = ["--no-discovery"]


def write_stop(agents: AgentCluster) -> tuple[AgentProcess, str]:
    """An agent of this build that wrote a key and stopped; its node id."""
    agent = agents.add(extra=SOLO)
    poll_until(lambda: agent.status_of(agent.name) == "alive", 15)
    out = shoal_cli("kv", "put", "--api", f"{agent.ip}:7947", "app/config", "v1")
    assert out.returncode == 0, out.stderr
    node_id: str = agent.api.get("/v1/self")["node_id"]
    agent.signal(signal.SIGTERM)
    assert agent.wait_exit(15) == 0
    return agent, node_id


def paused_then_killed(agent: AgentProcess, fifo: Path, point: str) -> None:
    """Start `agent` with the test-only pause at `point` of the migration,
    wait until it is there, and kill it with SIGKILL."""
    os.mkfifo(fifo)
    agent.env = {"SHOAL_TEST_MIGRATION_PAUSE": point, "SHOAL_TEST_MIGRATION_FIFO": str(fifo)}
    agent.start()
    assert agent.proc is not None
    marker = Path(f"{fifo}.paused")
    poll_until(lambda: not agent.running() or
               (marker.exists() and marker.read_text() == str(agent.proc.pid)), 30)  # fmt: skip
    assert agent.running(), agent.log()
    agent.kill()
    agent.env = {}


def started_again(agent: AgentProcess) -> dict[str, object]:
    agent.start()
    poll_until(lambda: not agent.running() or agent.status_of(agent.name) == "alive", 15)
    assert agent.running(), agent.log()
    me: dict[str, object] = agent.api.get("/v1/self")
    return me


def format_of(agent: AgentProcess) -> dict[str, object]:
    record: dict[str, object] = json.loads((agent.data_dir / "FORMAT").read_text())
    return record


@pytest.mark.parametrize("phase", ["applied", "recorded"])
def test_a_kill_9_in_the_middle_of_a_migration_leaves_a_directory_that_starts(
    agents, tmp_path, phase
):  # fmt: skip
    """An agent killed while it migrates an older directory starts again as
    the same node with its data, and the directory ends at format 1."""
    agent, node_id = write_stop(agents)
    (agent.data_dir / "FORMAT").unlink()  # what a build before format 1 left
    paused_then_killed(agent, tmp_path / "pause", f"1:{phase}")
    # Killed after the step's changes (applied) or after FORMAT (recorded).
    assert (agent.data_dir / "FORMAT").exists() == (phase == "recorded")
    me = started_again(agent)
    assert (me["node_id"], me["data_format"]) == (node_id, 1)
    assert agent.api.get("/v1/kv/app/config")["value"] == "v1"
    assert format_of(agent) == {"format": 1, "cluster": "shoal", "node_id": node_id,
                                "written_by": f"shoal {__version__}"}  # fmt: skip
    info = shoal_cli("info", "--api", f"{agent.ip}:7947")
    assert "data_format = 1" in info.stdout, info.stderr


@pytest.mark.parametrize("phase", ["applied", "recorded"])
def test_a_version_0_1_directory_killed_while_its_identity_is_imported_keeps_its_node_id(
    agents, tmp_path, phase
):  # fmt: skip
    """The 0.1 identity file stays until FORMAT is durable; a kill before or
    after FORMAT loses nothing, and the next start retires the file."""
    agent = AgentProcess("old-node", tmp_path, [], SOLO)
    agents.agents.append(agent)
    agent.data_dir.mkdir()
    node_id = bytes(range(16))
    (agent.data_dir / "identity.cbor").write_bytes(
        cbor2.dumps({"node_id": node_id, "incarnation": 5}))  # fmt: skip
    paused_then_killed(agent, tmp_path / "pause", f"1:{phase}")
    assert (agent.data_dir / "identity.cbor").exists()
    assert (agent.data_dir / "FORMAT").exists() == (phase == "recorded")
    me = started_again(agent)
    assert me["node_id"] == node_id.hex() and int(str(me["incarnation"])) > 5
    assert format_of(agent)["node_id"] == node_id.hex()
    assert sorted(p.name for p in agent.data_dir.glob("identity*")) == ["identity.cbor.imported"]


def test_a_directory_this_build_must_not_touch_is_refused_untouched_and_runs_once_restored(
    agents,
):  # fmt: skip
    """A newer format, a damaged FORMAT or another cluster's directory: one
    line, exit 2, not a byte changed (not even LOCK); with its FORMAT back
    the directory starts with its data."""
    agent, node_id = write_stop(agents)
    d = agent.data_dir
    good = (d / "FORMAT").read_bytes()
    (d / "LOCK").unlink()  # as in a copy restored from a backup: must not appear
    newer = json.dumps({"format": 2, "cluster": "shoal", "written_by": "shoal 9.0.0"})
    cases = [
        (newer, [], f"{d} is format 2, written by shoal 9.0.0; this build (shoal "
         f"{__version__}) reads formats 0 to 1: run the newer shoal, or restore the copy "
         "of the directory from before the upgrade"),
        ('{"format": 1, "clus', [], f"{d}/FORMAT is damaged or not shoal's (no format "
         "number); this build writes format 1: restore the file from a backup, or move "
         "the directory away"),
        (good.decode(), ["--cluster", "other"], f"{d} belongs to cluster 'shoal' (format 1), "
         "not 'other': set cluster to 'shoal' or use another data_dir"),
    ]  # fmt: skip
    for content, flags, line in cases:
        (d / "FORMAT").write_text(content)
        before = tree_digest(d)
        out = shoal_cli(
            "agent",
            "--node-name",
            agent.name,
            "--bind",
            agent.gossip,
            "--api",
            f"{agent.ip}:7947",
            "--data-dir",
            str(d),
            *SOLO,
            *flags,
        )
        assert (out.returncode, out.stderr.splitlines()) == (2, [f"shoal: data_dir: {line}"])
        assert tree_digest(d) == before
    (d / "FORMAT").write_bytes(good)
    me = started_again(agent)
    assert me["node_id"] == node_id
    assert agent.api.get("/v1/kv/app/config")["value"] == "v1"
