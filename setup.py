"""The optional compiled path: shoal's hot modules, compiled by mypyc.

pyproject.toml holds everything else about the distribution; this file only
adds extension modules, built from the very same .py files (one source of
truth: mypyc compiles the modules that run interpreted otherwise). The
modules are the ones the simulator and the agent spend their time in
(docs/performance.md, "The compiled path", has the profile and figures).

The build falls back to pure Python, and says why, when
- SHOAL_PURE=1 is set (or any value but 0/empty),
- mypyc cannot be imported (an interpreter other than CPython),
- no working C compiler or no Python headers (Debian: gcc, python3-dev),
- or the compilation itself fails.
At run time `shoal.native` checks that the compiled modules match
their sources (a stale build in an editable checkout runs pure Python) and
reports which path runs.
"""

from __future__ import annotations

import os
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
# mypyc names modules from file paths, so it reads them through a link named
# like the package (the repository root *is* `shoal`; `make lint` does the same).
LINK = Path("build/typecheck/shoal")
# The shared library holding all the compiled code lands inside the package,
# as shoal/_native__mypyc.*.so: nothing but shoal/ at the top of site-packages.
GROUP = "shoal._native"
# Where the freshness record goes, beside shoal/__init__.py (native.py reads it).
RECORD = "native-build.txt"

# The measured hot path (`shoal simulate --nodes 1000`, cProfile by module):
# the membership core, the kernel beneath it, the composition of the cores
# and the simulator's own loop; and the record path of an API write
# (storage/hlc, merkle, store: compiling hlc and merkle took 3 % of the
# instructions per write, 158.4 k to 153.5 k, callgrind, wrk -c32; issue
# 25), and the API's HTTP protocol (daemon/api/http: 38.7 k to 24.0 k
# instructions per request parsed and answered; 139.9 k to 127.6 k per API
# write); with the key-value routes, the change log and the group commit
# (daemon/api/kv, changes, disk/commit) 118.7 k. A module not listed runs interpreted and
# calls into these as into any Python module. Left out on purpose: modules
# that define msgspec Structs (mypyc drops class keywords such as
# frozen=True: the messages would become unhashable, and a Struct default
# `msgspec.field(...)` fails its run-time type check; storage/syncstate holds
# the anti-entropy core's structs for that reason) and kernel/hashes (its
# imports are chosen at run time).
COMPILED = (
    "kernel/codec", "kernel/deadlines", "kernel/outbox",
    "membership/awareness", "membership/broadcast", "membership/claims", "membership/clockskew",
    "membership/codec", "membership/exchange", "membership/gossip", "membership/probe",
    "membership/probing", "membership/suspicion", "membership/swim", "membership/table",
    "election/candidacy", "election/lease",
    "storage/antientropy", "storage/hlc", "storage/initiator", "storage/merkle",
    "storage/responder", "storage/store",
    "daemon/api/changes", "daemon/api/http", "daemon/api/kv", "daemon/disk/commit",
    "services/core", "node/composition",
    "sim/checks", "sim/clock", "sim/cluster", "sim/disk", "sim/network",
)  # fmt: skip


def _say(message: str) -> None:
    print(f"shoal: {message}", file=sys.stderr, flush=True)


def _why_pure() -> str | None:
    """Why this build is pure Python, or None when it can compile."""
    if os.environ.get("SHOAL_PURE", "") not in ("", "0"):
        return "SHOAL_PURE is set"
    if sys.implementation.name != "cpython":
        return f"mypyc needs CPython, this is {sys.implementation.name}"
    try:
        import mypyc.build  # noqa: F401
    except ImportError:
        return "mypyc is not installed"
    return _compiler_problem()


def _compiler_problem() -> str | None:
    """Compile a file that includes Python.h: no compiler or no headers says so here."""
    from setuptools._distutils.ccompiler import new_compiler
    from setuptools._distutils.errors import CCompilerError, DistutilsError
    from setuptools._distutils.sysconfig import customize_compiler

    compiler = new_compiler()
    customize_compiler(compiler)
    with tempfile.TemporaryDirectory() as tmp:
        source = Path(tmp, "probe.c")
        source.write_text("#include <Python.h>\nint shoal_probe(void) { return 0; }\n")
        try:
            compiler.compile([str(source)], output_dir=tmp,
                             include_dirs=[sysconfig.get_paths()["include"]])  # fmt: skip
        except (CCompilerError, DistutilsError, OSError) as e:
            return f"no working C compiler with Python's headers ({str(e).splitlines()[0]})"
    return None


class BuildCompiledPath(build_ext):
    """Runs mypyc only when extensions are really built (setuptools finalizes
    this command for metadata too), and falls back to pure Python when the
    compilation fails."""

    def finalize_options(self) -> None:
        super().finalize_options()
        if self.parallel is None:
            self.parallel = os.cpu_count() or 1

    def run(self) -> None:
        if not self.extensions:
            return super().run()
        from mypyc.build import mypycify

        started = time.monotonic()
        if self.inplace:
            _remove_inplace_build()
        else:  # a reused build/ may hold modules no longer compiled
            for stale in Path(self.build_lib).glob("shoal/**/*.so"):
                stale.unlink()
        LINK.parent.mkdir(parents=True, exist_ok=True)
        if not LINK.is_symlink():
            LINK.symlink_to("../..")
        try:
            generated = {e.name: e for e in mypycify(
                ["--explicit-package-bases", *(f"{LINK}/{m}.py" for m in COMPILED)],
                group_name=GROUP, opt_level="3")}  # fmt: skip
            for ext in self.extensions:  # the placeholders get mypyc's sources and flags
                made = generated[ext.name].__dict__
                ext.__dict__.update({k: v for k, v in made.items() if not k.startswith("_")})
            super().run()
        except (Exception, SystemExit) as e:  # a failed compilation leaves a pure install
            _say(f"compiling the hot path failed, installing pure Python: {e!r}")
            for path in self.get_outputs():
                Path(path).unlink(missing_ok=True)
            return None
        self._write_record()
        _say(f"compiled {len(COMPILED)} modules with mypyc in {time.monotonic() - started:.0f} s")
        return None

    def _write_record(self) -> None:
        """Size, mtime and digest of each compiled source, beside the package's
        __init__.py: native.py runs pure Python when a source changed."""
        from hashlib import blake2b

        package = Path(self.get_ext_fullpath(f"{GROUP}__mypyc")).parent
        lines = []
        for module in COMPILED:
            source = ROOT / f"{module}.py"
            data = source.read_bytes()
            stat = source.stat()
            digest = blake2b(data, digest_size=16).hexdigest()
            lines.append(f"{module} {len(data)} {stat.st_mtime_ns} {digest}\n")
        (package / RECORD).write_text("".join(lines))

    def get_outputs(self) -> list[str]:
        outputs = super().get_outputs()
        if self.distribution.ext_modules:
            record = Path(self.get_ext_fullpath(f"{GROUP}__mypyc")).parent / RECORD
            outputs.append(str(record))
        return outputs


class BuildPyWithoutSetup(build_py):
    """The repository root is the package: this file is not one of its modules."""

    def find_package_modules(self, package: str, package_dir: str) -> list[tuple[str, str, str]]:
        found = super().find_package_modules(package, package_dir)
        return [m for m in found if (m[0], m[1]) != ("shoal", "setup")]


def _remove_inplace_build() -> None:
    """The compiled modules an editable install left in the tree, and their
    record: a pure build, or a build of other modules, must not load them."""
    (ROOT / RECORD).unlink(missing_ok=True)
    tops = [d for d in ROOT.iterdir() if (d / "__init__.py").exists() and d.name != "tests"]
    for lib in [*ROOT.glob("*.so"), *(lib for d in tops for lib in d.rglob("*.so"))]:
        lib.unlink()


def _extensions() -> list[Extension]:
    why = _why_pure()
    if why is not None:
        _say(f"pure Python build: {why}")
        if (ROOT / RECORD).exists() and {"editable_wheel", "develop", "--inplace"} & set(sys.argv):
            _remove_inplace_build()  # an editable install becomes pure
        return []
    # mypyc's names, filled in with its sources when build_ext runs (setuptools
    # wants the list now: it makes the wheel a platform wheel).
    names = [f"{GROUP}__mypyc", *("shoal." + m.replace("/", ".") for m in COMPILED)]
    return [Extension(name, sources=[]) for name in names]


setup(
    ext_modules=_extensions(),
    cmdclass={"build_ext": BuildCompiledPath, "build_py": BuildPyWithoutSetup},
)
