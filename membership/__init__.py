"""SWIM + Lifeguard membership: the sans-IO core, its wire codec, and the IO
(transport) the agent drives it with."""

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
