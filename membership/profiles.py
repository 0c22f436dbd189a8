"""SWIM timing and sizing: `SwimConfig` and the named profiles.

Defaults follow hashicorp/memberlist's `DefaultLANConfig`, `DefaultLocalConfig`
and `DefaultWANConfig` (config.go), so that side-by-side figures against Serf
compare like with like. Values that memberlist does not have come from Serf's
agent defaults (serf/config.go) where Serf has them.
"""

from __future__ import annotations

import math

import msgspec


class SwimConfig(msgspec.Struct, frozen=True):
    """Every tunable of the membership core. Durations are seconds."""

    # memberlist LAN: ProbeInterval 1 s. One probe per period (SWIM §3.1).
    probe_interval_s: float = 1.0
    # memberlist LAN: ProbeTimeout 500 ms, "the 99th percentile of RTT".
    probe_timeout_s: float = 0.5
    # memberlist LAN: IndirectChecks 3 (SWIM's k).
    indirect_checks: int = 3
    # memberlist LAN: GossipInterval 200 ms, GossipNodes 3.
    gossip_interval_s: float = 0.2
    gossip_nodes: int = 3
    # memberlist LAN: GossipToTheDeadTime 30 s: dead members still get gossip
    # for this long, so that a falsely declared node learns it must refute.
    gossip_to_dead_s: float = 30.0
    # memberlist LAN: RetransmitMult 4: each update is sent
    # retransmit_mult * ceil(log10(N + 1)) times (SWIM §4.1's λ·log N).
    retransmit_mult: int = 4
    # memberlist LAN: SuspicionMult 4, SuspicionMaxTimeoutMult 6 (Lifeguard §IV-B);
    # suspicion.py turns them into a timer's k, min and max.
    suspicion_mult: int = 4
    suspicion_max_timeout_mult: int = 6
    # Ours (suspicion.py): confirmations beyond memberlist's k keep shortening
    # a suspicion, down to suspicion_floor_mult probe intervals once this
    # many more than k members have confirmed it. Every member that hears of
    # a suspicion checks the suspect at once (probing.py), so confirmations
    # come from independent probes within a second, and a live suspect's
    # checks are answered, not confirmed.
    suspicion_fast_confirmations: int = 4
    suspicion_floor_mult: float = 1.0
    # memberlist LAN: AwarenessMaxMultiplier 8 (Lifeguard §IV-A).
    awareness_max_multiplier: int = 8
    # memberlist LAN: PushPullInterval 30 s, scaled up above 32 members.
    push_pull_interval_s: float = 30.0
    # memberlist LAN: TCPTimeout 10 s, for push-pull streams.
    stream_timeout_s: float = 10.0
    # memberlist: UDPBufferSize 1400, safe under a 1500-byte Ethernet MTU.
    mtu_bytes: int = 1400
    # Serf: ReconnectInterval 30 s: try one failed member this often, so that
    # the two sides of a healed partition find each other again.
    reconnect_interval_s: float = 30.0
    # Serf: ReconnectTimeout 24 h: a dead member is reaped after this.
    dead_reap_s: float = 86_400.0
    # Serf: TombstoneTimeout 24 h: a member that left is reaped after this.
    left_reap_s: float = 86_400.0
    # Ours: a leaving node tells up to this many members directly, besides
    # gossip, so that nobody probes it after it stops (see swim.leave).
    leave_direct_max: int = 64
    # Ours: a node whose join was answered tells up to this many of the
    # members it just learned that it is alive, directly (see swim.join).
    join_direct_max: int = 64
    # Ours: a member declared dead is pinged again, at most one per probe
    # interval in turn, for this long after its death, then with a backoff
    # doubling to reconnect_interval_s (membership/reconnect.py): a cut of
    # up to a minute heals within seconds, not at Serf's 30 s timer.
    reconnect_fast_s: float = 60.0

    def __post_init__(self) -> None:
        for name in self.__struct_fields__:
            value = getattr(self, name)
            if isinstance(value, (int, float)) and value <= 0:
                raise ValueError(f"{name} must be positive, got {value}")
        if self.probe_timeout_s >= self.probe_interval_s:
            raise ValueError("probe_timeout_s must be shorter than probe_interval_s")
        if self.mtu_bytes < 512:
            raise ValueError("mtu_bytes must be at least 512")

    def retransmit_limit(self, n: int) -> int:
        """How often one update is sent, for a cluster of `n` members."""
        return self.retransmit_mult * math.ceil(math.log10(n + 1))

    def push_pull_scaled_s(self, n: int) -> float:
        """memberlist pushPullScale: slower full syncs above 32 members."""
        if n <= 32:
            return self.push_pull_interval_s
        multiplier = math.ceil(math.log2(n) - math.log2(32)) + 1
        return self.push_pull_interval_s * multiplier


PROFILES: dict[str, SwimConfig] = {
    "lan": SwimConfig(),
    # memberlist DefaultLocalConfig: a loopback or same-switch cluster.
    "local": SwimConfig(
        probe_interval_s=1.0,
        probe_timeout_s=0.2,
        indirect_checks=1,
        gossip_interval_s=0.1,
        gossip_to_dead_s=15.0,
        retransmit_mult=2,
        suspicion_mult=3,
        push_pull_interval_s=15.0,
        stream_timeout_s=1.0,
    ),
    # memberlist DefaultWANConfig.
    "wan": SwimConfig(
        probe_interval_s=5.0,
        probe_timeout_s=3.0,
        gossip_interval_s=0.5,
        gossip_nodes=4,
        gossip_to_dead_s=60.0,
        suspicion_mult=6,
        push_pull_interval_s=60.0,
        stream_timeout_s=30.0,
    ),
}
