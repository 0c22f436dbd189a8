"""The protocol cores stay pure: no IO, no clock, no global randomness.

Parses the source of every module on the pure list and fails on a forbidden
import or call, so that the simulator keeps testing the program that runs.
"""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# Every module of these packages is pure, except the IO modules below: a new
# module is checked from the day it exists.
PURE_PACKAGES = ["kernel", "membership", "election", "storage", "metalog", "services", "node"]
# Exempt, and short on purpose.
IO_MODULES = {"storage/engine.py", "storage/history.py"}
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


PURE = sorted(name for package in PURE_PACKAGES for p in (ROOT / package).rglob("*.py")
              if (name := str(p.relative_to(ROOT))) not in IO_MODULES)  # fmt: skip


def test_the_io_list_names_modules_that_exist():
    """A moved IO module cannot leave a stale exemption behind."""
    assert all((ROOT / m).exists() for m in IO_MODULES)
    assert len(PURE) > 30


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
