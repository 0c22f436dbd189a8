"""`GET /metrics`: the agent in Prometheus text format (prometheus_client).

One custom collector reads a status snapshot of the agent when scraped
(api/port.py), so nothing is updated on the hot path. Core counters become
`shoal_<core>_<name>_total`; the rest are gauges.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)

from shoal.daemon.api.port import AgentStatus
from shoal.daemon.gcpauses import BUCKETS, GcStatus

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class AgentCollector:
    """Builds the metric families from one agent's status snapshot."""

    def __init__(self, status: AgentStatus) -> None:
        self.status = status

    def collect(self) -> Iterator[Metric]:
        """Every metric family of the snapshot."""
        status = self.status
        node = status.node
        states = Counter(m.state.label for m in node.members)
        members = GaugeMetricFamily("shoal_members", "Members known, by state", labels=["state"])
        for state in ("alive", "suspect", "dead", "left"):
            members.add_metric([state], states.get(state, 0))
        yield members
        yield GaugeMetricFamily("shoal_local_health_score",
                                "Lifeguard local health multiplier (0 is healthy)",
                                value=node.health_score)  # fmt: skip
        if node.clock_offset_ms is not None:
            yield GaugeMetricFamily("shoal_clock_offset_seconds",
                                    "This node's clock minus its peers' (median, from probes)",
                                    value=node.clock_offset_ms / 1000)  # fmt: skip
        yield GaugeMetricFamily("shoal_controller_epoch", "Epoch of the controller this node knows",
                                value=node.epoch if node.epoch is not None else 0)  # fmt: skip
        yield GaugeMetricFamily("shoal_is_controller", "1 while this node holds the lease",
                                value=1 if node.is_controller else 0)  # fmt: skip
        yield GaugeMetricFamily("shoal_store_records", "Replicated records held, tombstones too",
                                value=node.records)  # fmt: skip
        for name, value in sorted(node.counters.items()):
            yield CounterMetricFamily(f"shoal_{name}", f"Core counter {name}", value=value)
        for name, value in sorted(status.counters.items()):
            yield CounterMetricFamily(f"shoal_agent_{name}", f"Agent counter {name}", value=value)
        if status.history_written is not None:
            yield CounterMetricFamily("shoal_history_events_written",
                                      "Rows written to the membership history log",
                                      value=status.history_written)  # fmt: skip
        disk = status.disk
        if disk is not None:
            yield CounterMetricFamily("shoal_store_fsyncs", "Group-commit syncs",
                                      value=disk.fsyncs)  # fmt: skip
            yield CounterMetricFamily("shoal_store_slow_fsyncs", "Group-commit syncs over 100 ms",
                                      value=disk.slow_fsyncs)  # fmt: skip
            yield GaugeMetricFamily("shoal_store_fsync_max_seconds", "The longest sync so far",
                                    value=disk.fsync_max_s)  # fmt: skip
        if status.gc is not None:
            yield from _gc_families(status.gc)


def _gc_families(gc: GcStatus) -> Iterator[Metric]:
    """The collector's pauses by generation: a histogram and the longest."""
    pauses = HistogramMetricFamily("shoal_gc_pause_seconds",
                                   "Python garbage collections: how long each stopped the agent",
                                   labels=["generation"])  # fmt: skip
    longest = GaugeMetricFamily("shoal_gc_pause_max_seconds", "The longest collection so far",
                                labels=["generation"])  # fmt: skip
    for generation in range(3):
        counts, below = gc.buckets[generation], 0
        cumulative = []
        for bound, count in zip((*map(str, BUCKETS), "+Inf"), counts, strict=True):
            below += count
            cumulative.append((bound, below))
        label = [str(generation)]
        pauses.add_metric(label, cumulative, sum_value=gc.seconds[generation])
        longest.add_metric(label, gc.longest[generation])
    yield pauses
    yield longest
    yield GaugeMetricFamily("shoal_gc_frozen_objects",
                            "Objects frozen out of the collector, as last counted",
                            value=gc.frozen)  # fmt: skip
    yield CounterMetricFamily("shoal_gc_thaws", "Full collections that walked the frozen too",
                              value=gc.thawed)  # fmt: skip


def render(status: AgentStatus) -> bytes:
    """The text exposition of one scrape."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(AgentCollector(status))
    return generate_latest(registry)
