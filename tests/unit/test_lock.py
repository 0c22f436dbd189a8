"""systemd/constraints.txt (written by `make lock`) pins every runtime
dependency pyproject.toml names, so a service install is reproducible."""

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _name(requirement: str) -> str:
    return re.split(r"[<>=!~\[; ]", requirement, maxsplit=1)[0].lower().replace("_", "-")


def test_every_runtime_dependency_is_pinned():
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    pinned = {}
    for line in (ROOT / "systemd" / "constraints.txt").read_text().splitlines():
        if line and not line.startswith("#"):
            name, _, version = line.partition("==")
            pinned[_name(name)] = version
    missing = [d for d in deps if _name(d) not in pinned]
    assert not missing, f"run `make lock`: not pinned: {missing}"
    assert all(re.fullmatch(r"[0-9][0-9A-Za-z.+-]*", v) for v in pinned.values()), pinned
