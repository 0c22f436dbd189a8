"""Shared test set-up: markers, CI rules for skips, poll_until, and the
figures tests report."""

from __future__ import annotations

import hashlib
import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest

T = TypeVar("T")
IN_CI = os.environ.get("CI") == "true"


def poll_until(predicate: Callable[[], T], timeout_s: float, interval_s: float = 0.05) -> T:
    """Call `predicate` until it returns something truthy; fail at the deadline.

    The waiting uses a deadline, never a fixed sleep for a condition.
    """
    deadline = time.monotonic() + timeout_s
    last: T = predicate()
    while not last:
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout_s} s (last value {last!r})")
        time.sleep(interval_s)
        last = predicate()
    return last


def require_root(reason: str) -> None:
    """Skip on a laptop without root; fail in CI, where everything must run."""
    if os.geteuid() != 0:
        if IN_CI:
            pytest.fail(f"CI=true but not root: {reason}")
        pytest.skip(f"needs root: {reason}")


def require_program(program: str, package: str) -> str:
    """The path of `program`; skip without it on a laptop, fail in CI
    (where `make sysdeps` installs Debian's `package`)."""
    path = shutil.which(program, path=os.environ.get("PATH", "") + ":/usr/sbin:/sbin")
    if path is None:
        if IN_CI:
            pytest.fail(f"CI=true but {program} is missing "
                        f"(Debian package {package}: make sysdeps)")  # fmt: skip
        pytest.skip(f"needs {program} (Debian package {package}: make sysdeps)")
    return path


def tree_digest(root: Path) -> dict[str, tuple[str, int, str, int]]:
    """Every file and directory under `root` (itself included): relative
    name -> (kind, size, SHA-256 of the contents, mtime in ns). Two equal
    digests mean nothing was created, removed, written or touched."""
    out: dict[str, tuple[str, int, str, int]] = {}
    for path in [root, *sorted(root.rglob("*"))]:
        st = path.lstat()
        if path.is_dir():
            out[str(path.relative_to(root))] = ("dir", 0, "", st.st_mtime_ns)
        else:
            digest = hashlib.sha256(path.read_bytes()).hexdigest()
            out[str(path.relative_to(root))] = ("file", st.st_size, digest, st.st_mtime_ns)
    return out


# Figures a test reports (timings, counts) travel with its report, so that
# they reach the summary: `figure(line)` in a
# test, or ("figure", line) in a report's user_properties.
_FIGURES: list[str] = []


@pytest.fixture
def figure(request: pytest.FixtureRequest) -> Callable[[str], None]:
    def report(line: str) -> None:
        request.node.user_properties.append(("figure", line))

    return report


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.when != "teardown":  # it carries them all (each phase's report does)
        return
    _FIGURES.extend(str(value) for key, value in report.user_properties if key == "figure")


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if _FIGURES:
        terminalreporter.section("figures the tests reported")
        for line in _FIGURES:
            terminalreporter.write_line(line)
