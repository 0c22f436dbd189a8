"""What `pip install shoal` puts on a machine: one package, `shoal`."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_a_wheel_holds_the_shoal_package_and_nothing_else_at_the_top(tmp_path):
    """Nothing with a generic name (daemon, storage, sim...) lands in site-packages."""
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-qq", "--no-deps",
                    "-w", str(tmp_path), str(ROOT)], check=True, timeout=900)  # fmt: skip
    (wheel,) = tmp_path.glob("shoal-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    # A pure wheel (py3-none-any) or a compiled one (cp311-cp311-linux_x86_64):
    # mypyc's shared library is shoal/_native__mypyc.*.so, inside the package.
    dist_info = "-".join(wheel.name.split("-")[:2]) + ".dist-info"
    assert {n.split("/")[0] for n in names} == {"shoal", dist_info}
    for module in ("shoal/__init__.py", "shoal/kernel/contract.py", "shoal/daemon/agent.py",
                   "shoal/churn/log4j2.properties", "shoal/sim/cluster.py"):  # fmt: skip
        assert any(n == module or n.startswith(module.rsplit(".", 1)[0]) for n in names), module
    assert not any(n.startswith("shoal/tests/") or n.startswith("shoal/bench/") for n in names)
    assert "shoal/setup.py" not in names
    # Every package of the repository is in it (pyproject lists them by hand).
    tops = [
        d
        for d in ROOT.iterdir()
        if d.is_dir()
        and not d.name.startswith(".")
        and d.name not in ("tests", "bench", "build")
        and (d / "__init__.py").exists()
    ]
    packages = {str(p.parent.relative_to(ROOT)) for d in tops for p in d.rglob("__init__.py")}
    missing = {d for d in packages if f"shoal/{d}/__init__.py" not in names}
    assert not missing, f"add to [tool.setuptools] packages in pyproject.toml: {missing}"


def test_the_installed_package_imports_as_shoal_only(tmp_path):
    """From any directory, `shoal.…` imports and the old top-level names do not."""
    probe = ("import importlib.util as u, shoal.daemon.cli, shoal.sim, shoal.churn.job;"
             "print([m for m in ('daemon', 'membership', 'election', 'storage', 'sim', 'churn')"
             " if u.find_spec(m) is not None])")  # fmt: skip
    out = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, capture_output=True,
                         text=True, timeout=60)  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
