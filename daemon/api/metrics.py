"""`GET /metrics`: the agent in Prometheus text format (prometheus_client).

One custom collector reads the cores' counters and the agent's state when
scraped, so nothing is updated on the hot path. Core counters become
`shoal_<core>_<name>_total`; the rest are gauges.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

if TYPE_CHECKING:
    from shoal.daemon.agent import Agent

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class AgentCollector:
    """Builds the metric families from one agent at scrape time."""

    def __init__(self, agent: Agent) -> None:
        self.agent = agent

    def collect(self) -> Iterator[Metric]:
        """Every metric family, fresh."""
        agent = self.agent
        node = agent.node
        states = Counter(m.state.label for m in node.swim.table.members.values())
        members = GaugeMetricFamily("shoal_members", "Members known, by state", labels=["state"])
        for state in ("alive", "suspect", "dead", "left"):
            members.add_metric([state], states.get(state, 0))
        yield members
        yield GaugeMetricFamily("shoal_local_health_score",
                                "Lifeguard local health multiplier (0 is healthy)",
                                value=node.swim.health.score)  # fmt: skip
        el = node.election
        yield GaugeMetricFamily("shoal_controller_epoch", "Epoch of the controller this node knows",
                                value=el.known[1] if el.known else 0)  # fmt: skip
        yield GaugeMetricFamily("shoal_is_controller", "1 while this node holds the lease",
                                value=1 if el.is_controller else 0)  # fmt: skip
        yield GaugeMetricFamily("shoal_store_records", "Replicated records held, tombstones too",
                                value=node.sync.replica.tree.count)  # fmt: skip
        for name, value in sorted(node.counters().items()):
            yield CounterMetricFamily(f"shoal_{name}", f"Core counter {name}", value=value)
        for name, value in sorted(agent.counters.items()):
            yield CounterMetricFamily(f"shoal_agent_{name}", f"Agent counter {name}", value=value)
        if agent.history is not None:
            yield CounterMetricFamily("shoal_history_events_written",
                                      "Rows written to the membership history log",
                                      value=agent.history.written)  # fmt: skip
        if agent.commits is not None:
            yield CounterMetricFamily("shoal_store_fsyncs", "Group-commit syncs",
                                      value=agent.commits.syncs)  # fmt: skip
            yield CounterMetricFamily("shoal_store_slow_fsyncs", "Group-commit syncs over 100 ms",
                                      value=agent.commits.slow_syncs)  # fmt: skip
            yield GaugeMetricFamily("shoal_store_fsync_max_seconds", "The longest sync so far",
                                    value=agent.commits.slowest_s)  # fmt: skip


def render(agent: Agent) -> bytes:
    """The text exposition of one scrape."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(AgentCollector(agent))  # type: ignore[arg-type]
    return generate_latest(registry)
