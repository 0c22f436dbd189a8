"""`[meta] max_snapshot_bytes` on real agents: a follower whose cap is
below the controller's snapshot refuses its chunks and counts them (its
state stays as it was), and takes the snapshot once started with room for
it; a cap out of range stops the agent with one line and exit 2."""

from __future__ import annotations

from shoal.client import Client
from tests.conftest import poll_until
from tests.integration.agents import api_request, shoal_cli

# Snapshots every 20 applied entries, 5 entries kept behind each.
CONFIG = "[meta]\nsnapshot_every = 20\nkeep_entries = 5\n"
VALUE = bytes(16 * 1024)  # 90 keys of 16 KiB: a snapshot of about 1.5 MB


def client_of(agent) -> Client:
    return Client(f"{agent.ip}:7947", timeout=10.0)


def writable(agent) -> bool:
    try:
        status, _ = api_request(agent, "PUT", "/v1/meta/probe", b"x")
    except OSError:  # not listening yet
        return False
    return status == 200


def counters(agent) -> dict[str, int]:
    try:
        return dict(agent.api.get("/v1/self")["counters"])
    except Exception:  # not answering yet
        return {}


def stale(agent, key: str) -> tuple[bytes, int] | None:
    try:
        got = client_of(agent).meta.get(key, stale=True)
    except Exception:
        return None
    return got.value, got.mod_revision


def test_a_follower_refuses_a_snapshot_over_its_cap_and_takes_it_with_room(agents, tmp_path):
    """A follower down during 90 writes of 16 KiB comes back with
    max_snapshot_bytes = 1 MiB: the controller's snapshot (about 1.5 MB)
    is refused chunk by chunk (counted in /v1/self), none of its keys
    appear there, and the cluster keeps writing; started again with the
    default cap, it installs the snapshot and holds every key."""
    (tmp_path / "shoal.toml").write_text(CONFIG)
    (tmp_path / "capped.toml").write_text(CONFIG + "max_snapshot_bytes = 1048576\n")
    started = agents.start(3, extra=["--meta", "--no-discovery",
                                     "--config", str(tmp_path / "shoal.toml")])  # fmt: skip
    agents.wait_all_see([a.name for a in started], "alive", started)
    poll_until(lambda: all(writable(a) for a in started), 30, interval_s=0.2)
    leader = started[0].api.get("/v1/controller")["controller"]
    follower = next(a for a in started if a.name != leader)
    others = [a for a in started if a is not follower]
    follower.kill()
    written = {}
    for i in range(90):
        key = f"big/k{i:02d}"
        written[key] = (VALUE, client_of(others[i % 2]).meta.put(key, VALUE).revision)
    uncapped = list(follower.extra)
    follower.extra = [*uncapped[:-1], str(tmp_path / "capped.toml")]
    follower.start()
    poll_until(lambda: counters(follower).get("meta_snapshot_chunks_too_large", 0) >= 3, 60,
               interval_s=0.2)  # fmt: skip
    seen = counters(follower)
    assert seen["meta_snapshots_installed"] == 0
    assert all(stale(follower, key) is None for key in written)
    # The other two still commit writes.
    assert client_of(others[0]).meta.put("after", "x").revision > 0
    follower.kill()
    follower.extra = uncapped
    follower.start()
    poll_until(lambda: all(stale(follower, key) == want for key, want in written.items()), 60,
               interval_s=0.2)  # fmt: skip
    back = counters(follower)
    assert back["meta_snapshots_installed"] >= 1
    assert back["meta_snapshot_chunks_too_large"] == 0  # a new run: counters start at 0


def test_a_cap_out_of_range_is_one_line_and_exit_2(tmp_path):
    config = tmp_path / "shoal.toml"
    config.write_text("[meta]\nmax_snapshot_bytes = 1000\n")
    out = shoal_cli("agent", "--node-name", "capped", "--meta", "--no-discovery",
                    "--config", str(config), "--data-dir", str(tmp_path / "data"))  # fmt: skip
    assert out.returncode == 2
    (line,) = out.stderr.strip().splitlines()
    assert line.startswith("shoal: meta.max_snapshot_bytes = 1000")
    assert line.endswith(": max_snapshot_bytes must be 1 MiB (1048576) to 1 TiB")
