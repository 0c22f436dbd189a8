"""shoal as a systemd service: the unit, the installer, the notify protocol
and watchdog, SIGHUP reload, /metrics and event handlers."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import IN_CI, poll_until

ROOT = Path(__file__).resolve().parents[2]
NOBODY = 65534


def require(tool: str) -> None:
    if shutil.which(tool) is None:
        if IN_CI:
            pytest.fail(f"{tool} is missing: `make test` installs it")
        pytest.skip(f"needs {tool} (`make test` installs it when run as root)")


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """systemd/install.sh into a staging root (DESTDIR)."""
    dest = tmp_path_factory.mktemp("destdir")
    subprocess.run([str(ROOT / "systemd" / "install.sh")], env={**os.environ, "DESTDIR": str(dest)},
                   check=True, capture_output=True, timeout=600)  # fmt: skip
    return dest


def test_the_installer_lays_out_the_tree_and_uninstalls(installed, tmp_path):
    assert (installed / "usr/lib/systemd/system/shoal.service").read_text() == (
        ROOT / "systemd/shoal.service").read_text()  # fmt: skip
    assert "u shoal" in (installed / "usr/lib/sysusers.d/shoal.conf").read_text()
    assert (installed / "etc/shoal/shoal.toml").read_text() == (
        ROOT / "systemd/shoal.toml"
    ).read_text()
    shoal = installed / "opt/shoal/bin/shoal"
    assert shoal.read_text().splitlines()[0].startswith("#!/opt/shoal/bin/python")
    assert (installed / "opt/shoal/share/doc/shoal/election.md").exists()
    assert (installed / "usr/local/share/man/man1/shoal.1").read_text().startswith(".TH")
    assert "complete" in (installed / "usr/local/share/bash-completion/completions/shoal"
                          ).read_text()  # fmt: skip
    assert (installed / "usr/local/share/zsh/site-functions/_shoal").read_text().startswith(
        "#compdef")  # fmt: skip
    out = subprocess.run([str(installed / "opt/shoal/bin/python"), "-m", "shoal.daemon.cli",
                          "--help"], capture_output=True, text=True, timeout=60)  # fmt: skip
    assert "controller" in out.stdout
    # An existing configuration is kept on reinstall; uninstall keeps it too.
    copy = tmp_path / "root"
    shutil.copytree(installed / "etc", copy / "etc")
    (copy / "etc/shoal/shoal.toml").write_text('cluster = "mine"\n')
    (copy / "usr/lib/systemd/system").mkdir(parents=True)
    (copy / "usr/lib/systemd/system/shoal.service").write_text("x")
    env = {**os.environ, "DESTDIR": str(copy)}
    subprocess.run([str(ROOT / "systemd/install.sh"), "--uninstall"], env=env, check=True,
                   capture_output=True)  # fmt: skip
    assert not (copy / "usr/lib/systemd/system/shoal.service").exists()
    assert (copy / "etc/shoal/shoal.toml").read_text() == 'cluster = "mine"\n'


def test_the_unit_verifies_cleanly_and_its_exposure_is_ok(installed, tmp_path):
    """`systemd-analyze verify` prints nothing; `security` rates it 2.0 or lower."""
    require("systemd-analyze")
    unit = tmp_path / "shoal.service"
    unit.write_text((ROOT / "systemd/shoal.service").read_text()
                    .replace("/opt/shoal", str(installed / "opt/shoal")))  # fmt: skip
    verify = subprocess.run(["systemd-analyze", "verify", "--man=no", str(unit)],
                            capture_output=True, text=True, timeout=60)  # fmt: skip
    assert verify.returncode == 0 and verify.stdout == verify.stderr == "", verify.stderr
    security = subprocess.run(["systemd-analyze", "security", "--offline=true",
                               str(ROOT / "systemd/shoal.service")],
                              capture_output=True, text=True, timeout=60)  # fmt: skip
    score = float(re.search(r"Overall exposure level for shoal.service: ([\d.]+)",
                            security.stdout).group(1))  # fmt: skip
    assert score <= 2.0, security.stdout[-2000:]


class NotifySocket:
    """An AF_UNIX datagram socket playing systemd's part."""

    def __init__(self) -> None:
        self.name = f"@shoal-test-{os.getpid()}-{time.monotonic_ns()}"
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind("\0" + self.name[1:])
        self.sock.settimeout(0.1)
        self.messages: list[tuple[float, str]] = []

    def pump(self) -> None:
        while True:
            try:
                data = self.sock.recv(4096)
            except TimeoutError:
                return
            self.messages.append((time.monotonic(), data.decode()))

    def wait_for(self, line: str, timeout_s: float, after: float = 0.0) -> float:
        def seen() -> float | None:
            self.pump()
            for at, msg in self.messages:
                if at >= after and line in msg.splitlines():
                    return at
            return None

        return poll_until(seen, timeout_s)

    def pings(self, since: float, until: float) -> list[float]:
        return [at for at, msg in self.messages if since <= at <= until and msg == "WATCHDOG=1"]


def restricted_prefix() -> list[str]:
    """Run the agent as systemd would: no privileges, no capabilities, and
    as the nobody user when the repository is readable by it."""
    require("setpriv")
    base = ["setpriv", "--no-new-privs", "--inh-caps=-all", "--bounding-set=-all"]
    if os.geteuid() != 0:
        return base
    as_nobody = [*base, f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]
    probe = subprocess.run([*as_nobody, sys.executable, "-c", "import shoal.daemon.cli"], cwd=ROOT,
                           capture_output=True, timeout=60)  # fmt: skip
    return as_nobody if probe.returncode == 0 else base


def test_notify_ready_status_watchdog_reload_and_stopping():
    """READY once listening, STATUS with members and controller, WATCHDOG at
    half WATCHDOG_USEC from the event loop (they stop while the loop is
    blocked), RELOADING/READY around SIGHUP, STOPPING on SIGTERM; run with
    no capabilities and no new privileges (as `nobody` where possible)."""
    import tempfile

    notify = NotifySocket()
    # Outside pytest's private temporary tree, so that `nobody` can use it.
    data = Path(tempfile.mkdtemp(prefix="shoal-notify-"))
    data.chmod(0o777)
    env = {**os.environ, "NOTIFY_SOCKET": notify.name, "WATCHDOG_USEC": "1000000",
           "SHOAL_DEBUG_API": "1"}  # fmt: skip
    args = [*restricted_prefix(), sys.executable, "-m", "shoal.daemon.cli", "agent", "--node-name",
            "svc", "--bind", "127.0.0.91:7946", "--api", "127.0.0.91:7947", "--data-dir",
            str(data / "d"), "--no-discovery", "--bootstrap-expect", "1"]  # fmt: skip
    started = time.monotonic()
    proc = subprocess.Popen(args, cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)  # fmt: skip
    try:
        try:
            ready_at = notify.wait_for("READY=1", 20)
        except AssertionError:
            proc.kill()
            raise AssertionError(proc.communicate()[1].decode()[-3000:]) from None
        print(f"start to READY: {ready_at - started:.2f} s")
        assert any(line.startswith("STATUS=") and "members alive" in line
                   for _, m in notify.messages for line in m.splitlines())  # fmt: skip
        poll_until(lambda: notify.pump() or any("controller svc (epoch" in m
                                                for _, m in notify.messages), 10)  # fmt: skip
        t0 = time.monotonic()
        poll_until(lambda: notify.pump() or time.monotonic() > t0 + 2.0, 5)
        pings = notify.pings(t0, t0 + 2.0)
        assert 3 <= len(pings) <= 6, pings  # every 0.5 s
        # Block the event loop for 2 s: the pings must stop meanwhile.
        req = subprocess.run(["curl", "-s", "-X", "POST", "-d", '{"seconds": 2}',
                              "http://127.0.0.91:7947/v1/debug/block"],
                             capture_output=True, timeout=30)  # fmt: skip
        assert b"blocked_s" in req.stdout
        notify.pump()
        recent = notify.pings(t0, time.monotonic())
        gaps = [b - a for a, b in zip(recent, recent[1:])]
        assert max(gaps) >= 1.8, gaps
        reload_from = time.monotonic()
        proc.send_signal(signal.SIGHUP)
        reloading = notify.wait_for("RELOADING=1", 10, after=reload_from)
        assert notify.wait_for("READY=1", 10, after=reloading) >= reloading
        stop_from = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        notify.wait_for("STOPPING=1", 10, after=stop_from)
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if proc.stderr is not None:
            proc.stderr.close()
        notify.sock.close()
        shutil.rmtree(data, ignore_errors=True)


def test_sighup_reload_changes_tags_that_other_agents_see(agents, tmp_path):
    config = tmp_path / "shoal.toml"
    config.write_text('tags = { role = "broker" }\n')
    first = agents.add("reloader", extra=["--config", str(config), "--no-discovery"])
    second = agents.add("watcher", join=[first.gossip], extra=["--no-discovery"])
    poll_until(lambda: second.members().get("reloader", {}).get("tags") == {"role": "broker"}, 20)
    config.write_text('tags = { role = "controller" }\ncluster = "other"\n')
    first.signal(signal.SIGHUP)
    poll_until(lambda: second.members().get("reloader", {}).get("tags") == {"role": "controller"},
               20)  # fmt: skip
    log = first.log()
    assert "configuration reloaded" in log and "need a restart" in log and "cluster" in log


def test_metrics_parse_and_counters_move(agents):
    started = agents.start(2, extra=["--no-discovery"])
    poll_until(lambda: len(started[1].members()) == 2, 20)

    def scrape() -> dict[str, float]:
        import urllib.request

        with urllib.request.urlopen(f"http://{started[0].ip}:7947/metrics", timeout=5) as resp:
            assert resp.headers["content-type"].startswith("text/plain")
            text = resp.read().decode()
        out = {}
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                key = sample.name + json.dumps(sample.labels, sort_keys=True)
                out[key] = sample.value
        return out

    first = scrape()
    assert first['shoal_members{"state": "alive"}'] == 2
    assert "shoal_controller_epoch{}" in first and "shoal_store_records{}" in first
    sent = "shoal_agent_datagrams_out_total{}"
    poll_until(lambda: scrape()[sent] > first[sent], 10)


def test_event_handlers_run_with_the_event(agents, tmp_path):
    out = tmp_path / "events.txt"
    handler = f'member-joined=echo "$SHOAL_EVENT $SHOAL_NAME $SHOAL_STATUS" >> {out}; cat >> {out}'
    seed = agents.add("seed", extra=["--event-handler", handler, "--no-discovery"])
    agents.add("newcomer", join=[seed.gossip], extra=["--no-discovery"])
    lines = poll_until(lambda: out.exists() and len(out.read_text().splitlines()) >= 2
                       and out.read_text().splitlines(), 20)  # fmt: skip
    assert lines[0] == "member-joined newcomer alive"
    event = json.loads(lines[1])
    assert event["name"] == "newcomer" and event["observer"] == "seed"
