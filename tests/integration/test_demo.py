"""`make run` (shoal demo) tells its whole story and exits cleanly."""

import subprocess
import sys


def test_the_demo_forms_loses_a_member_heals_and_stops():
    """A newcomer running the demo sees the cluster form, fail over and heal."""
    result = subprocess.run([sys.executable, "-m", "shoal.daemon.cli", "demo", "--nodes", "3"],
                            capture_output=True, text=True, timeout=120)  # fmt: skip
    out = result.stdout
    assert result.returncode == 0, result.stderr
    assert "The cluster formed with no address configured" in out
    assert "gossip encrypted with a key made for this run" in out
    assert "Controller: demo-" in out and "agreed by all 3 agents" in out
    assert "readable on demo-2" in out
    assert "is controller with epoch" in out
    assert "All 2 survivors mark demo-" in out and " failed" in out
    assert "is alive again everywhere" in out
    assert "All 3 agents exited with code 0." in out


def test_the_demo_refuses_a_silly_size():
    """A bad --nodes is a one-line usage error, exit 2."""
    result = subprocess.run([sys.executable, "-m", "shoal.daemon.cli", "demo", "--nodes", "1"],
                            capture_output=True, text=True, timeout=30)  # fmt: skip
    assert result.returncode == 2
    assert result.stderr.strip() == "shoal: --nodes: expected 2 to 100"
