"""A real systemd boots in a container and runs the installed unit.

debootstrap builds a minimal Debian (bookworm, as on the host), shoal is
installed in it by `systemd/install.sh` from wheels built on the host, the
unit is enabled, and `systemd-nspawn -b` boots it. A oneshot unit records
whether shoal went active (with all the hardening of the unit applied by
systemd itself) and what it reported in STATUS, then powers the container
off. Slow (debootstrap takes minutes): `make test-slow`.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import require_root

ROOT = Path(__file__).resolve().parents[2]
MIRROR = "http://deb.debian.org/debian"
pytestmark = [pytest.mark.slow, pytest.mark.root]

VERDICT_UNIT = """\
[Unit]
Description=record whether shoal went active, then power off
After=shoal.service

[Service]
Type=oneshot
ExecStart=/bin/sh -c 'for i in $(seq 90); do systemctl is-active -q shoal && \
  systemctl show shoal -p StatusText | grep -q "(epoch" && break; sleep 1; done; \
  { systemctl is-active shoal; systemctl show shoal -p StatusText -p MainPID -p User; \
    journalctl -u shoal --no-pager | tail -n 20; } > /verdict; systemctl poweroff'

[Install]
WantedBy=multi-user.target
"""


def test_the_unit_starts_and_goes_active_under_a_real_systemd(tmp_path):
    require_root("debootstrap and systemd-nspawn")
    for tool in ("debootstrap", "systemd-nspawn"):
        if shutil.which(tool) is None:
            pytest.fail(f"{tool} is missing: `make test-slow` installs debootstrap and "
                        "systemd-container")  # fmt: skip
    rootfs = tmp_path / "rootfs"
    subprocess.run(["debootstrap", "--variant=minbase",
                    "--include=systemd,systemd-sysv,dbus,python3,python3-venv,procps",
                    "bookworm", str(rootfs), MIRROR],
                   check=True, capture_output=True, timeout=1200)  # fmt: skip
    # Not under /tmp: nspawn mounts a fresh tmpfs there.
    wheels = rootfs / "srv/wheels"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "-w", str(wheels), str(ROOT)],
                   check=True, capture_output=True, timeout=900)  # fmt: skip
    shutil.copytree(ROOT, rootfs / "srv/shoal-src", ignore=shutil.ignore_patterns(
        ".venv", ".git", "__pycache__", "*.egg-info", ".pytest_cache"))  # fmt: skip
    subprocess.run(["systemd-nspawn", "--register=no", "--keep-unit", "-q", "-D", str(rootfs),
                    "--setenv=PIP_OPTS=--no-index --find-links /srv/wheels",
                    "--setenv=SHOAL_PACKAGE=shoal", "/srv/shoal-src/systemd/install.sh"],
                   check=True, capture_output=True, timeout=600)  # fmt: skip
    (rootfs / "etc/shoal/shoal.toml").write_text(
        'bootstrap_expect = 1\nbind = "127.0.0.96:7946"\napi = "127.0.0.96:7947"\n'
        "discovery = false\n"
    )
    wants = rootfs / "etc/systemd/system/multi-user.target.wants"
    wants.mkdir(parents=True, exist_ok=True)
    (wants / "shoal.service").symlink_to("/usr/lib/systemd/system/shoal.service")
    (rootfs / "etc/systemd/system/verdict.service").write_text(VERDICT_UNIT)
    (wants / "verdict.service").symlink_to("/etc/systemd/system/verdict.service")
    subprocess.run(["systemd-nspawn", "--register=no", "--keep-unit", "-q", "-D", str(rootfs),
                    "-b"], capture_output=True, timeout=600)  # fmt: skip
    verdict = (rootfs / "verdict").read_text()
    lines = verdict.splitlines()
    assert lines[0] == "active", verdict
    # The agent elected itself (bootstrap_expect 1): it persisted its epoch
    # and answered its own lease request inside the sandbox.
    assert "1/1 members alive, controller" in verdict and "(epoch 1)" in verdict, verdict
    assert "User=shoal" in verdict, verdict
