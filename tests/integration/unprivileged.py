"""Run shoal as an unprivileged user from wherever the checkout lies.

A root user may keep the checkout (and its .venv) under a directory only
root may enter: a fresh clone under a 0700 `mktemp -d`, say. The `nobody`
user then cannot even start the venv's interpreter, and an agent started
as `nobody` never comes up. So when `nobody` cannot import shoal from the
checkout, the tests give it an installed copy instead: the venv's packages
and the checkout's package files, hard-linked (copied across file systems)
into a world-readable temporary directory, run by the system interpreter
the venv was made from.
"""

from __future__ import annotations

import atexit
import functools
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

import shoal

NOBODY = ["--reuid=nobody", "--regid=nogroup", "--clear-groups"]
CHECKOUT = Path(shoal.__file__).resolve().parent
# What the agent never loads: the copy stays small and quick to make.
_SKIP = {".git", ".venv", "build", "__pycache__", "pyspark", "mypy", "mypyc", "matplotlib",
         "numpy", "numpy.libs", "hypothesis", "fontTools", "PIL", "pillow.libs",
         "_pytest"}  # fmt: skip


def _link_or_copy(src: str, dst: str) -> None:
    try:
        os.link(src, dst)
    except OSError:  # another file system: copy
        shutil.copy2(src, dst)


def _ignore(_: str, names: list[str]) -> set[str]:
    return {n for n in names if n in _SKIP or n.endswith((".pth", ".dist-info"))} - {"shoal"}


def _imports_as_nobody(python: list[str], env: dict[str, str]) -> bool:
    probe = subprocess.run(["setpriv", *NOBODY, *python, "-c", "import shoal.daemon.cli"],
                           cwd="/", env={**os.environ, **env}, capture_output=True,
                           timeout=60)  # fmt: skip
    return probe.returncode == 0


@functools.cache
def python_for_nobody() -> tuple[list[str], dict[str, str]]:
    """The interpreter command and environment with which `nobody` runs
    this checkout's shoal (must be called as root, with setpriv).

    Raises:
        AssertionError: not even the installed copy imports as `nobody`;
            the message names the path that stops it.
    """
    if _imports_as_nobody([sys.executable], {}):
        return [sys.executable], {}
    base = Path(tempfile.mkdtemp(prefix="shoal-nobody-"))
    atexit.register(shutil.rmtree, base, True)
    os.chmod(base, 0o755)
    site = base / "site"
    purelib = sysconfig.get_paths()["purelib"]
    shutil.copytree(purelib, site, ignore=_ignore, copy_function=_link_or_copy, symlinks=True)
    shutil.copytree(CHECKOUT, site / "shoal", ignore=_ignore, copy_function=_link_or_copy,
                    symlinks=True)  # fmt: skip
    python = [os.path.realpath(sys.executable), "-s"]
    env = {"PYTHONPATH": str(site), "PYTHONDONTWRITEBYTECODE": "1"}
    assert _imports_as_nobody(python, env), (
        f"nobody cannot run shoal from {CHECKOUT}, nor from a copy in {site}: is "
        f"{os.path.realpath(sys.executable)} executable by every user?"
    )
    return python, env
