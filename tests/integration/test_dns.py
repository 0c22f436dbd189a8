"""The DNS interface, asked with the real `dig` (Debian's dnsutils), of a 3-agent cluster."""

import os
import random
import socket
import subprocess
import time

import pytest
from dnslib import DNSRecord

from tests.conftest import poll_until, require_program
from tests.integration.agents import api_request, next_ip, shoal_cli
from tests.integration.dnsagents import DNS_PORT, Dig, add_dns_agent, dig, wait_formed


@pytest.fixture
def three(agents):
    require_program("dig", "dnsutils")
    started = [
        add_dns_agent(agents, "web-1", ["role=web", "tier=all", "service:http=8080"]),
        add_dns_agent(agents, "broker-1", ["role=broker", "tier=all", "service:kafka=9092"]),
        add_dns_agent(
            agents,
            "broker-2",
            ["role=broker", "tier=all", "service:kafka=9093"],
            dns="udp_answer_limit = 2",
        ),
    ]
    controller, epoch = wait_formed(started)
    return started, controller, epoch


def test_dig_gets_node_controller_tag_and_srv_records(three):
    """What a shell script sees: addresses by name, the controller, a role, a service port."""
    (web, b1, b2), controller, epoch = three
    node = dig(b1, "web-1.node.shoal")
    assert node.status == "NOERROR" and node.data() == [web.ip]
    assert "aa" in node.flags and "ra" not in node.flags  # authoritative, never recursive
    boss = dig(web, "controller.shoal")
    holder = next(a for a in three[0] if a.name == controller)
    assert boss.data() == [holder.ip] and all(ttl == 0 for _, ttl, _, _ in boss.answers)
    assert dig(web, "controller.shoal", "TXT").data("TXT") == [f'"epoch={epoch}"']
    assert dig(b2, "broker.role.tag.shoal").data() == sorted([b1.ip, b2.ip])
    srv = dig(web, "_kafka._tcp.service.shoal", "SRV")
    assert srv.data("SRV") == ["1 1 9092 broker-1.node.shoal.", "1 1 9093 broker-2.node.shoal."]
    assert f"broker-1.node.shoal.\t0\tIN\tA\t{b1.ip}" in srv.output  # the target's address too
    assert dig(web, "nobody.node.shoal").status == "NXDOMAIN"
    outside = dig(web, "example.com")
    assert outside.status == "REFUSED" and not outside.answers


def test_a_long_answer_has_tc_over_udp_and_comes_whole_over_tcp(three):
    """broker-2 sends at most two answers over UDP: dig sees TC and asks again over TCP."""
    (web, b1, b2), _, _ = three
    cut = dig(b2, "all.tier.tag.shoal", "A", "+ignore")  # +ignore: keep the truncated answer
    assert "tc" in cut.flags and len(cut.answers) == 2
    assert set(cut.data()) < {web.ip, b1.ip, b2.ip}
    retried = dig(b2, "all.tier.tag.shoal")  # dig retries over TCP on TC by itself
    assert "tc" not in retried.flags and retried.data() == sorted([web.ip, b1.ip, b2.ip])
    assert dig(b2, "all.tier.tag.shoal", "A", "+tcp").data() == retried.data()
    counters = b2.api.get("/v1/self")["counters"]
    assert counters["dns_truncated"] >= 2
    # Two queries written at once on one connection: two answers, in order (RFC 7766).
    queries = [DNSRecord.question(n) for n in ("web-1.node.shoal", "all.tier.tag.shoal")]
    for i, q in enumerate(queries):
        q.header.id = 7000 + i
    with socket.create_connection((b2.ip, DNS_PORT), timeout=5) as tcp:
        tcp.sendall(b"".join(len(p).to_bytes(2, "big") + p for p in (q.pack() for q in queries)))
        stream = tcp.makefile("rb")
        replies = [DNSRecord.parse(stream.read(int.from_bytes(stream.read(2), "big")))
                   for _ in queries]  # fmt: skip
    assert [r.header.id for r in replies] == [7000, 7001]
    assert [len(r.rr) for r in replies] == [1, 3]


def test_a_member_whose_check_is_critical_leaves_tag_answers_until_it_passes(agents, three):
    """Health from the member's own checks, gossiped: a critical one is not
    handed out for its role; its own name still resolves (as in Consul)."""
    (web, b1, b2), _, _ = three
    check = '[[checks]]\nid = "app"\nkind = "ttl"\nttl_s = 60\n'  # a new check is critical
    b3 = add_dns_agent(agents, "broker-3", ["role=broker"], after=check)
    poll_until(lambda: web.members().get("broker-3", {}).get("health") == "critical", 20)
    assert dig(web, "broker.role.tag.shoal").data() == sorted([b1.ip, b2.ip])
    assert dig(web, "broker-3.node.shoal").data() == [b3.ip]
    status, _ = api_request(b3, "PUT", "/v1/check/app/pass", b"")
    assert status == 200
    everyone = sorted([b1.ip, b2.ip, b3.ip])
    poll_until(lambda: dig(web, "broker.role.tag.shoal").data() == everyone, 10)


def test_a_killed_member_is_nxdomain_within_the_detection_time_plus_1_s(three):
    """kill -9 of a member: its name stops resolving once the agent asked
    declares it failed (the detection time), at most 1 s after."""
    (web, b1, b2), _, _ = three
    assert dig(web, "broker-1.node.shoal").data() == [b1.ip]
    b1.kill()
    killed_at = time.monotonic()
    dead_at = nx_at = None
    while nx_at is None or dead_at is None:
        assert time.monotonic() - killed_at < 30, "broker-1 still answered 30 s after kill -9"
        if dead_at is None and web.status_of("broker-1") == "dead":
            dead_at = time.monotonic()
        if nx_at is None and dig(web, "broker-1.node.shoal").status == "NXDOMAIN":
            nx_at = time.monotonic()
    assert nx_at - dead_at <= 1.0, f"NXDOMAIN {nx_at - dead_at:.2f} s after the failure"
    assert dig(web, "broker.role.tag.shoal").data() == [b2.ip]


def test_controller_shoal_answers_the_new_controller_after_a_failover(three):
    """kill -9 of the controller: controller.shoal names its successor, with a higher epoch."""
    started, controller, epoch = three
    victim = next(a for a in started if a.name == controller)
    survivors = [a for a in started if a is not victim]
    victim.kill()

    def new_controller():
        answer = dig(survivors[0], "controller.shoal", "ANY")
        ips = answer.data()
        return ips if ips and ips != [victim.ip] else None

    ips = poll_until(new_controller, 20, interval_s=0.1)
    assert ips[0] in {a.ip for a in survivors}
    info = survivors[0].api.get("/v1/controller")
    holder = next(a for a in survivors if a.name == info["controller"])
    assert ips == [holder.ip]
    txt = dig(survivors[1], "controller.shoal", "TXT").data("TXT")
    assert txt == [f'"epoch={info["epoch"]}"'] and info["epoch"] > epoch


def _rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))


def test_random_and_truncated_packets_are_counted_and_dropped(three):
    """A fuzz at the DNS port: no crash, every packet judged, memory flat."""
    (web, _, _), _, _ = three
    rng = random.Random(41)
    valid = DNSRecord.question("web-1.node.shoal").pack()
    packets = [os.urandom(rng.randrange(1, 600)) for _ in range(600)]
    packets += [valid[:k] for k in range(1, len(valid))] * 8  # every truncation
    packets += [bytes(b ^ 0x80 if i == 2 else b for i, b in enumerate(valid))] * 40  # QR set

    def judged() -> int:
        c = web.api.get("/v1/self")["counters"]
        return c["dns_malformed"] + c["dns_queries"]

    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    rss = []
    for _ in range(4):
        before = judged()
        for start in range(0, len(packets), 100):  # batches the socket buffer holds
            for data in packets[start : start + 100]:
                sock.sendto(data, (web.ip, DNS_PORT))
            poll_until(lambda: judged() >= before + min(start + 100, len(packets)), 10)
        rss.append(_rss_kib(web.proc.pid))
    sock.close()
    with socket.create_connection((web.ip, DNS_PORT), timeout=5) as tcp:  # garbage over TCP
        tcp.sendall(b"\x00\x05hello")
        assert tcp.recv(10) == b""  # dropped: the connection is closed
    assert web.running()
    malformed = web.metric("shoal_agent_dns_malformed_total")
    assert malformed >= 4 * (len(packets) - 600) and malformed >= 0.95 * 4 * len(packets)
    assert rss[-1] - rss[0] < 4096, f"RSS grew from {rss[0]} to {rss[-1]} KiB"
    assert dig(web, "web-1.node.shoal").data() == [web.ip]  # still answering


def test_a_taken_dns_port_is_one_line_and_exit_2(tmp_path):
    """Another DNS server on the port: the agent says which setting, and joins nobody."""
    ip = next_ip()
    holder = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    holder.bind((ip, DNS_PORT))
    conf = tmp_path / "shoal.toml"
    conf.write_text(f'[dns]\nbind = "{ip}:{DNS_PORT}"\n')
    try:
        out = shoal_cli("agent", "--config", str(conf), "--node-name", "taken", "--bind",
                        f"{ip}:7946", "--api", f"{ip}:7947", "--data-dir", str(tmp_path / "d"),
                        "--no-discovery")  # fmt: skip
    finally:
        holder.close()
    assert out.returncode == 2
    error = f"shoal: dns.bind: cannot listen on {ip}:{DNS_PORT}: Address already in use"
    assert out.stderr.splitlines()[-1] == error
    assert "agent started" not in out.stderr


def _free_udp_port(ip: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind((ip, 0))
        return s.getsockname()[1]


def test_dnsmasq_forwards_the_domain_as_docs_operations_says(agents, tmp_path):
    """The dnsmasq lines of docs/operations.md put *.shoal in front of every program."""
    require_program("dig", "dnsutils")
    dnsmasq = require_program("dnsmasq", "dnsmasq-base")
    web = add_dns_agent(agents, "web-1", ["role=web"])
    poll_until(lambda: web.members().get("web-1", {}).get("status") == "alive", 20)
    # dnsmasq listens on an address of its own (127.88.x.y, like each agent):
    # a port picked free on 127.0.0.1 for UDP could still be taken for TCP,
    # which dnsmasq also binds, and it would exit at once.
    listen = next_ip()
    port = _free_udp_port(listen)
    conf = tmp_path / "dnsmasq.conf"  # the documented two lines, then the test's own
    conf.write_text(f"server=/shoal/{web.ip}#{DNS_PORT}\nno-negcache\n"
                    f"port={port}\nlisten-address={listen}\nbind-interfaces\nno-resolv\n"
                    "no-hosts\n")  # fmt: skip
    log = tmp_path / "dnsmasq.log"
    with log.open("wb") as sink:
        proc = subprocess.Popen([dnsmasq, "--keep-in-foreground", f"--conf-file={conf}",
                                 "--pid-file", "--log-facility=-", "--log-queries"],
                                stdout=sink, stderr=subprocess.STDOUT)  # fmt: skip
    try:

        def through(name: str) -> Dig:
            assert proc.poll() is None, f"dnsmasq exited: {log.read_text()}"
            out = subprocess.run(
                ["dig", f"@{listen}", "-p", str(port), name, "+tries=1", "+time=2"],
                capture_output=True,
                text=True,
                timeout=20,
            )
            return Dig(out.stdout)

        try:
            answer = poll_until(lambda: (d := through("web-1.node.shoal")).data() and d, 20)
        except AssertionError as e:
            raise AssertionError(f"{e}; dnsmasq said: {log.read_text()[-2000:]}") from None
        assert answer.data() == [web.ip]
        assert through("nobody.node.shoal").status == "NXDOMAIN"
        assert through("web.role.tag.shoal").data() == [web.ip]
    finally:
        proc.kill()
        proc.wait(10)
