"""The command line against a real agent, as scripts use it (issue 42):
`shoal members` loads only what it uses, and `shoal event` and `shoal query`
take a piped stdin as their payload but never read a terminal."""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys

import msgspec

from shoal.client import Client, Member
from shoal.daemon.cli.remote import MEMBER_FIELDS

ECHO = "query:whoami=echo -n $SHOAL_SELF_NAME:$(cat)"
# What `shoal members` may load of shoal: the command line, the agent's API
# address check, the plain GET, the table printer.
MEMBERS_LOADS = {
    "shoal", "shoal.native", "shoal.kernel", "shoal.kernel.errors", "shoal.daemon",
    "shoal.daemon.cli", "shoal.daemon.cli.app", "shoal.daemon.cli.remote",
    "shoal.daemon.cli.oneshot", "shoal.daemon.cli.format", "shoal.daemon.network",
    "shoal.daemon.network.addresses",
}  # fmt: skip
# ... and never these: the agent's configuration and logging, the event loop,
# the client library (http.client, msgspec), other commands' modules.
MEMBERS_NEVER = ("structlog", "asyncio", "msgspec", "http.client", "email", "ssl",
                 "shoal.daemon.config", "shoal.client", "shoal.daemon.keys", "shoal.churn",
                 "shoal.daemon.cli.events", "shoal.daemon.cli.history")  # fmt: skip


def started(agents, extra: tuple[str, ...] = ()):
    agent = agents.add(extra=["--no-discovery", "--bootstrap-expect", "1", *extra])
    agents.wait_all_see([agent.name], "alive", [agent])
    return agent


def shoal(*args: str, stdin=subprocess.DEVNULL, data: bytes | None = None):  # noqa: ANN001
    """Run the command line; `data` goes to its stdin through a pipe."""
    if data is not None:
        return subprocess.run([sys.executable, "-m", "shoal.daemon.cli", *args], input=data,
                              capture_output=True, timeout=30)  # fmt: skip
    return subprocess.run([sys.executable, "-m", "shoal.daemon.cli", *args], stdin=stdin,
                          capture_output=True, timeout=30)  # fmt: skip


def test_shoal_members_loads_neither_the_agent_config_nor_structlog_nor_the_client(agents):
    """`shoal members` answers from a running agent having loaded the command
    line, one plain GET and the table printer: no configuration machinery,
    no structlog, no asyncio, no http.client or msgspec."""
    agent = started(agents)
    code = (
        "import atexit, json, sys\n"
        "atexit.register(lambda: print(json.dumps(sorted(sys.modules)), file=sys.stderr))\n"
        "from shoal.daemon.cli import main\n"
        f"main(['members', '--api', '{agent.ip}:7947'])\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=30, stdin=subprocess.DEVNULL)  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert agent.name in out.stdout and "alive" in out.stdout
    loaded = set(json.loads(out.stderr.strip().splitlines()[-1]))
    assert {m for m in loaded if m.startswith("shoal")} == MEMBERS_LOADS
    assert [m for m in MEMBERS_NEVER if m in loaded] == []


def test_members_json_is_what_the_client_library_reads(agents):
    """The plain GET prints what `Client.members()` decodes, field for field."""
    agent = started(agents, ("--tag", "role=broker"))
    out = shoal("members", "--json", "--api", f"{agent.ip}:7947")
    assert out.returncode == 0, out.stderr
    expected = msgspec.to_builtins(Client(f"{agent.ip}:7947", token="").members())
    assert json.loads(out.stdout) == expected
    assert [k for k, _ in MEMBER_FIELDS] == list(Member.__struct_fields__)
    out = shoal("members", "--tag", "role=brok.*", "--status", "alive", "--api",
                f"{agent.ip}:7947")  # fmt: skip
    assert agent.name in out.stdout.decode()
    out = shoal("members", "--tag", "role=brok", "--api", f"{agent.ip}:7947")
    assert out.stdout.decode().strip() == "no members"


def test_members_of_an_absent_agent_says_so_in_one_line(agents):
    """No agent at --api: the same line as every other command, exit 1."""
    out = shoal("members", "--api", "127.0.0.1:9")
    assert out.returncode == 1
    assert out.stderr.decode().startswith("shoal: cannot reach the agent at http://127.0.0.1:9")
    assert len(out.stderr.decode().splitlines()) == 1


def test_event_and_query_take_a_piped_stdin_as_their_payload(agents):
    """`echo data | shoal event NAME` fires the event with "data\\n", and a
    query's handlers get the piped bytes, through a real pipe."""
    agent = started(agents, ("--event-handler", ECHO))
    api = f"--api={agent.ip}:7947"
    read, write = os.pipe()
    os.write(write, b"release 42\n")
    os.close(write)
    try:
        out = shoal("event", "deploy", api, stdin=read)
    finally:
        os.close(read)
    assert out.returncode == 0, out.stderr
    assert out.stdout.decode().endswith("11 bytes of payload\n"), out.stdout
    out = shoal("query", "whoami", api, data=b"piped")
    assert out.returncode == 0, out.stderr
    assert out.stdout.decode().split() == [agent.name, "answered", f"{agent.name}:piped"]


def test_event_and_query_never_read_a_terminal(agents):
    """With a terminal on stdin and no payload, nothing is read from it: the
    event fires with an empty payload at once, and the query's handlers get
    none, however long the terminal stays silent."""
    agent = started(agents, ("--event-handler", ECHO))
    api = f"--api={agent.ip}:7947"
    leader, follower = pty.openpty()
    try:
        out = shoal("event", "deploy", api, stdin=follower)
        assert out.returncode == 0, out.stderr
        assert out.stdout.decode().endswith(" 0 bytes of payload\n"), out.stdout
        out = shoal("query", "whoami", api, stdin=follower)
        assert out.returncode == 0, out.stderr
        assert out.stdout.decode().split() == [agent.name, "answered", f"{agent.name}:"]
    finally:
        os.close(leader)
        os.close(follower)
