"""Agents with the DNS interface on, and `dig` (Debian's dnsutils) to ask them."""

from __future__ import annotations

import re
import subprocess

from shoal.kernel.errors import ApiError
from tests.conftest import poll_until
from tests.integration.agents import AgentCluster, AgentProcess

DNS_PORT = 8600
_STATUS = re.compile(r"status: (\w+)")
_FLAGS = re.compile(r";; flags: ([a-z ]+);")


def add_dns_agent(agents: AgentCluster, name: str, tags: list[str] = (), dns: str = "",
                  extra: list[str] = (), after: str = "") -> AgentProcess:  # fmt: skip
    """Start an agent whose `[dns]` listens on its own address, port 8600;
    `dns` adds lines to the table, `after` more TOML after it."""
    join = [agents.agents[0].gossip] if agents.agents else []
    agent = AgentProcess(name, agents.root, join, [])
    conf = agents.root / f"{name}.toml"
    conf.write_text(f'[dns]\nbind = "{agent.ip}:{DNS_PORT}"\n{dns}\n{after}\n')
    agent.extra = ["--config", str(conf), "--bootstrap-expect", "3", "--no-discovery",
                   *(f"--tag={t}" for t in tags), *extra]  # fmt: skip
    agents.agents.append(agent)
    return agent.start()


class Dig:
    """One `dig` run: its status, flags and answer records (name, ttl, type, data)."""

    def __init__(self, output: str) -> None:
        self.output = output
        status = _STATUS.search(output)
        flags = _FLAGS.search(output)
        self.status = status.group(1) if status else None
        self.flags = set(flags.group(1).split()) if flags else set()
        self.answers: list[tuple[str, int, str, str]] = []
        section = None
        for line in output.splitlines():
            if line.startswith(";; ") and line.endswith("SECTION:"):
                section = line[3:-9]
            elif not line.strip():
                section = None
            elif section == "ANSWER":
                name, ttl, _cls, rtype, data = line.split(None, 4)
                self.answers.append((name, int(ttl), rtype, data))

    def data(self, rtype: str = "A") -> list[str]:
        """The answers of `rtype`, sorted."""
        return sorted(d for _, _, t, d in self.answers if t == rtype)


def dig(agent: AgentProcess, name: str, qtype: str = "A", *opts: str) -> Dig:
    """`dig @agent -p 8600 name qtype` as a user types it (one try, 2 s)."""
    out = subprocess.run(["dig", f"@{agent.ip}", "-p", str(DNS_PORT), name, qtype,
                          "+tries=1", "+time=2", *opts],
                         capture_output=True, text=True, timeout=20)  # fmt: skip
    return Dig(out.stdout)


def wait_formed(agents: list[AgentProcess], timeout_s: float = 30.0) -> tuple[str, int]:
    """Until every agent lists every other alive and all agree on a
    controller: (its name, its epoch)."""
    names = {a.name for a in agents}

    def formed() -> tuple[str, int] | None:
        seen = set()
        for a in agents:
            if {n for n, m in a.members().items() if m["status"] == "alive"} != names:
                return None
            try:
                info = a.api.get("/v1/controller")
            except ApiError:
                return None
            seen.add((info["controller"], info["epoch"]))
        if len(seen) == 1:
            (only,) = seen
            return only if only[0] is not None else None
        return None

    return poll_until(formed, timeout_s, interval_s=0.1)
