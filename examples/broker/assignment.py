"""Which broker leads which partition: the one rule, pure, in one place.

A partition is (topic, number), written "topic/number" in JSON. The broker
on the shoal controller's node computes a new assignment whenever the
topics, the set of live brokers or the controller epoch change, and writes
it to the metadata log's key `assignment` with compare-and-set
(controller.py). Every broker reads it back and serves the partitions it
leads.

The rule is sticky, then balanced:
1. a partition keeps its leader while that broker is live, so a broker that
   comes or goes moves as few partitions (and their in-memory logs) as it can;
2. a partition without a live leader goes to the live broker with the fewest;
3. while one broker leads two or more partitions more than another, one
   moves from the most to the least loaded.
Ties break on the broker id, so every controller computes the same answer
from the same inputs.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field

__all__ = ["Assignment", "Part", "assign", "part_name", "parse_part", "valid_topic"]

Part = tuple[str, int]  # (topic, partition number)

_TOPIC = re.compile(r"[A-Za-z0-9._-]{1,100}")


def valid_topic(name: object) -> bool:
    """A topic name: 1 to 100 of letters, digits, '.', '_' and '-'."""
    return isinstance(name, str) and _TOPIC.fullmatch(name) is not None


def part_name(part: Part) -> str:
    return f"{part[0]}/{part[1]}"


def parse_part(name: str) -> Part:
    """Raises ValueError when `name` is not "topic/number"."""
    topic, _, number = name.rpartition("/")
    if not valid_topic(topic):
        raise ValueError(f"not a partition: {name!r}")
    return topic, int(number)


@dataclass(frozen=True, slots=True)
class Assignment:
    """The value of the key `assignment`: partition leaders and the epoch
    of the controller that wrote them."""

    epoch: int
    leaders: dict[Part, str] = field(default_factory=dict)

    def encode(self) -> bytes:
        """The JSON stored in shoal: {"epoch": E, "leaders": {"orders/0": "b1", ...}}."""
        leaders = {part_name(p): b for p, b in sorted(self.leaders.items())}
        return json.dumps({"epoch": self.epoch, "leaders": leaders}).encode()

    @classmethod
    def decode(cls, raw: bytes | str) -> Assignment:
        """Parse the stored JSON.

        Raises:
            ValueError: the value is not an assignment.
        """
        try:
            doc = json.loads(raw)
            leaders = {parse_part(p): str(b) for p, b in doc["leaders"].items()}
            return cls(epoch=int(doc["epoch"]), leaders=leaders)
        except (TypeError, KeyError, AttributeError, json.JSONDecodeError) as exc:
            raise ValueError(f"not an assignment: {exc}") from None

    def led_by(self, broker_id: str) -> list[Part]:
        """The partitions `broker_id` leads, in order."""
        return sorted(p for p, b in self.leaders.items() if b == broker_id)


def assign(partitions: Iterable[Part], live: list[str],
           previous: dict[Part, str]) -> dict[Part, str]:  # fmt: skip
    """Leaders for `partitions` over the `live` broker ids.

    Args:
        partitions: every partition of every topic.
        live: the ids of the brokers that may lead (any order).
        previous: the leaders in force now (kept where still live).

    Returns:
        partition -> broker id; empty when no broker is live.
    """
    brokers = sorted(set(live))
    parts = sorted(set(partitions))
    if not brokers:
        return {}
    leaders = {p: previous[p] for p in parts if previous.get(p) in brokers}
    load = {b: 0 for b in brokers}
    for b in leaders.values():
        load[b] += 1
    for p in parts:
        if p not in leaders:
            least = min(brokers, key=lambda b: (load[b], b))
            leaders[p] = least
            load[least] += 1
    while True:
        most = max(brokers, key=lambda b: (load[b], b))
        least = min(brokers, key=lambda b: (load[b], b))
        if load[most] - load[least] < 2:
            return dict(sorted(leaders.items()))
        moved = max(p for p, b in leaders.items() if b == most)
        leaders[moved] = least
        load[most] -= 1
        load[least] += 1
