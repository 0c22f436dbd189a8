"""Which path runs: the hot modules compiled by mypyc (setup.py), or pure Python.

`shoal/__init__.py` calls `select()` before any other module of shoal loads.
The compiled modules are kept only when

- SHOAL_PURE is unset (or "0") in the environment, and
- each compiled module's source is still the one it was compiled from: the
  record setup.py writes beside `__init__.py` (size and mtime of each source,
  and a digest for when the mtime moved but the bytes did not), so an edited
  checkout never runs a stale build.

Otherwise a finder placed first on `sys.meta_path` loads those modules from
their .py files. It is all or nothing: mypyc's modules call one another
inside one shared library, so one changed source sends all of them back to
Python. With no record (a pure build) this costs one failed `stat`.

`describe()` says which path runs, for `shoal simulate`, the agent's start
log line and `shoal info`.
"""

from __future__ import annotations

import importlib
import os
import sys

# Not `typing` itself: `shoal members` would load it for annotations alone.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from importlib.machinery import ModuleSpec
    from typing import Any

RECORD = "native-build.txt"
COMPILED = "compiled (mypyc)"
PURE = "pure Python"

_why_pure = "not compiled: no C compiler, or SHOAL_PURE=1 at install"
_probe = ""  # a compiled module's name


class _SourceFinder:  # a meta path finder (importlib.abc costs an import)
    """Loads the named modules from their .py files, ahead of the .so beside them."""

    def __init__(self, sources: dict[str, str]) -> None:
        self.sources = sources

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> ModuleSpec | None:
        source = self.sources.get(fullname)
        if source is None:
            return None
        from importlib.util import spec_from_file_location

        return spec_from_file_location(fullname, source)


def select(package_dir: str) -> str | None:
    """Keep the compiled modules, or send their imports to the sources (module
    docstring); returns why they were set aside, None when kept or absent."""
    global _why_pure, _probe
    try:
        with open(os.path.join(package_dir, RECORD)) as f:
            record = [line.split() for line in f if line.strip()]
    except OSError:
        return None  # a pure build: nothing compiled to set aside
    _probe = "shoal." + record[0][0].replace("/", ".")
    sources = {"shoal." + m.replace("/", "."): os.path.join(package_dir, m + ".py")
               for m, *_ in record}  # fmt: skip
    if os.environ.get("SHOAL_PURE", "") not in ("", "0"):
        _why_pure = "SHOAL_PURE is set"
    else:
        changed = next((m for m, size, mtime, digest in record
                        if not _unchanged(os.path.join(package_dir, m + ".py"),
                                          int(size), int(mtime), digest)), None)  # fmt: skip
        if changed is None:
            _why_pure = "the compiled modules did not load"
            return None
        _why_pure = f"{changed}.py changed since it was compiled (`make native` compiles it again)"
    sys.meta_path.insert(0, _SourceFinder(sources))
    return _why_pure


def _unchanged(path: str, size: int, mtime_ns: int, digest: str) -> bool:
    try:
        st = os.stat(path)
        if st.st_size != size:
            return False
        if st.st_mtime_ns == mtime_ns:
            return True
        with open(path, "rb") as f:
            data = f.read()
    except OSError:
        return False
    from shoal.kernel.hashes import blake2b

    return blake2b(data, digest_size=16).hexdigest() == digest


def compiled() -> bool:
    """Whether the hot modules run compiled (a module of the compiled set is a .so)."""
    return bool(_probe) and not (importlib.import_module(_probe).__file__ or ".py").endswith(".py")


def describe() -> str:
    """`compiled (mypyc)`, or `pure Python (<why>)`."""
    return COMPILED if compiled() else f"{PURE} ({_why_pure})"
