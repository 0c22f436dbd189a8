"""Each package's public names are pinned, so changes to them are deliberate."""

import importlib

import pytest

PINNED = {
    "membership": [
        "PROFILES", "Channel", "JoinCompleted", "MemberDied", "MemberJoined", "MemberLeft",
        "MemberReaped", "MemberRefuted", "MemberState", "MemberSuspected", "MemberUpdated",
        "MemberView", "NameConflicted", "NodeIdentity", "Output", "PersistIncarnation", "Send",
        "SwimConfig", "SwimNode",
    ],
    "sim": ["LinkProfile", "SimCluster", "SimNetwork", "SimResult", "run_simulation"],
    "storage": [
        "AntiEntropy",
        "MemoryStore",
        "Record",
        "RecordStore",
        "Replica",
        "SyncConfig",
    ],
    "daemon": [],
    "election": [
        "ControllerChanged",
        "ControllerElected",
        "ControllerLost",
        "LeaseConfig",
        "LeaseElection",
        "VoterConfig",
        "VotersChanged",
    ],
    "churn": [],
    "kernel": [],
    "metalog": [
        "MetaConfig",
        "MetaDelete",
        "MetaLog",
        "MetaPut",
        "MetaState",
        "ProposalDone",
        "ReadDone",
    ],
    "node": ["ShoalNode"],
    "services": ["CheckMachines", "EventLedger", "Services", "UserEventReceived"],
}  # fmt: skip


@pytest.mark.parametrize("package", sorted(PINNED))
def test_public_names_are_pinned(package):
    """`__all__` lists exactly the pinned names, and each exists."""
    mod = importlib.import_module(f"shoal.{package}")
    assert sorted(mod.__all__) == sorted(PINNED[package])
    for name in mod.__all__:
        assert hasattr(mod, name)
