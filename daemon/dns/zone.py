"""Answers DNS queries for the cluster's domain from a `ClusterView`.

Bytes in, bytes out, no sockets (daemon/dns/server.py has those); dnslib
reads and writes the wire format. The names, under the domain (`shoal.`):

    NAME.node.shoal              A (the member's address), TXT (its tags, k=v)
    controller.shoal             A of the controller, TXT "epoch=N"; TTL 0
    VALUE.KEY.tag.shoal          A of every member tagged KEY=VALUE
    _SERVICE._tcp.service.shoal  SRV (port, target NAME.node.shoal) + A in additional
    SERVICE.service.shoal        A and SRV of members with the tag service:SERVICE=PORT
    shoal                        SOA

A name that exists without the type asked is NOERROR with no answer; a name
under the domain that does not exist is NXDOMAIN; both carry the SOA, whose
minimum (the negative-caching TTL) is 0, so a resolver never keeps a "no"
once a member has joined. A name outside the domain is REFUSED: this is
never a recursive resolver (RA is never set). Multi-record answers come in
random order; over UDP an answer is cut to what fits (512 bytes, or the
query's EDNS0 size up to 4096; and `udp_answer_limit`) with TC set, and the
client asks again over TCP for all of it. A packet that does not parse as
a query is dropped without an answer (`Verdict.MALFORMED`). A reply is
built once per question while the view stays the same (`SHUFFLES`).
"""

from __future__ import annotations

import enum
import random

import msgspec
from dnslib import (  # type: ignore[import-untyped]
    EDNS0,
    OPCODE,
    QTYPE,
    RCODE,
    RR,
    SOA,
    SRV,
    TXT,
    A,
    DNSHeader,
    DNSQuestion,
    DNSRecord,
)

from shoal.daemon.dns.config import DnsConfig
from shoal.daemon.dns.view import ClusterView, Target

UDP_BYTES = 512  # RFC 1035, without EDNS0
UDP_MAX_BYTES = 4096
TCP_MAX_BYTES = 65_535
# Replies are built once per question and view, and kept: a query then costs
# its parse and a lookup (bench/dns.py). A multi-record answer is kept in up
# to SHUFFLES random orders, one picked per query; the whole cache goes when
# the view changes or it holds CACHE_KEYS questions (random names).
SHUFFLES = 8
CACHE_KEYS = 4096
_CLASSES = (1, 255)  # IN and ANY (CHAOS's version.bind is refused)


class Verdict(enum.Enum):
    """What became of one packet (counted by the server)."""

    ANSWERED = "answered"
    NODATA = "nodata"
    NXDOMAIN = "nxdomain"
    REFUSED = "refused"
    MALFORMED = "malformed"
    NOTIMP = "notimp"


class Built(msgspec.Struct, frozen=True):
    """One packed reply, kept for the next query of the same question."""

    data: bytes
    verdict: Verdict
    cut: bool  # TC set
    several: bool  # more than one answer record: kept in SHUFFLES orders


class Zone:
    """The answers of one agent (module docstring).

    Args:
        cfg: the `[dns]` settings.
        rng: shuffles multi-record answers.
    """

    def __init__(self, cfg: DnsConfig, rng: random.Random) -> None:
        self.cfg = cfg
        self.rng = rng
        self.domain = cfg.domain
        self._suffix = "." + cfg.domain
        self._cache: dict[tuple[object, ...], list[Built]] = {}
        self._cached_view: ClusterView | None = None
        self._soa = RR(cfg.domain, QTYPE.SOA, ttl=0,
                       rdata=SOA(f"ns.{cfg.domain}", f"hostmaster.{cfg.domain}",
                                 (1, 3600, 600, 86400, 0)))  # fmt: skip

    def answer(self, packet: bytes, view: ClusterView,
               udp: bool) -> tuple[bytes | None, Verdict, bool]:  # fmt: skip
        """The reply to `packet` (None: drop it), what it was, whether it was truncated."""
        try:
            query = DNSRecord.parse(packet)
        except Exception:  # hostile input to a third-party parser: any failure is "malformed"
            return None, Verdict.MALFORMED, False
        header = query.header
        if header.qr or len(query.questions) != 1:
            return None, Verdict.MALFORMED, False  # an answer sent to us, or no single question
        edns = next((rr for rr in query.ar if rr.rtype == QTYPE.OPT), None)
        limit = TCP_MAX_BYTES
        if udp:
            limit = UDP_BYTES if edns is None else max(UDP_BYTES, min(edns.rclass, UDP_MAX_BYTES))
        q = query.q
        # The question as asked (resolvers randomise the case of names and
        # check the echo), and all that shapes the reply but its id.
        key = (str(q.qname), q.qtype, q.qclass, header.opcode, header.rd, edns is not None, limit)
        if view is not self._cached_view or len(self._cache) >= CACHE_KEYS:
            self._cache.clear()
            self._cached_view = view
        built = self._cache.get(key)
        if built is None or (built[0].several and len(built) < SHUFFLES):
            reply = self._build(query, edns is not None, view, limit, udp)
            self._cache.setdefault(key, []).append(reply)
        else:
            reply = built[0] if len(built) == 1 else self.rng.choice(built)
        return packet[:2] + reply.data[2:], reply.verdict, reply.cut

    def _build(self, query: DNSRecord, edns: bool, view: ClusterView, limit: int,
               udp: bool) -> Built:  # fmt: skip
        """The reply to a parsed single-question query."""
        header = query.header
        reply = DNSRecord(DNSHeader(id=header.id, qr=1, rd=header.rd, ra=0, opcode=header.opcode),
                          q=query.q)  # fmt: skip
        if edns:
            reply.add_ar(EDNS0(udp_len=UDP_MAX_BYTES))
        if header.opcode != OPCODE.QUERY:
            reply.header.rcode = RCODE.NOTIMP
            return Built(reply.pack(), Verdict.NOTIMP, False, False)
        verdict = self._resolve(query.q, view, reply)
        several = len(reply.rr) > 1
        data, cut = self._fit(reply, limit, self.cfg.udp_answer_limit if udp else 0)
        return Built(data, verdict, cut, several)

    def _resolve(self, question: DNSQuestion, view: ClusterView, reply: DNSRecord) -> Verdict:
        """Fill `reply` for `question`; its verdict."""
        qname = str(question.qname).lower()
        qtype = question.qtype
        if question.qclass not in _CLASSES or not (
            qname == self.domain or qname.endswith(self._suffix)
        ):
            reply.header.rcode = RCODE.REFUSED
            return Verdict.REFUSED
        reply.header.aa = 1
        records = self._records(qname, qtype, qname[: -len(self._suffix)], view)
        if records is None:
            reply.header.rcode = RCODE.NXDOMAIN
            reply.add_auth(self._soa)
            return Verdict.NXDOMAIN
        answers, extra = records
        if not answers:
            reply.add_auth(self._soa)
            return Verdict.NODATA
        self.rng.shuffle(answers)
        for rr in answers:
            reply.add_answer(rr)
        for rr in extra:
            reply.add_ar(rr)
        return Verdict.ANSWERED

    def _records(self, qname: str, qtype: int, rel: str,
                 view: ClusterView) -> tuple[list[RR], list[RR]] | None:  # fmt: skip
        """(answers, additional) for a name in the domain; None if it does not exist."""
        ttl = self.cfg.ttl_s
        if qname == self.domain:
            return ([self._soa] if qtype in (QTYPE.SOA, QTYPE.ANY) else []), []
        head, _, kind = rel.rpartition(".")
        if rel == "controller":
            boss = view.controller
            if boss is None:
                return None
            txt = [RR(qname, QTYPE.TXT, ttl=0, rdata=TXT(f"epoch={view.epoch}"))]
            return _by_type(qtype, [_a(qname, boss, 0)], txt), []
        if kind == "node" and head:
            node = view.nodes.get(head)
            if node is None:
                return None
            target, tags = node
            txt = [RR(qname, QTYPE.TXT, ttl=ttl, rdata=TXT(t)) for t in tags]
            return _by_type(qtype, [_a(qname, target, ttl)], txt), []
        if kind == "tag" and "." in head:
            value, _, key = head.rpartition(".")
            targets = view.tags.get((key, value))
            if targets is None:
                return None
            return _by_type(qtype, [_a(qname, t, ttl) for t in targets], []), []
        if kind == "service" and head:
            return self._service(qname, qtype, head, view)
        return None

    def _service(self, qname: str, qtype: int, head: str,
                 view: ClusterView) -> tuple[list[RR], list[RR]] | None:  # fmt: skip
        """`_NAME._tcp.service` (SRV) or `NAME.service` (A and SRV)."""
        labels = head.split(".")
        if len(labels) == 2 and labels[0].startswith("_") and labels[1] in ("_tcp", "_udp"):
            name, proto, srv_only = labels[0][1:], labels[1][1:], True
        elif len(labels) == 1:
            name, proto, srv_only = labels[0], "tcp", False
        else:
            return None
        found = view.services.get((name, proto))
        if found is None:
            return None
        ttl = self.cfg.ttl_s
        srv, extra = [], []
        for s in found:
            host = f"{s.target.name}.node.{self.domain}"
            srv.append(RR(qname, QTYPE.SRV, ttl=ttl, rdata=SRV(1, 1, s.port, host)))
            extra.append(_a(host, s.target, ttl))
        if qtype == QTYPE.SRV or (qtype == QTYPE.ANY and srv_only):
            return srv, extra
        if srv_only:
            return [], []
        a = [_a(qname, s.target, ttl) for s in found]
        return _by_type(qtype, a, srv), (extra if qtype == QTYPE.ANY else [])

    @staticmethod
    def _fit(reply: DNSRecord, limit: int, most: int) -> tuple[bytes, bool]:
        """`reply` packed within `limit` bytes and `most` answers (0: any
        number); answers are dropped from the end and TC set when cut."""
        data = reply.pack()
        count = len(reply.rr)
        if len(data) <= limit and not 0 < most < count:
            return data, False
        reply.ar = [rr for rr in reply.ar if rr.rtype == QTYPE.OPT]  # additional goes first
        answers = reply.rr
        low, high = 0, min(count, most) if most else count
        while low < high:  # the most answers that fit: packing grows with the count
            mid = (low + high + 1) // 2
            reply.rr = answers[:mid]
            if len(reply.pack()) <= limit:
                low = mid
            else:
                high = mid - 1
        reply.rr = answers[:low]
        reply.header.tc = 1
        return reply.pack(), True


def _a(name: str, target: Target, ttl: int) -> RR:
    return RR(name, QTYPE.A, ttl=ttl, rdata=A(target.ip))


def _by_type(qtype: int, a: list[RR], other: list[RR]) -> list[RR]:
    """The records of a name that holds `a` and `other`, for a query of `qtype`."""
    if qtype == QTYPE.A:
        return a
    if qtype == QTYPE.ANY:
        return a + other
    return [rr for rr in other if rr.rtype == qtype]
