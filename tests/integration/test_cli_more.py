"""The `shoal` commands of issues 30, 29 and 23 against real agents: sessions,
checks, members --healthy, event, query, kv put --fence/--ephemeral, kv
watch; and the completion scripts and the manual page made from the parser."""

from __future__ import annotations

import json
import os
import queue
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from shoal.client import Client
from tests.conftest import poll_until
from tests.integration.agents import shoal_cli

ROOT = Path(__file__).parents[2]
ECHO = "query:whoami=echo -n $SHOAL_SELF_NAME:$(cat)"


def client_of(agent) -> Client:
    return Client(f"{agent.ip}:7947", token="")


def api(agent) -> str:
    return f"--api={agent.ip}:7947"


def started(agents, n: int = 1, extra: tuple[str, ...] = ()) -> list:
    out = [agents.add(extra=["--no-discovery", "--bootstrap-expect", str(n), *extra])
           for _ in range(n)]  # fmt: skip
    agents.wait_all_see([a.name for a in out], "alive", out)
    return out


def shoal_in(stdin: bytes, *args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([sys.executable, "-m", "shoal.daemon.cli", *args], input=stdin,
                          capture_output=True, timeout=60)  # fmt: skip


def test_sessions_lists_each_open_session_with_its_keys(agents):
    (a,) = started(agents)
    out = shoal_cli("sessions", api(a))
    assert (out.returncode, out.stdout) == (0, "no sessions\n")
    with client_of(a).session(ttl=30, name="broker-1") as session:
        session.put("brokers/1", "10.0.0.5:9092")
        out = shoal_cli("sessions", api(a))
        assert out.returncode == 0, out.stderr
        header, row = out.stdout.splitlines()
        assert header.split()[:3] == ["ID", "Name", "TTL"]
        assert row.split()[:3] == [session.id, "broker-1", "30s"] and row.endswith("brokers/1")
        listed = json.loads(shoal_cli("sessions", api(a), "--json").stdout)
        assert [(s["id"], s["keys"]) for s in listed] == [(session.id, ["brokers/1"])]
    assert shoal_cli("sessions", api(a)).stdout == "no sessions\n"


def test_checks_and_members_by_health_follow_a_ttl_check(agents, tmp_path):
    config = tmp_path / "ttl.toml"
    config.write_text('[[checks]]\nid = "app"\nkind = "ttl"\nttl_s = 30\n')
    checked = agents.add(name="checked", extra=["--no-discovery", "--config", str(config)])
    other = agents.add(extra=["--no-discovery"])
    agents.wait_all_see(["checked", other.name], "alive", [checked, other])
    out = shoal_cli("checks", api(checked))
    assert out.returncode == 0 and out.stdout.startswith("Health: critical\n"), out.stderr
    assert out.stdout.splitlines()[2].split() == ["app", "ttl", "critical", "ttl", "30s", "no",
                                                  "update", "yet"]  # fmt: skip
    client_of(checked).check_pass("app", "serving")
    listed = json.loads(shoal_cli("checks", api(checked), "--json").stdout)
    assert listed["health"] == "passing" and listed["checks"][0]["output"] == "serving"

    def names(*flags: str) -> list[str]:
        out = shoal_cli("members", api(other), "--json", *flags)
        assert out.returncode == 0, out.stderr
        return sorted(m["name"] for m in json.loads(out.stdout))

    poll_until(lambda: names("--healthy") == sorted(["checked", other.name]), 15)
    client_of(checked).check_fail("app", "disk full")
    poll_until(lambda: names("--health", "critical") == ["checked"], 15)
    assert names("--healthy") == [other.name]
    out = shoal_cli("members", api(other), "--health", "bogus")
    assert out.returncode == 2


def test_an_event_from_the_command_line_runs_every_handler_with_its_payload(agents, tmp_path):
    runs = tmp_path / "runs"
    runs.mkdir()
    # Written aside, then renamed: the file appears with the whole payload
    # (`cat > file` creates it before the payload is in).
    name = '"$SHOAL_SELF_NAME.$SHOAL_EVENT_ID"'
    handler = f"cat > {runs}/.{name} && mv {runs}/.{name} {runs}/{name}"
    a, b = started(agents, 2, ("--event-handler", f"user:deploy={handler}"))
    with client_of(b).watch_events() as watch:
        out = shoal_in(b"release 42", "event", "deploy", "-", api(a))
        assert out.returncode == 0, out.stderr
        ident = out.stdout.decode().split("id ")[1].split(",")[0]
        event = next(watch)
    assert (event.name, event.id, event.payload, event.origin) == (
        "deploy",
        ident,
        b"release 42",
        a.name,
    )
    for agent in (a, b):
        path = runs / f"{agent.name}.{ident}"
        poll_until(path.exists, 10)
        assert path.read_bytes() == b"release 42"
    out = shoal_cli("event", "two words", api(a))
    assert out.returncode == 1 and len(out.stderr.splitlines()) == 1, out.stderr


def test_query_prints_each_expected_member_and_exits_by_how_many_answered(agents):
    answering = started(agents, 2, ("--event-handler", ECHO))
    silent = agents.add(name="no-handler", extra=["--no-discovery"])
    everyone = [*answering, silent]
    agents.wait_all_see([x.name for x in everyone], "alive", everyone)
    out = shoal_cli("query", "whoami", "ping", api(answering[0]))
    assert out.returncode == 1, out.stderr  # one expected member has no handler
    lines = dict(line.split(None, 1) for line in out.stdout.splitlines())
    for agent in answering:
        assert lines[agent.name].split() == ["answered", f"{agent.name}:ping"]
    assert lines["no-handler"].strip() == "no-handler"
    assert "2 answered, 3 wanted" in out.stderr
    out = shoal_cli("query", "whoami", "ping", "--min-responses", "2", api(answering[0]))
    assert out.returncode == 0, out.stderr
    only = answering[1].name
    out = shoal_cli("query", "whoami", "--node", f"^{only}$", "--json", api(answering[0]))
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert list(result["members"]) == [only] and result["members"][only]["answer"] == f"{only}:"


@pytest.mark.parametrize("flags,words", [
    (["--node", "("], "--node"), (["--tag", "rack=[a"], "--tag"), (["--tag", "norack"], "--tag"),
    (["--timeout", "0"], "--timeout"), (["--timeout", "abc"], "--timeout"),
    (["--min-responses", "-1"], "--min-responses"),
])  # fmt: skip
def test_a_bad_query_is_one_line_and_exit_2_and_asks_nobody(agents, flags, words):
    (a,) = started(agents, 1, ("--event-handler", ECHO))
    out = shoal_cli("query", "whoami", *flags, api(a))
    assert out.returncode == 2 and words in out.stderr, out.stderr
    assert len(out.stderr.strip().splitlines()) == 1 and out.stdout == ""


def test_kv_put_with_a_fence_and_ephemeral_and_kv_watch_follows_changes(agents):
    a, b = started(agents, 2)
    epoch = client_of(a).wait_controller(timeout=30).epoch
    watcher = subprocess.Popen([sys.executable, "-m", "shoal.daemon.cli", "kv", "watch", "cfg/",
                                api(b)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True)  # fmt: skip
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(x) for x in watcher.stdout], daemon=True).start()
    try:
        assert "Watching keys under 'cfg/'" in watcher.stderr.readline()
        out = shoal_cli("kv", "put", "cfg/mode", "fast", "--fence", str(epoch), api(a))
        assert out.returncode == 0 and f"(epoch {epoch})" in out.stdout, out.stderr
        assert lines.get(timeout=30).strip() == "put cfg/mode fast (sync)"
        refused = shoal_cli("kv", "put", "cfg/mode", "slow", api(a))  # fenced key: unfenced refused
        assert refused.returncode == 1 and "refused" in refused.stderr
        out = shoal_cli("kv", "put", "cfg/me", "here", "--ephemeral", api(b))
        assert out.returncode == 0, out.stderr
        assert lines.get(timeout=30).strip() == "put cfg/me here"
        poll_until(lambda: _has_key(a, "cfg/me"), 10)
        assert client_of(a).kv.get("cfg/me").owner == b.name
        assert shoal_cli("kv", "delete", "cfg/mode", "--fence", str(epoch), api(a)).returncode == 0
        assert lines.get(timeout=30).strip() == "delete cfg/mode (sync)"
        bad = shoal_cli("kv", "put", "cfg/x", "v", "--fence", "soon", api(a))
        assert bad.returncode == 2 and "--fence" in bad.stderr
    finally:
        watcher.kill()
        watcher.wait(10)
        watcher.stdout.close()
        watcher.stderr.close()


def _has_key(agent, key: str) -> bool:
    try:
        client_of(agent).kv.get(key)
    except Exception:
        return False
    return True


def test_force_leave_says_it_works_from_any_agent_on_failed_voters():
    text = " ".join(shoal_cli("--help").stdout.split())
    assert "force-leave remove a failed voter (from any agent" in text


def test_bash_completion_completes_commands_and_flags_from_the_parser():
    out = shoal_cli("completion", "bash")
    assert out.returncode == 0, out.stderr
    probe = ('source /dev/stdin; COMP_WORDS=(shoal que); COMP_CWORD=1; _shtab_shoal; '
             'echo "${COMPREPLY[@]}"; COMP_WORDS=(shoal kv put k v --e); COMP_CWORD=5; '
             '_shtab_shoal; echo "${COMPREPLY[@]}"')  # fmt: skip
    done = subprocess.run(["bash", "-c", probe], input=out.stdout, capture_output=True,
                          text=True, timeout=30)  # fmt: skip
    assert done.stdout.splitlines() == ["query", "--ephemeral"], done.stderr


def test_zsh_completion_is_a_valid_zsh_script():
    out = shoal_cli("completion", "zsh")
    assert out.returncode == 0 and "#compdef shoal" in out.stdout, out.stderr
    if shutil.which("zsh") is None:
        if os.environ.get("CI") == "true":
            pytest.fail("zsh is missing: `make test` installs it (sysdeps)")
        pytest.skip("no zsh here to parse it (apt-get install zsh)")
    done = subprocess.run(["zsh", "-n"], input=out.stdout, capture_output=True, text=True,
                          timeout=30)  # fmt: skip
    assert done.returncode == 0, done.stderr


def test_the_manual_page_is_made_from_the_parser_and_shoal_man_prints_it():
    """docs/shoal.1 is rewritten here when a command changed: commit it."""
    try:
        import argparse_manpage  # noqa: F401  (the generator the test extra installs)
    except ImportError:
        if os.environ.get("CI") == "true":
            pytest.fail("argparse-manpage is missing: make test installs the test extra")
        pytest.skip("argparse-manpage is missing (pip install -e '.[test]')")
    from shoal.daemon.cli.app import _parser
    from shoal.daemon.cli.manual import manual_page

    path = ROOT / "docs" / "shoal.1"
    fresh = manual_page(_parser)
    stale = path.read_text() != fresh
    if stale:
        path.write_text(fresh)
    assert not stale, "docs/shoal.1 was stale and has been regenerated: commit it"
    for command in ("sessions", "checks", "event", "query", "kv watch", "completion"):
        assert f"'shoal {command}'" in fresh
    out = shoal_cli("man")
    assert out.returncode == 0 and out.stdout == fresh
    if shutil.which("man"):
        shown = subprocess.run(["man", "-l", "-"], input=fresh, capture_output=True, text=True,
                               env={**os.environ, "MANWIDTH": "80", "MANPAGER": "cat"},
                               timeout=30)  # fmt: skip
        assert "shoal query" in shown.stdout
