"""The protocol cores stay pure: no IO, no clock, no global randomness.

Parses the source of every module on the pure list and fails on a forbidden
import or call, so that the simulator keeps testing the program that runs.
"""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PURE = [
    "kernel/contract.py",
    "kernel/errors.py",
    "kernel/hashes.py",
    "node/composition.py",
    "election/config.py",
    "election/events.py",
    "election/lease.py",
    "election/messages.py",
    "election/voters.py",
    "membership/awareness.py",
    "membership/broadcast.py",
    "membership/codec.py",
    "membership/events.py",
    "membership/keyring.py",
    "membership/member.py",
    "membership/messages.py",
    "membership/probe.py",
    "membership/profiles.py",
    "membership/suspicion.py",
    "membership/swim.py",
    "membership/table.py",
    "storage/antientropy.py",
    "storage/config.py",
    "storage/hlc.py",
    "storage/merkle.py",
    "storage/messages.py",
    "storage/records.py",
    "storage/store.py",
]
# Exempt, and short on purpose.
IO_MODULES = {"membership/transport.py", "membership/discovery.py", "storage/engine.py",
              "storage/identity.py", "storage/history.py"}  # fmt: skip
FORBIDDEN_IMPORTS = {
    "asyncio", "socket", "time", "uvloop", "zeroconf", "structlog", "rocksdict", "os",
    "datetime", "threading", "selectors", "aiohttp", "secrets",
}  # fmt: skip
FORBIDDEN_CALLS = {
    ("random", "random"), ("random", "randint"), ("random", "choice"), ("random", "shuffle"),
    ("random", "sample"), ("random", "uniform"), ("random", "randrange"),
    ("random", "getrandbits"), ("random", "randbytes"), ("os", "urandom"),
    ("datetime", "now"), ("time", "time"), ("time", "monotonic"),
}  # fmt: skip


@pytest.mark.parametrize("package", ["kernel", "membership", "storage", "election", "node"])
def test_every_core_module_is_classified(package):
    """A new module must be put on the pure list or the IO list on purpose."""
    found = {str(p.relative_to(ROOT)) for p in (ROOT / package).glob("*.py")}
    found.discard(f"{package}/__init__.py")
    unclassified = found - set(PURE) - IO_MODULES
    assert not unclassified


@pytest.mark.parametrize("module", PURE)
def test_pure_module_has_no_io(module):
    """The core is told the time; it does not ask."""
    tree = ast.parse((ROOT / module).read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name.split(".")[0] for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            names = [(node.module or "").split(".")[0]]
        else:
            names = []
        bad = set(names) & FORBIDDEN_IMPORTS
        assert not bad, f"{module}:{node.lineno} imports {bad}"
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            target = node.func.value
            if isinstance(target, ast.Name):
                call = (target.id, node.func.attr)
                assert call not in FORBIDDEN_CALLS, f"{module}:{node.lineno} calls {call}"
