"""A churning cluster, and the history every node would have written.

`run_churn` forms a cluster, then takes each node through sessions and
downtimes drawn from exponential distributions: a session ends in a crash
or, with `leave_ratio`, in a graceful leave (the node stops a second later,
as the agent does after gossiping its leave); a downtime ends in a restart
with the persisted identity, joining through a node that is up. Every node's
history goes to `<dir>/node-NNNNN.history.jsonl`, rows made by the same
`history_row` as the agent's, stamped with the node's simulated wall clock.
`truth.json` records what really happened (the ground truth the churn
report is checked against).
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from shoal.membership.member import MemberState, MemberView
from shoal.membership.profiles import PROFILES
from shoal.node.history import JOINED, Observer, history_row, member_row
from shoal.sim.cluster import SIM_WALL_BASE_MS, SimCluster
from shoal.sim.network import LinkProfile
from shoal.sim.scenarios import form_cluster
from shoal.storage.history import encode_row

LEAVE_GRACE_S = 1.0
# No session ends in the last stretch, so that every failure is detected.
QUIET_END_S = 60.0


@dataclass
class ChurnTruth:
    """What happened, in simulated seconds."""

    sessions: list[tuple[str, float, float]] = field(default_factory=list)  # node, start, end
    downtimes: list[tuple[str, float, float, str]] = field(default_factory=list)  # + how

    def to_json(self) -> dict[str, Any]:
        base = SIM_WALL_BASE_MS / 1000
        return {
            "wall_base_s": base,
            "sessions": [{"node": n, "start_s": a, "end_s": b, "length_s": round(b - a, 3)}
                         for n, a, b in self.sessions],
            "downtimes": [{"node": n, "start_s": a, "end_s": b, "length_s": round(b - a, 3),
                           "cause": how} for n, a, b, how in self.downtimes],
        }  # fmt: skip


class HistoryRecorder:
    """A SimObserver writing each node's history file."""

    def __init__(self, cluster: SimCluster, directory: Path, cluster_name: str = "sim") -> None:
        self.cluster = cluster
        directory.mkdir(parents=True, exist_ok=True)
        self.files = [open(directory / f"{ident.name}.history.jsonl", "w")  # noqa: SIM115
                      for ident in cluster.idents]  # fmt: skip
        self.observers = [Observer(cluster_name, ident.name, ident.node_id.hex())
                          for ident in cluster.idents]  # fmt: skip
        self.rows = 0
        cluster.observers.append(self)
        cluster.boot_hooks.append(self.booted)

    def _wall_ms(self, i: int) -> int:
        return SIM_WALL_BASE_MS + round(self.cluster.clocks[i].local(self.cluster.now) * 1000)

    def _write(self, i: int, row: dict[str, Any] | None) -> None:
        if row is not None:
            self.files[i].write(encode_row(row) + "\n")
            self.rows += 1

    def booted(self, i: int) -> None:
        node = self.cluster.nodes[i]
        assert node is not None
        ident = self.cluster.idents[i]
        me = MemberView(ident.name, ident.node_id, ident.addr, ident.tags,
                        node.incarnation, MemberState.ALIVE)  # fmt: skip
        self._write(i, member_row(self.observers[i], self._wall_ms(i), JOINED, me))

    def on_event(self, now: float, node: int, event: Any) -> None:
        self._write(node, history_row(self.observers[node], self._wall_ms(node), event))

    def close(self) -> None:
        for f in self.files:
            f.close()


def run_churn(
    nodes: int,
    duration_s: float,
    out: Path,
    session_mean_s: float = 600.0,
    downtime_mean_s: float = 300.0,
    leave_ratio: float = 0.3,
    seed: int = 1,
    profile: str = "lan",
    loss: float = 0.0,
) -> ChurnTruth:
    """Run the churn scenario; write histories and truth.json into `out`."""
    cluster = SimCluster(nodes, seed, PROFILES[profile], LinkProfile(loss=loss))
    recorder = HistoryRecorder(cluster, out)
    rng = random.Random(seed ^ 0xC4A2)
    truth = ChurnTruth()
    up_since: dict[int, float] = {}
    form_cluster(cluster)
    last_end = duration_s - QUIET_END_S

    def booted(i: int) -> None:
        up_since[i] = cluster.now

    cluster.boot_hooks.append(booted)

    def schedule_session(i: int, start: float) -> None:
        end = start + rng.expovariate(1 / session_mean_s)
        if end >= last_end:
            return
        leave = rng.random() < leave_ratio
        back = end + rng.expovariate(1 / downtime_mean_s)

        def stop() -> None:
            truth.sessions.append((cluster.idents[i].name, up_since.pop(i), end))
            if leave:
                cluster.leave(i, end)
                cluster.crash(i, end + LEAVE_GRACE_S)
            else:
                cluster._halt(i)
            if back < last_end:
                cluster.at(back, restart)

        def restart() -> None:
            truth.downtimes.append((cluster.idents[i].name, end, back,
                                    "left" if leave else "crash"))  # fmt: skip
            peers = [j for j in up_since if j != i]
            cluster.restart(i, back, rng.sample(peers, min(3, len(peers))))
            schedule_session(i, back)

        cluster.at(end, stop)

    cluster.run_until(1.0)  # form_cluster starts everyone within a second
    for i in range(nodes):
        schedule_session(i, up_since[i])
    cluster.run_until(duration_s)
    recorder.close()
    (out / "truth.json").write_text(json.dumps(truth.to_json()))
    return truth
