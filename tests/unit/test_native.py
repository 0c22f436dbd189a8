"""Which path runs, compiled (mypyc) or pure Python, and that both run the same program."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from shoal import native

SIMULATE = [sys.executable, "-m", "shoal.daemon.cli", "simulate", "--nodes", "30",
            "--duration", "20", "--loss", "0.05", "--crash", "1", "--seed", "3"]  # fmt: skip


def _run(args: list[str], pure: bool | None) -> subprocess.CompletedProcess[str]:
    """Run with SHOAL_PURE=1 (True), without it (False), or as this process (None)."""
    env = dict(os.environ)
    if pure is not None:
        env.pop("SHOAL_PURE", None)
        env.update({"SHOAL_PURE": "1"} if pure else {})
    return subprocess.run(args, env=env, capture_output=True, text=True, timeout=120, check=True)


def test_simulate_says_which_path_it_runs():
    text = _run(SIMULATE, pure=None).stdout
    assert f"hot path: {native.describe()}" in text
    assert "compiled (mypyc)" in text or "pure Python" in text


def test_shoal_pure_at_run_time_runs_the_sources():
    """The same install runs pure Python with SHOAL_PURE=1 (to compare the two)."""
    out = _run([*SIMULATE, "--json"], pure=True).stdout
    assert json.loads(out)["hot_path"].startswith("pure Python")


def test_the_compiled_and_the_pure_path_run_the_same_simulation():
    """Same seed, same run, byte for byte, whichever path runs it."""
    compiled, pure = (json.loads(_run([*SIMULATE, "--json"], pure=p).stdout) for p in (False, True))
    for result in (compiled, pure):
        del result["wall_s"], result["hot_path"]
    assert compiled == pure


def test_a_changed_source_sets_the_compiled_modules_aside(tmp_path, monkeypatch):
    """An edited checkout never runs a stale build: it runs the sources."""
    for name in ("_why_pure", "_probe"):  # select() sets them: restored after the test
        monkeypatch.setattr(native, name, getattr(native, name))
    monkeypatch.delenv("SHOAL_PURE", raising=False)
    (tmp_path / "mod.py").write_text("X = 2\n")
    (tmp_path / native.RECORD).write_text("mod 6 0 00000000000000000000000000000000\n")
    before = list(sys.meta_path)
    try:
        why = native.select(str(tmp_path))
        assert why is not None and why.startswith("mod.py changed since it was compiled")
        spec = sys.meta_path[0].find_spec("shoal.mod")
        assert spec is not None and spec.origin == str(tmp_path / "mod.py")
    finally:
        sys.meta_path[:] = before


def test_ci_runs_the_compiled_path():
    """Under CI=true `make` has installed a C compiler (as root), so the
    install must be compiled: a build that fell back to pure Python (a
    library's types missing from the build requirements, say) would
    otherwise pass every test unnoticed, as it once did."""
    if os.environ.get("CI") != "true" or os.environ.get("SHOAL_PURE", "") not in ("", "0"):
        pytest.skip("not CI, or SHOAL_PURE: a laptop may lack a C compiler")
    assert native.compiled(), native.describe()
