"""IO: finding peers on the LAN with multicast DNS-SD (python-zeroconf).

Each agent registers `<node name>._shoal._udp.local.` with TXT records

    cluster=<cluster name>  node=<node name>  id=<node id, hex>
    port=<gossip port>      proto=<wire protocol version>
    enc=1 when a peer needs the cluster key to talk to this agent, else 0

and browses for the same service type. A resolved peer of the same cluster
and protocol version, other than ourselves, is handed to the agent, which
decides whether to join it (it joins a few; push-pull and gossip do the
rest). Peers of another cluster or protocol version are ignored and logged
once, and so are peers we cannot talk to: one that needs a key when we have
none, or one that sends plaintext when we require encryption (the agent
logs that at warning, with what to set, instead of failing joins silently).
Nothing secret goes into the advertisement: `enc` says only whether a key
is needed, never anything derived from it.

Browsing starts at once, and registration skips RFC 6762 probing (about
0.75 s plus a random delay) and announces immediately: probing exists to
claim a unique instance name, and ours embeds 32 random bits of the node id
(`<name>-<id prefix>`), so two agents cannot collide; clashes of node names
are caught by the membership layer, which compares node ids. With probing,
agents that start together stay invisible to each other for ~1.7 s.

Only IPv4 is used (`IPVersion.V4Only`) on explicit interfaces: a
half-configured IPv6 stack (duplicate-address detection still running or
failed) cannot stall discovery, and nothing is sent on interfaces the
operator did not choose.
"""

from __future__ import annotations

import asyncio
import ctypes.util
import socket
from collections.abc import Callable
from typing import Any

import msgspec


def _import_zeroconf() -> None:
    """Import zeroconf without the `ldconfig -p` its interface lister runs.

    ifaddr (zeroconf's) looks libc up with `ctypes.util.find_library("c")`
    when it is imported, which forks and execs `ldconfig -p` and parses its
    output: 13 ms of wall time and 5.7 M instructions in the agent alone
    (callgrind), plus the child's, at every start. `CDLL(None)` opens the
    process's own symbols, which include libc's `getifaddrs`, so ifaddr is
    given None for libc and nothing is spawned."""
    find_library = ctypes.util.find_library
    ctypes.util.find_library = lambda name: None if name == "c" else find_library(name)
    try:
        import zeroconf  # noqa: F401
    finally:
        ctypes.util.find_library = find_library


_import_zeroconf()

from zeroconf import IPVersion, ServiceStateChange, current_time_millis  # noqa: E402
from zeroconf.asyncio import AsyncServiceBrowser, AsyncServiceInfo, AsyncZeroconf  # noqa: E402

from shoal.kernel.codec import ENVELOPE_MAX, ENVELOPE_MIN, PROTOCOL_VERSION  # noqa: E402
from shoal.kernel.contract import Address  # noqa: E402

SERVICE_TYPE = "_shoal._udp.local."
RESOLVE_TIMEOUT_MS = 3000


class DiscoveredPeer(msgspec.Struct, frozen=True):
    """A peer seen on the LAN: where it gossips and who it says it is."""

    addr: Address
    name: str
    node_id: str
    cluster: str


class Sealing(msgspec.Struct, frozen=True):
    """This agent's encryption, as discovery needs it."""

    has_key: bool = False  # we hold a keyring
    needs_key: bool = False  # a peer without the key cannot talk to us (advertised)
    refuses_plaintext: bool = False  # we drop plaintext packets


PLAIN = Sealing()
"""No encryption: advertisements carry the cluster name in clear."""


class IgnoredPeer(msgspec.Struct, frozen=True):
    """An advertisement we will not join, and why."""

    name: str
    reason: str


Found = Callable[[DiscoveredPeer | IgnoredPeer], None]


def _envelope_overlaps(txt: dict[str, str]) -> bool:
    """Whether a peer's envelope versions (TXT `vsn`, "min-max"; an agent
    without it reads only its `proto`) overlap ours (kernel/versions.py).
    The other protocols are checked when it first talks."""
    raw = txt.get("vsn") or f"{txt.get('proto', '')}-{txt.get('proto', '')}"
    lo_s, _, hi_s = raw.partition("-")
    try:
        lo, hi = int(lo_s), int(hi_s)
    except ValueError:
        return False
    return lo <= hi and lo <= ENVELOPE_MAX and ENVELOPE_MIN <= hi


def parse_advertisement(
    properties: dict[bytes, bytes | None],
    addresses: list[str],
    own_id: str,
    cluster: str,
    sealing: Sealing = PLAIN,
) -> DiscoveredPeer | IgnoredPeer:
    """Judge one resolved advertisement (pure, so it is unit-tested).

    Args:
        properties: the TXT records as zeroconf returns them.
        addresses: the IPv4 addresses the service resolved to.
        own_id: our node id in hex, to ignore our own advertisement.
        cluster: our cluster name.
        sealing: our encryption settings.
    """
    txt = {k.decode(errors="replace"): (v or b"").decode(errors="replace")
           for k, v in properties.items()}  # fmt: skip
    name = txt.get("node", "?")
    if txt.get("id") == own_id:
        return IgnoredPeer(name, "ourselves")
    if txt.get("cluster") != cluster:
        return IgnoredPeer(name, f"another cluster ({txt.get('cluster', '?')!r})")
    if not _envelope_overlaps(txt):
        return IgnoredPeer(name, f"envelope versions {txt.get('vsn', txt.get('proto', '?'))}, "
                           f"this agent reads {ENVELOPE_MIN}-{ENVELOPE_MAX}")  # fmt: skip
    peer_needs_key = txt.get("enc") == "1"
    if peer_needs_key and not sealing.has_key:
        return IgnoredPeer(name, "encryption: it needs the cluster key and this agent has "
                           "none (set encryption.key or --encrypt)")  # fmt: skip
    if not peer_needs_key and sealing.refuses_plaintext:
        return IgnoredPeer(name, "encryption: it sends plaintext and this agent requires "
                           "encryption (give it the cluster key)")  # fmt: skip
    try:
        port = int(txt.get("port", ""))
    except ValueError:
        return IgnoredPeer(name, "no gossip port")
    if not addresses or not 0 < port < 65536:
        return IgnoredPeer(name, "no IPv4 address")
    return DiscoveredPeer((addresses[0], port), name, txt.get("id", ""), cluster)


def service_label(name: str, node_id_hex: str) -> str:
    """The DNS-SD instance label an agent advertises under."""
    # DNS labels are at most 63 bytes; the node name is in the TXT anyway.
    return f"{name[:40]}-{node_id_hex[:8]}"


class Discovery:
    """Registers this agent and reports peers, on explicit interfaces.

    A peer whose label `known` recognizes (a live member already) is not
    resolved: in a formed cluster every agent that starts would otherwise
    query for every other one, N queries and N answers per start.
    """

    def __init__(
        self,
        interfaces: list[str],
        advertise: Address,
        name: str,
        node_id: str,
        cluster: str,
        found: Found,
        service_type: str = SERVICE_TYPE,
        sealing: Sealing = PLAIN,
        known: Callable[[str], bool] = lambda label: False,
    ) -> None:
        self.interfaces = interfaces
        self.advertise = advertise
        self.name = name
        self.node_id = node_id
        self.cluster = cluster
        self.found = found
        self.service_type = service_type
        self.sealing = sealing
        self.known = known
        self._zc: AsyncZeroconf | None = None
        self._browser: AsyncServiceBrowser | None = None
        self._info: AsyncServiceInfo | None = None
        # Registrations and withdrawals run one after another on this chain:
        # a leave within a moment of start must not unregister before the
        # registration has landed in zeroconf's registry (it would then stay).
        self._advert: asyncio.Task[None] | None = None
        self._announcing: asyncio.Future[Any] | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        # Set once the first announcement is on the wire (or failed): the
        # agent leaves its other start-up work (the API server) until then.
        self.announced = asyncio.Event()

    def _service_info(self) -> AsyncServiceInfo:
        props = {"cluster": self.cluster, "node": self.name, "id": self.node_id,
                 "port": str(self.advertise[1]), "proto": str(PROTOCOL_VERSION),
                 "vsn": f"{ENVELOPE_MIN}-{ENVELOPE_MAX}",
                 "enc": "1" if self.sealing.needs_key else "0"}  # fmt: skip
        label = service_label(self.name, self.node_id)
        return AsyncServiceInfo(
            self.service_type,
            f"{label}.{self.service_type}",
            addresses=[socket.inet_aton(self.advertise[0])],
            port=self.advertise[1],
            properties=props,
        )

    async def start(self) -> None:
        """Browse and announce at once; the announcement runs in the background."""
        self._zc = AsyncZeroconf(interfaces=self.interfaces, ip_version=IPVersion.V4Only)
        self._browser = AsyncServiceBrowser(
            self._zc.zeroconf, self.service_type, handlers=[self._on_change]
        )
        self._info = self._service_info()
        self._chain(self._register(self._info))

    async def _register(self, info: AsyncServiceInfo) -> None:
        # Returns once the service is in the registry (answering queries)
        # and the first of the three announcements has been sent; the other
        # two go on in the background.
        assert self._zc is not None
        try:
            announcing = await self._zc.async_register_service(info, cooperating_responders=True)
            self._announcing = asyncio.ensure_future(announcing)
            # zeroconf's broadcast task sends its first announcement in its
            # first step, scheduled before this one resumes.
            await asyncio.sleep(0)
        finally:
            self.announced.set()

    async def _unregister(self, info: AsyncServiceInfo) -> None:
        assert self._zc is not None
        if self._announcing is not None:
            self._announcing.cancel()  # no announcement after the goodbye
        await self._zc.async_unregister_service(info)

    def _chain(self, step: Any) -> None:
        previous = self._advert

        async def run() -> None:
            if previous is not None:
                await asyncio.wait([previous])
            await _quietly(step)

        self._advert = asyncio.get_running_loop().create_task(run())
        self._tasks.add(self._advert)
        self._advert.add_done_callback(self._tasks.discard)

    def withdraw(self) -> None:
        """Stop advertising (after a leave); browsing goes on."""
        if self._zc is not None and self._info is not None:
            info, self._info = self._info, None
            self._chain(self._unregister(info))

    def readvertise(self) -> None:
        """Advertise again (after a rejoin)."""
        if self._zc is not None and self._info is None:
            self._info = self._service_info()
            self._chain(self._register(self._info))

    def refresh(self) -> None:
        """Announce this node once more (unless it withdrew) and ask for the
        service again, with the peers known and fresh as known answers, so
        only the others answer (daemon/network/rediscovery.py says when)."""
        zc = self._zc
        if zc is None or self._browser is None:
            return
        if self._info is not None:
            zc.zeroconf.async_send(zc.zeroconf.generate_service_broadcast(self._info, None))
        scheduler = self._browser.query_scheduler
        scheduler.async_send_ready_queries(False, current_time_millis(), {self.service_type})

    async def stop(self) -> None:
        """Unregister (peers see us go) and close the sockets."""
        for task in self._tasks:
            task.cancel()
        if self._announcing is not None:
            self._announcing.cancel()
        if self._browser is not None:
            await self._browser.async_cancel()
        if self._zc is not None:
            if self._info is not None:
                try:
                    await asyncio.wait_for(self._zc.async_unregister_service(self._info), 2.0)
                except Exception:  # noqa: BLE001 - best effort on exit
                    pass
            await self._zc.async_close()

    def _on_change(
        self, zeroconf: Any, service_type: str, name: str, state_change: ServiceStateChange
    ) -> None:
        if state_change in (ServiceStateChange.Added, ServiceStateChange.Updated):
            suffix = "." + service_type
            if name.endswith(suffix) and self.known(name[: -len(suffix)]):
                return
            self._spawn(self._resolve(service_type, name))

    async def _resolve(self, service_type: str, name: str) -> None:
        assert self._zc is not None
        info = AsyncServiceInfo(service_type, name)
        if not await info.async_request(self._zc.zeroconf, RESOLVE_TIMEOUT_MS):
            return
        addresses = info.parsed_addresses(IPVersion.V4Only)
        self.found(
            parse_advertisement(
                info.properties, addresses, self.node_id, self.cluster, self.sealing
            )
        )

    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)


async def _quietly(awaitable: Any) -> None:
    try:
        await awaitable
    except Exception:  # noqa: BLE001 - a failed announcement is retried by peers' queries
        pass
