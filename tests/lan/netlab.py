"""A virtual LAN for tests: network namespaces, veth pairs, one Linux bridge.

    <tag>-br   the bridge's own namespace: br0, and one port per host
    <tag>-h1   host 1: eth0 = 10.<net>.0.1/24, lo, multicast route
    ...

`<tag>` is `shl<pid>`; names of namespaces whose owner process is gone are
removed at the start of a session, so a killed test run leaves nothing behind
for long. Agents run inside hosts with `ip netns exec`. The test process
reaches an agent's API by opening its socket inside the host's namespace
(setns(2) on a helper thread; the socket keeps its namespace), so no route
from the root namespace into the LAN is needed and nothing leaves the
machine. Loss is nftables `numgen random` on a host's input; a cut is the
host's bridge port going down.
"""

from __future__ import annotations

import ctypes
import http.client
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

CLONE_NEWNET = 0x40000000
_libc = ctypes.CDLL(None, use_errno=True)
_PREFIX = "shl"


def sh(*args: str, check: bool = True, input: str | None = None) -> str:
    result = subprocess.run(args, capture_output=True, text=True, input=input, timeout=30)
    if check and result.returncode != 0:
        raise RuntimeError(f"{' '.join(args)}: {result.stderr.strip()}")
    return result.stdout


def _pid_alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, IndexError):
        return False
    return state != "Z"


def require_lan() -> None:
    """Before a virtual LAN is built: skip without root (fail under
    CI=true), fail when `ip` or `nft` is missing."""
    import pytest  # here: bench/discovery.py builds LANs without pytest

    from tests.conftest import require_root

    require_root("network namespaces, veth and a bridge")
    for tool in ("ip", "nft"):
        if shutil.which(tool) is None:
            pytest.fail(f"{tool} is missing: `make test` installs iproute2 and nftables")


def remove_stale_namespaces() -> None:
    """Delete namespaces left by test runs whose process is gone."""
    for line in sh("ip", "netns", "list", check=False).splitlines():
        name = line.split()[0] if line.split() else ""
        m = re.match(rf"{_PREFIX}(\d+)-", name)
        if m and not _pid_alive(int(m.group(1))):
            _delete_namespace(name)


def _delete_namespace(name: str) -> None:
    for pid in sh("ip", "netns", "pids", name, check=False).split():
        try:
            os.kill(int(pid), signal.SIGKILL)
        except ProcessLookupError:
            pass
    sh("ip", "netns", "del", name, check=False)


def socket_in(ns: str, family: int = socket.AF_INET, kind: int = socket.SOCK_STREAM,
              proto: int = 0) -> socket.socket:  # fmt: skip
    """A socket that lives in network namespace `ns`."""
    box: dict[str, Any] = {}

    def inside() -> None:
        try:
            fd = os.open(f"/var/run/netns/{ns}", os.O_RDONLY)
            try:
                if _libc.setns(fd, CLONE_NEWNET) != 0:
                    raise OSError(ctypes.get_errno(), "setns failed")
            finally:
                os.close(fd)
            box["sock"] = socket.socket(family, kind, proto)
        except OSError as exc:
            box["error"] = exc

    thread = threading.Thread(target=inside)  # setns changes this thread only
    thread.start()
    thread.join()
    if "error" in box:
        raise box["error"]
    sock: socket.socket = box["sock"]
    return sock


class Host:
    """One machine of the virtual LAN."""

    def __init__(self, lan: VirtualLan, index: int) -> None:
        self.lan = lan
        self.index = index
        self.ns = f"{lan.tag}-h{index}"
        self.ip = f"10.{lan.net}.0.{index}"
        self.port = f"h{index}"  # its port on the bridge
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = lan.workdir / f"h{index}.log"

    def run(self, *args: str, check: bool = True) -> str:
        return sh("ip", "netns", "exec", self.ns, *args, check=check)

    def start_agent(self, name: str | None = None, extra: tuple[str, ...] = ()) -> Host:
        args = ["ip", "netns", "exec", self.ns, sys.executable, "-m", "shoal.daemon.cli", "agent",
                "--node-name", name or f"host-{self.index}", "--bind", f"{self.ip}:7946",
                "--api", "127.0.0.1:7947", "--data-dir", str(self.lan.workdir / self.ns),
                "--log-format", "json", *extra]  # fmt: skip
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(args, stdout=log, stderr=log, stdin=subprocess.DEVNULL,
                                     cwd=Path(__file__).resolve().parents[2])  # fmt: skip
        log.close()
        return self

    def shoal(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        """Run `shoal ARGS --api <this host's agent>` inside this host."""
        result = subprocess.run(
            ["ip", "netns", "exec", self.ns, sys.executable, "-m", "shoal.daemon.cli", *args,
             "--api", "127.0.0.1:7947"], capture_output=True, text=True, timeout=60,
            stdin=subprocess.DEVNULL, cwd=Path(__file__).resolve().parents[2])  # fmt: skip
        if check and result.returncode != 0:
            raise RuntimeError(f"shoal {' '.join(args)} on {self.ns}: exit {result.returncode}\n"
                               f"{result.stdout}{result.stderr}")  # fmt: skip
        return result

    def udp_receive_errors(self) -> int:
        """Datagrams this host's kernel dropped for a full socket buffer."""
        lines = [ln.split() for ln in self.run("cat", "/proc/net/snmp").splitlines()
                 if ln.startswith("Udp:")]  # fmt: skip
        return int(dict(zip(lines[0], lines[1], strict=True))["RcvbufErrors"])

    def post(self, path: str, timeout_s: float = 3.0) -> Any:
        return self.api(path, timeout_s, method="POST")

    def connect_api(self, timeout_s: float) -> http.client.HTTPConnection:
        """A connection to this host's agent API, on the host's own loopback
        (opened inside its namespace: OSError when the agent does not listen)."""
        sock = socket_in(self.ns)
        sock.settimeout(timeout_s)
        try:
            sock.connect(("127.0.0.1", 7947))
        except OSError:
            sock.close()
            raise
        conn = http.client.HTTPConnection("127.0.0.1", 7947, timeout=timeout_s)
        conn.sock = sock
        return conn

    def api(self, path: str, timeout_s: float = 3.0, method: str = "GET") -> Any:
        conn = self.connect_api(timeout_s)
        try:
            conn.request(method, path, body=b"{}" if method == "POST" else None)
            return json.loads(conn.getresponse().read())
        finally:
            conn.close()

    def put(self, key: str, value: str, timeout_s: float = 3.0) -> tuple[int, Any]:
        """`PUT /v1/kv/<key>` on this host's agent: (HTTP status, JSON answer)."""
        conn = self.connect_api(timeout_s)
        try:
            conn.request("PUT", f"/v1/kv/{key}", body=value.encode())
            response = conn.getresponse()
            return response.status, json.loads(response.read())
        finally:
            conn.close()

    def members(self) -> dict[str, str]:
        """name -> status, as this host's agent sees it ({} if unreachable)."""
        try:
            return {m["name"]: m["status"] for m in self.api("/v1/members")["members"]}
        except (OSError, ValueError, http.client.HTTPException):
            return {}

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def stop_agent(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def terminate_agent(self, timeout_s: float = 15.0) -> None:
        """SIGTERM: the agent leaves gracefully (a controller releases its
        lease) and exits; SIGKILL if it has not within `timeout_s`."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.stop_agent()

    # -- faults --------------------------------------------------------------

    def drop_incoming(self, percent: int) -> None:
        """Drop `percent` % of incoming UDP at random (this kernel has no netem)."""
        rules = ("table inet shoal_loss {\n chain input {\n"
                 "  type filter hook input priority 0; policy accept;\n"
                 f"  meta l4proto udp numgen random mod 100 < {percent} drop\n"
                 " }\n}\n")  # fmt: skip
        sh("ip", "netns", "exec", self.ns, "nft", "-f", "-", input=rules)

    def block_multicast(self) -> None:
        """Drop all multicast in and out (a switch that filters mDNS)."""
        rules = ("table inet shoal_mcast {\n"
                 " chain input { type filter hook input priority 0; policy accept;\n"
                 "  ip daddr 224.0.0.0/4 drop\n }\n"
                 " chain output { type filter hook output priority 0; policy accept;\n"
                 "  ip daddr 224.0.0.0/4 drop\n }\n}\n")  # fmt: skip
        sh("ip", "netns", "exec", self.ns, "nft", "-f", "-", input=rules)

    def ignore_hosts(self, others: list[Host]) -> None:
        """Drop everything that arrives from `others` (one side of a partition)."""
        sources = ", ".join(o.ip for o in others)
        rules = ("table inet shoal_part {\n chain input {\n"
                 "  type filter hook input priority 0; policy accept;\n"
                 f"  ip saddr {{ {sources} }} drop\n }}\n}}\n")  # fmt: skip
        sh("ip", "netns", "exec", self.ns, "nft", "-f", "-", input=rules)

    def unignore_hosts(self) -> None:
        """Undo `ignore_hosts`."""
        sh("ip", "netns", "exec", self.ns, "nft", "delete", "table", "inet", "shoal_part")

    def cut(self) -> None:
        """Unplug this host from the bridge."""
        sh("ip", "-n", self.lan.bridge_ns, "link", "set", self.port, "down")

    def reconnect(self) -> None:
        """Plug it back in."""
        sh("ip", "-n", self.lan.bridge_ns, "link", "set", self.port, "up")


class VirtualLan:
    """N hosts on one bridge, torn down with everything inside on close()."""

    _counter = 0

    def __init__(self, n: int, workdir: Path, disable_dad: bool = True) -> None:
        VirtualLan._counter += 1
        self.tag = f"{_PREFIX}{os.getpid()}-{VirtualLan._counter}"
        self.net = 100 + VirtualLan._counter % 100
        self.bridge_ns = f"{self.tag}-br"
        self.workdir = workdir
        self.disable_dad = disable_dad
        self.hosts: list[Host] = []
        sh("ip", "netns", "add", self.bridge_ns)
        sh("ip", "-n", self.bridge_ns, "link", "set", "lo", "up")
        sh("ip", "-n", self.bridge_ns, "link", "add", "br0", "type", "bridge")
        sh("ip", "-n", self.bridge_ns, "link", "set", "br0", "up")
        for i in range(1, n + 1):
            self.add_host(i)

    def add_host(self, i: int) -> Host:
        host = Host(self, i)
        sh("ip", "netns", "add", host.ns)
        if self.disable_dad:
            host.run("sysctl", "-q", "-w", "net.ipv6.conf.all.accept_dad=0")
            host.run("sysctl", "-q", "-w", "net.ipv6.conf.default.accept_dad=0")
        sh("ip", "link", "add", "eth0", "netns", host.ns, "type", "veth",
           "peer", "name", host.port, "netns", self.bridge_ns)  # fmt: skip
        sh("ip", "-n", host.ns, "addr", "add", f"{host.ip}/24", "dev", "eth0")
        sh("ip", "-n", host.ns, "link", "set", "lo", "up")
        sh("ip", "-n", host.ns, "link", "set", "eth0", "up")
        sh("ip", "-n", host.ns, "route", "add", "224.0.0.0/4", "dev", "eth0")
        sh("ip", "-n", self.bridge_ns, "link", "set", host.port, "master", "br0")
        sh("ip", "-n", self.bridge_ns, "link", "set", host.port, "up")
        self.hosts.append(host)
        return host

    def partition(self, side_a: list[Host], side_b: list[Host]) -> None:
        """Split the LAN in two: neither side hears the other."""
        for host in side_a:
            host.ignore_hosts(side_b)
        for host in side_b:
            host.ignore_hosts(side_a)

    def heal(self, hosts: list[Host]) -> None:
        """Undo `partition` for these hosts."""
        for host in hosts:
            host.unignore_hosts()

    def close(self) -> None:
        for host in self.hosts:
            host.stop_agent()
            _delete_namespace(host.ns)
        _delete_namespace(self.bridge_ns)
