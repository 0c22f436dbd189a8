"""SWIM + Lifeguard membership: the sans-IO core and its wire codec. The IO
the agent drives it with (sockets, mDNS) is in daemon/network/."""

from shoal.kernel.contract import Channel, Output, PersistIncarnation, Send

# Registers SWIM's message tags with the kernel's codec (kernel/codec.py).
from shoal.membership import codec as _codec  # noqa: F401
from shoal.membership.events import (
    JoinCompleted,
    MemberDied,
    MemberJoined,
    MemberLeft,
    MemberReaped,
    MemberRefuted,
    MemberSuspected,
    MemberUpdated,
    NameConflicted,
)
from shoal.membership.member import MemberState, MemberView, NodeIdentity
from shoal.membership.profiles import PROFILES, SwimConfig
from shoal.membership.swim import SwimNode

__all__ = [
    "PROFILES",
    "Channel",
    "JoinCompleted",
    "MemberDied",
    "MemberJoined",
    "MemberLeft",
    "MemberReaped",
    "MemberRefuted",
    "MemberState",
    "MemberSuspected",
    "MemberUpdated",
    "MemberView",
    "NameConflicted",
    "NodeIdentity",
    "Output",
    "PersistIncarnation",
    "Send",
    "SwimConfig",
    "SwimNode",
]
