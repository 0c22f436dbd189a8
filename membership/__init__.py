"""SWIM + Lifeguard membership: the sans-IO core, its wire codec, and the IO
(transport) the agent drives it with."""

from membership.events import (
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
from membership.member import MemberState, MemberView, NodeIdentity
from membership.output import Channel, Output, PersistIncarnation, Send
from membership.profiles import PROFILES, SwimConfig
from membership.swim import SwimNode

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
