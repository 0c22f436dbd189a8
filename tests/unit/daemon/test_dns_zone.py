"""What the DNS interface answers from one agent's view (daemon/dns/zone.py, view.py)."""

import random

import pytest
from dnslib import EDNS0, QTYPE, RCODE, DNSRecord

from shoal.daemon.dns.config import DnsConfig
from shoal.daemon.dns.view import build_view
from shoal.daemon.dns.zone import Verdict, Zone
from shoal.membership.member import MemberState, MemberView, make_tags

ALIVE, SUSPECT, DEAD, LEFT = (MemberState.ALIVE, MemberState.SUSPECT, MemberState.DEAD,
                              MemberState.LEFT)  # fmt: skip


def member(name, ip, state=ALIVE, **tags):
    tags = {k.replace("__", ":"): v for k, v in tags.items()}
    return MemberView(name, name.encode().ljust(16, b"\0"), (ip, 7946), make_tags(tags), 1, state)


MEMBERS = (
    member("web-1", "10.0.0.1", role="web", service__http="8080"),
    member("web-2", "10.0.0.2", SUSPECT, role="web", service__http="8081"),
    member(
        "broker-1", "10.0.0.3", role="broker", service__kafka="9092", shoal__health="critical"
    ),  # fmt: skip
    member(
        "broker-2", "10.0.0.4", role="broker", service__kafka="9093", shoal__health="warning"
    ),  # fmt: skip
    member("gone", "10.0.0.5", DEAD, role="web"),
    member("quit", "10.0.0.6", LEFT, role="web"),
    member("Big-Name", "10.0.0.7", service__dns="53/udp"),
)


DEFAULT = DnsConfig()


def ask(name, qtype="A", cfg=DEFAULT, members=MEMBERS, udp=True, controller="web-1",
        packet=None):  # fmt: skip
    zone = Zone(cfg, random.Random(1))
    view = build_view(members, controller, 7, cfg)
    q = packet if packet is not None else DNSRecord.question(name, qtype).pack()
    data, verdict, cut = zone.answer(q, view, udp)
    return (None if data is None else DNSRecord.parse(data)), verdict, cut


def addresses(reply):
    return sorted(str(rr.rdata) for rr in reply.rr if rr.rtype == QTYPE.A)


def test_a_member_name_is_its_address_authoritative_and_never_recursive():
    reply, verdict, _ = ask("web-1.node.shoal")
    assert verdict is Verdict.ANSWERED and addresses(reply) == ["10.0.0.1"]
    assert reply.header.aa == 1 and reply.header.ra == 0 and reply.header.rcode == RCODE.NOERROR


def test_names_are_matched_whatever_their_case():
    assert addresses(ask("big-name.NODE.Shoal.")[0]) == ["10.0.0.7"]


def test_a_suspect_is_answered_a_failed_or_left_member_is_nxdomain():
    """As Consul does: a suspect may still refute; the others are gone."""
    assert addresses(ask("web-2.node.shoal")[0]) == ["10.0.0.2"]
    for name in ("gone", "quit", "nobody"):
        reply, verdict, _ = ask(f"{name}.node.shoal")
        assert verdict is Verdict.NXDOMAIN and reply.header.rcode == RCODE.NXDOMAIN
        assert reply.auth[0].rtype == QTYPE.SOA and reply.auth[0].rdata.times[-1] == 0


def test_only_passing_drops_suspects():
    cfg = DnsConfig(only_passing=True)
    assert ask("web-2.node.shoal", cfg=cfg)[1] is Verdict.NXDOMAIN


def test_a_members_tags_are_its_txt_records():
    reply, _, _ = ask("web-1.node.shoal", "TXT")
    assert sorted(str(rr.rdata) for rr in reply.rr) == ['"role=web"', '"service:http=8080"']


def test_another_type_of_a_name_that_exists_is_no_data_not_nxdomain():
    """An AAAA lookup must not tell a resolver that the name does not exist."""
    reply, verdict, _ = ask("web-1.node.shoal", "AAAA")
    assert verdict is Verdict.NODATA and reply.header.rcode == RCODE.NOERROR and not reply.rr


def test_the_controller_with_ttl_0_and_its_epoch_in_txt():
    reply, _, _ = ask("controller.shoal", "ANY")
    a = [rr for rr in reply.rr if rr.rtype == QTYPE.A]
    txt = [rr for rr in reply.rr if rr.rtype == QTYPE.TXT]
    assert [str(rr.rdata) for rr in a] == ["10.0.0.1"] and a[0].ttl == 0
    assert [str(rr.rdata) for rr in txt] == ['"epoch=7"'] and txt[0].ttl == 0


def test_no_controller_or_a_failed_one_is_nxdomain():
    assert ask("controller.shoal", controller=None)[1] is Verdict.NXDOMAIN
    assert ask("controller.shoal", controller="gone")[1] is Verdict.NXDOMAIN


def test_a_tag_lists_every_live_member_with_it_but_critical_ones():
    assert addresses(ask("web.role.tag.shoal")[0]) == ["10.0.0.1", "10.0.0.2"]
    assert addresses(ask("broker.role.tag.shoal")[0]) == ["10.0.0.4"]  # broker-1 is critical
    assert ask("db.role.tag.shoal")[1] is Verdict.NXDOMAIN


def test_only_passing_drops_warning_members_and_suspects_from_tags():
    cfg = DnsConfig(only_passing=True)
    assert addresses(ask("web.role.tag.shoal", cfg=cfg)[0]) == ["10.0.0.1"]
    assert ask("broker.role.tag.shoal", cfg=cfg)[1] is Verdict.NXDOMAIN


def test_a_service_tag_gives_srv_records_with_host_and_port():
    reply, _, _ = ask("_http._tcp.service.shoal", "SRV")
    srv = sorted((rr.rdata.port, str(rr.rdata.target)) for rr in reply.rr)
    assert srv == [(8080, "web-1.node.shoal."), (8081, "web-2.node.shoal.")]
    assert sorted(str(rr.rdata) for rr in reply.ar) == ["10.0.0.1", "10.0.0.2"]
    udp, _, _ = ask("_dns._udp.service.shoal", "SRV")
    srv = [(rr.rdata.port, str(rr.rdata.target)) for rr in udp.rr]
    assert srv == [(53, "Big-Name.node.shoal.")]  # the member's name as it spells it
    assert ask("_dns._tcp.service.shoal", "SRV")[1] is Verdict.NXDOMAIN


def test_a_service_name_answers_a_and_srv():
    assert addresses(ask("kafka.service.shoal")[0]) == ["10.0.0.4"]
    reply, _, _ = ask("kafka.service.shoal", "SRV")
    assert [rr.rdata.port for rr in reply.rr] == [9093]


def test_names_outside_the_domain_are_refused():
    """Never an open resolver."""
    for name in ("example.com", "shoal.example.com", "notshoal"):
        reply, verdict, _ = ask(name)
        assert verdict is Verdict.REFUSED and reply.header.rcode == RCODE.REFUSED and not reply.rr


def test_another_domain_is_configurable():
    cfg = DnsConfig(domain="cluster.example.")
    assert addresses(ask("web-1.node.cluster.example", cfg=cfg)[0]) == ["10.0.0.1"]
    assert ask("web-1.node.shoal", cfg=cfg)[1] is Verdict.REFUSED


def test_the_apex_has_an_soa():
    reply, _, _ = ask("shoal", "SOA")
    assert [rr.rtype for rr in reply.rr] == [QTYPE.SOA]


def many(n):
    return tuple(member(f"node-{i:04d}", f"10.1.{i // 250}.{i % 250 + 1}", role="big")
                 for i in range(n))  # fmt: skip


def test_a_long_answer_is_cut_to_512_bytes_over_udp_with_tc_and_whole_over_tcp():
    members = many(200)
    reply, _, cut = ask("big.role.tag.shoal", members=members)
    assert cut and reply.header.tc == 1 and 0 < len(reply.rr) < 200
    assert len(reply.pack()) <= 512
    whole, _, cut = ask("big.role.tag.shoal", members=members, udp=False)
    assert not cut and whole.header.tc == 0 and len(whole.rr) == 200


def test_an_edns0_size_lets_more_through_udp():
    members = many(400)
    q = DNSRecord.question("big.role.tag.shoal")
    q.add_ar(EDNS0(udp_len=4096))
    reply, _, cut = ask("", members=members, packet=q.pack())
    assert cut and 100 < len(reply.rr) < 400 and len(reply.pack()) <= 4096


def test_udp_answer_limit_cuts_with_tc():
    reply, _, cut = ask("web.role.tag.shoal", cfg=DnsConfig(udp_answer_limit=1))
    assert cut and reply.header.tc == 1 and len(reply.rr) == 1


def test_answers_come_in_random_order():
    zone = Zone(DnsConfig(), random.Random(3))
    view = build_view(many(20), None, None, DnsConfig())
    q = DNSRecord.question("big.role.tag.shoal").pack()
    firsts = {str(DNSRecord.parse(zone.answer(q, view, True)[0]).rr[0].rdata) for _ in range(20)}
    assert len(firsts) > 3


@pytest.mark.parametrize(
    "packet",
    [b"", b"\x00", b"\x12\x34" + b"\x01" * 9, b"\xff" * 40,
     DNSRecord.question("web-1.node.shoal").pack()[:-3],
     DNSRecord.question("web-1.node.shoal").reply().pack()],  # an answer, not a query
)  # fmt: skip
def test_malformed_packets_get_no_answer(packet):
    data, verdict, _ = Zone(DnsConfig(), random.Random(1)).answer(
        packet, build_view(MEMBERS, None, None, DnsConfig()), True
    )
    assert data is None and verdict is Verdict.MALFORMED


def test_random_bytes_never_raise():
    rng = random.Random(5)
    zone = Zone(DnsConfig(), random.Random(1))
    view = build_view(MEMBERS, "web-1", 1, DnsConfig())
    valid = DNSRecord.question("web.role.tag.shoal").pack()
    for i in range(3000):
        packet = rng.randbytes(rng.randrange(0, 600))
        if i % 3 == 0:  # a real query with bytes flipped
            packet = bytearray(valid)
            packet[rng.randrange(len(packet))] = rng.randrange(256)
        zone.answer(bytes(packet), view, i % 2 == 0)


def test_other_opcodes_are_not_implemented():
    q = DNSRecord.question("web-1.node.shoal")
    q.header.opcode = 2  # STATUS
    reply, verdict, _ = ask("", packet=q.pack())
    assert verdict is Verdict.NOTIMP and reply.header.rcode == RCODE.NOTIMP


def test_a_repeated_question_gets_its_own_id_and_its_own_spelling_back():
    """Replies are kept per question; each still carries the asker's id and case (0x20)."""
    zone = Zone(DnsConfig(), random.Random(1))
    view = build_view(MEMBERS, None, None, DnsConfig())
    for i, name in enumerate(["web-1.node.shoal", "WeB-1.NoDe.sHoAl", "web-1.node.shoal"]):
        q = DNSRecord.question(name)
        q.header.id = 1000 + i
        reply = DNSRecord.parse(zone.answer(q.pack(), view, True)[0])
        assert reply.header.id == 1000 + i and str(reply.q.qname) == name + "."
        assert addresses(reply) == ["10.0.0.1"]


def test_a_new_view_is_answered_at_once():
    """A member that fails is NXDOMAIN at the next query, whatever was answered before."""
    zone = Zone(DnsConfig(), random.Random(1))
    q = DNSRecord.question("web-1.node.shoal").pack()
    before = build_view(MEMBERS, None, None, DnsConfig())
    assert zone.answer(q, before, True)[1] is Verdict.ANSWERED
    failed = (member("web-1", "10.0.0.1", DEAD), *MEMBERS[1:])
    after = build_view(failed, None, None, DnsConfig())
    assert zone.answer(q, after, True)[1] is Verdict.NXDOMAIN
