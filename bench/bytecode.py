"""Fresh bytecode for the agents a bench starts, from any checkout's venv.

An agent whose modules have no up-to-date `.pyc` compiles them at every
start: with PYTHONDONTWRITEBYTECODE=1 in the environment (it is, on the
development VMs) and a tree edited since its caches were written, a start
took 0.22 s more CPU (142 modules compiled, cProfile's `builtins.compile`)
and five agents on 2 cores saw each other up to 1 s later. An installed
agent has its caches (pip compiles a wheel on install), so the benches
measure that: each interpreter gets its own cache folder
(PYTHONPYCACHEPREFIX, so nothing is written into another checkout), filled
once for the checkout, its site-packages and the standard library.

    cmd = agent_python(python)  # ["env", ..., python]: prefix of a command line
"""

from __future__ import annotations

import hashlib
import re
import subprocess
from pathlib import Path

CACHE_ROOT = Path("/tmp/shoal-bench-pycache")
# Not imported by an agent: the checkout's own venvs and build output, the
# standard library's tests and GUI, pyspark (the churn job's).
_SKIP_IN_TREE = r"(\.venv|\.venv-lint|build|node_modules)/"
_SKIP_ANYWHERE = r"/(test|tests|idlelib|lib2to3|ensurepip|turtledemo|tkinter|pyspark)/"
_FOLDERS = (
    "import shoal, site, sysconfig; print(shoal.__path__[0]); "
    "print(*site.getsitepackages(), sep='\\n'); print(sysconfig.get_path('stdlib'))"
)
_done: dict[str, list[str]] = {}


def agent_python(python: str) -> list[str]:
    """The start of a command line that runs `python` with fresh caches.

    Compiles, on the first call for `python`, what its agents import (its
    checkout, site-packages and standard library) into a cache folder of
    its own: a no-op once the caches are there, seconds the first time.
    """
    if python in _done:
        return _done[python]
    prefix = CACHE_ROOT / hashlib.sha256(python.encode()).hexdigest()[:12]
    folders = subprocess.run([python, "-c", _FOLDERS], capture_output=True, text=True,
                             check=True, timeout=60).stdout.split()  # fmt: skip
    script = (
        "import compileall, re, sys; rx = re.compile(sys.argv[1]); "
        "[compileall.compile_dir(d, quiet=1, rx=rx, workers=0) for d in sys.argv[2:]]"
    )
    env = ["env", "-u", "PYTHONDONTWRITEBYTECODE", f"PYTHONPYCACHEPREFIX={prefix}"]
    skip = f"^{re.escape(folders[0])}/{_SKIP_IN_TREE}|{_SKIP_ANYWHERE}"
    subprocess.run([*env, python, "-c", script, skip, *folders],
                   capture_output=True, check=True, timeout=600)  # fmt: skip
    _done[python] = [*env, python]
    return _done[python]
