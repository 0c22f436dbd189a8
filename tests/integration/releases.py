"""The release before this tree, built from git, for the upgrade tests.

RELEASES (at the repository root) names each release's commit; the previous
release is the newest line whose commit is not HEAD. It is checked out with
`git worktree add --detach` into a cache that survives between runs on one
machine, given a venv of its own (pure Python: SHOAL_PURE=1, no compiler
needed), and reused while its stamp is there. A lock file keeps two pytest
processes from building the same release at once.

When there is no earlier release, or its commit is not in this clone (a
shallow clone), the working tree itself stands in for the previous release:
`previous_build()` says so in `Build.fallback`, and the summary of the test
run prints it (conftest.py), so a run that did not test against a real
release never looks like one that did; with SHOAL_RELEASE_REQUIRED=1 (a CI
that fetches the whole history) the stand-in is an error instead. A commit
missing from a full clone is an error in RELEASES, and fails.

The cache: $SHOAL_RELEASE_CACHE, else $XDG_CACHE_HOME/shoal-releases, else
~/.cache/shoal-releases; one directory per commit (its worktree, with the
venv in `.venv` inside), created 0700.
"""

from __future__ import annotations

import fcntl
import functools
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tests.conftest import poll_until
from tests.integration.agents import NEXT_RELEASE_ENV, Build

REPO = Path(__file__).resolve().parents[2]
STAMP = ".shoal-release-built"
BUILD_TIMEOUT_S = 600.0
# What must not reach another tree's interpreter: it would import this tree,
# or this venv's packages, or be told to stand in for the next release.
_FOREIGN = ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", NEXT_RELEASE_ENV)
_LINE = re.compile(r"v(\d+)\.(\d+)\.(\d+)\s+([0-9a-f]{40})")

# What the summary of the run prints (conftest.py): which build stood in for
# the previous release, and why when it was not a real one.
NOTICES: list[str] = []


@dataclass(frozen=True, slots=True)
class Release:
    """One line of RELEASES."""

    version: tuple[int, int, int]
    commit: str

    @property
    def name(self) -> str:
        return "v{}.{}.{}".format(*self.version)


def parse_releases(text: str) -> list[Release]:
    """The releases a RELEASES file lists, in its order.

    Raises:
        ValueError: a line that is neither blank, a comment nor a release,
            or a version listed twice.
    """
    found: list[Release] = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        match = _LINE.fullmatch(line)
        if match is None:
            raise ValueError(f"RELEASES line {number}: expected 'vMAJOR.MINOR.PATCH <40-hex "
                             f"commit>', got {raw!r}")  # fmt: skip
        major, minor, patch, commit = match.groups()
        release = Release((int(major), int(minor), int(patch)), commit)
        if any(r.version == release.version for r in found):
            raise ValueError(f"RELEASES line {number}: {release.name} is listed twice")
        found.append(release)
    return found


def previous_release(releases: list[Release], head: str) -> Release | None:
    """The newest release whose commit is not `head`, or None."""
    earlier = [r for r in releases if r.commit != head]
    return max(earlier, key=lambda r: r.version) if earlier else None


def _git(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    # safe.directory: CI runs as root over a checkout it may not own.
    return subprocess.run(["git", "-c", "safe.directory=*", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=120)  # fmt: skip


def cache_root() -> Path:
    """Where built releases are kept between runs (module docstring)."""
    if os.environ.get("SHOAL_RELEASE_CACHE"):
        root = Path(os.environ["SHOAL_RELEASE_CACHE"])
    elif os.environ.get("XDG_CACHE_HOME"):
        root = Path(os.environ["XDG_CACHE_HOME"], "shoal-releases")
    else:
        root = Path.home() / ".cache" / "shoal-releases"
    try:
        root.mkdir(parents=True, exist_ok=True, mode=0o700)
    except OSError:  # no writable home (a service user in CI): the machine's temp
        root = Path(tempfile.gettempdir(), f"shoal-releases-{os.getuid()}")
        root.mkdir(parents=True, exist_ok=True, mode=0o700)
    return root


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    """Hold an exclusive lock on `path` (another pytest may be building)."""
    with open(path, "a") as f:

        def taken() -> bool:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return False
            return True

        poll_until(taken, BUILD_TIMEOUT_S, interval_s=0.2)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _clean_env() -> dict[str, str]:
    """This process's environment without what would make another tree's
    interpreter import this tree or this venv."""
    return {k: v for k, v in os.environ.items() if k not in _FOREIGN}


def _base_python() -> str:
    """The interpreter this venv was made from (the release's venv gets the same)."""
    return getattr(sys, "_base_executable", None) or shutil.which("python3") or sys.executable


def _imports_from(python: Path, tree: Path) -> bool:
    """Whether `python` imports shoal from `tree` (and not from this one)."""
    done = subprocess.run([str(python), "-c", "import shoal; print(shoal.__file__)"], cwd=tree,
                          env=_clean_env(), capture_output=True, text=True, timeout=60)  # fmt: skip
    return done.returncode == 0 and Path(done.stdout.strip()).resolve().parent == tree.resolve()


def build_release(release: Release, cache: Path) -> Path:
    """Check `release` out and install it into a venv of its own, once per
    machine; the venv's interpreter.

    Raises:
        RuntimeError: git or pip failed (with their output).
    """
    tree = cache / release.commit
    python = tree / ".venv" / "bin" / "python"
    with _locked(cache / f"{release.commit}.lock"):
        stamp = tree / ".venv" / STAMP
        if stamp.exists() and _imports_from(python, tree):
            return python
        started = time.monotonic()
        if tree.exists():  # a build cut short, or a checkout another clone left
            shutil.rmtree(tree)
        _git("worktree", "prune")
        added = _git("worktree", "add", "--force", "--detach", str(tree), release.commit)
        if added.returncode != 0:
            raise RuntimeError(f"git worktree add {release.commit} failed: {added.stderr}")
        log = cache / f"{release.commit}.build.log"
        env = {**_clean_env(), "SHOAL_PURE": "1"}
        # A pure build needs nothing of the build requirements but setuptools:
        # installing them into an isolated build env (mypy among them) took
        # most of the time.
        pip = [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
        steps = [[_base_python(), "-m", "venv", ".venv"], [*pip, "setuptools>=77", "wheel"],
                 [*pip, "--no-build-isolation", "-e", "."]]  # fmt: skip
        with open(log, "w") as out:
            for step in steps:
                done = subprocess.run(step, cwd=tree, env=env, stdout=out,
                                      stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                      timeout=BUILD_TIMEOUT_S)  # fmt: skip
                if done.returncode != 0:
                    tail = log.read_text(errors="replace")[-3000:]
                    raise RuntimeError(f"building {release.name} failed: {step}\n{tail}")
        if not _imports_from(python, tree):
            raise RuntimeError(f"{python} does not import shoal from {tree}")
        stamp.write_text(f"{release.name} {release.commit}\n")
        NOTICES.append(f"built {release.name} ({release.commit[:10]}) in "
                       f"{time.monotonic() - started:.1f} s into {tree}")  # fmt: skip
        return python


def _fallback(why: str) -> Build:
    if os.environ.get("SHOAL_RELEASE_REQUIRED") == "1":
        raise RuntimeError(f"SHOAL_RELEASE_REQUIRED=1 and no previous release to build: {why}")
    message = (f"NO PREVIOUS RELEASE TESTED: {why}; the working tree stands in for the "
               f"previous release (the new build differs only by {NEXT_RELEASE_ENV})")  # fmt: skip
    NOTICES.append(message)
    print(f"\n*** {message} ***", file=sys.stderr)
    return Build.current(name="working tree (fallback)", fallback=why)


@functools.cache
def previous_build() -> Build:
    """The previous release's build (built on first use), or the working tree
    when there is none to build (module docstring).

    Raises:
        RuntimeError: RELEASES names a commit a full clone lacks, or the
            build failed.
    """
    releases = parse_releases((REPO / "RELEASES").read_text())
    head = _git("rev-parse", "HEAD").stdout.strip()
    release = previous_release(releases, head)
    if release is None:
        return _fallback(f"RELEASES lists no release other than HEAD ({head[:10]})")
    if _git("cat-file", "-e", f"{release.commit}^{{commit}}").returncode != 0:
        shallow = _git("rev-parse", "--is-shallow-repository").stdout.strip() == "true"
        if not shallow:
            raise RuntimeError(f"RELEASES: {release.name}'s commit {release.commit} is not in "
                               "this (full) clone")  # fmt: skip
        return _fallback(f"{release.name}'s commit {release.commit[:10]} is not in this "
                         "shallow clone (fetch it: git fetch --unshallow)")  # fmt: skip
    python = build_release(release, cache_root())
    NOTICES.append(f"previous release: {release.name} ({release.commit[:10]}), {python}")
    return Build(name=release.name, python=str(python), cwd=str(python.parents[2]), unset=_FOREIGN)
