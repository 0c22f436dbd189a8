"""IO of `shoal recover` (issue 39): a survivor's data directory read and
rewritten, and the probe for voters left off the list that still answer.

The decision is node/recovery.py's (pure); the command is
daemon/cli/recover.py. Everything here runs with the survivor's agent
stopped: `DataDir` takes the directory's lock, so a running agent makes it
refuse ("in use by another shoal agent") before anything is read.

**The probe.** A voter left off the list that still runs would go on with
the old configuration while the survivors start a new one: two
controllers, two histories (Consul's peers.json and etcd's
`--force-new-cluster` warn of it and leave it to the operator). Before
anything is written the command looks for one, two ways: every address the
operator gives (`--probe HOST[:PORT]`, the old voters' gossip addresses)
is tried over TCP, where a running agent accepts its streams; and, when the
configuration has discovery on, multicast DNS is asked for the cluster's
agents for `MDNS_WAIT_S`, and an advertisement of a voter left off the list
is one that runs. Either refuses the recovery, with nothing written.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Iterable
from pathlib import Path

import msgspec

from shoal.daemon.disk.datadir import DataDir
from shoal.kernel.contract import Address
from shoal.kernel.errors import ConfigError
from shoal.metalog.log import PersistLog
from shoal.node.recovery import Decision, Survivor, audit_entry, election_state, summarize

MDNS_WAIT_S = 3.0  # how long multicast DNS is listened to for the voters left off
TCP_PROBE_S = 1.0  # a connect to a probed address: refused or timed out is "not running"


def read_survivor(data_dir: Path, depth: int, cluster: str, name: str) -> Survivor:
    """This survivor's summary from its data directory (its agent stopped).
    `name` is the configured node name ("-": none): the name the voter
    configuration gives this directory's id wins.

    Raises:
        DataDirError: in use (the agent runs), damaged, another cluster's.
        ConfigError: no name can be told for this node.
    """
    if not (data_dir / "FORMAT").exists():
        raise ConfigError(f"--data-dir: {data_dir} holds no shoal data directory")
    store = DataDir(data_dir, depth, cluster)
    try:
        node_id = store.load_identity().node_id
        election = store.load_election()
        entries = store.load_log()
        snapshot = store.load_snapshot()
    finally:
        store.close()
    found = summarize(name, node_id, election, entries, snapshot)
    config = found.config
    if config is not None and node_id in config.ids:
        named = config.voters[config.ids.index(node_id)]
        if name not in ("-", named):
            raise ConfigError(f"--node-name: this data directory is {named}'s, not {name}'s")
        name = named
    if not name or name == "-":
        raise ConfigError("the data directory does not say which node it is: give its "
                          "node's name with --node-name (or node_name in --config)")  # fmt: skip
    return msgspec.structs.replace(found, name=name)


def write_recovery(data_dir: Path, depth: int, cluster: str, me: Survivor,
                   decision: Decision) -> None:  # fmt: skip
    """Write the decision into this survivor's data directory: the audit
    record into the base's log first, then the granted epoch and the new
    configuration, synced (node/recovery.py). A kill in between leaves a
    log the next `plan` reads as it is (the record is then one more entry).

    Raises:
        DataDirError: the directory changed since `me` was read.
    """
    store = DataDir(data_dir, depth, cluster)
    try:
        current = summarize(me.name, store.load_identity().node_id, store.load_election(),
                            store.load_log(), store.load_snapshot())  # fmt: skip
        if current != me:
            raise ConfigError(f"the data directory {data_dir} changed since it was read: "
                              "run `shoal recover plan` again")  # fmt: skip
        if decision.base == me.name:
            entry = audit_entry(decision)
            store.save_log(PersistLog(entry.index, (entry,)))
        epoch, config = election_state(decision)
        store.save_election(epoch, config, sync=True)
        store.engine.sync()
    finally:
        store.close()


def parse_probe(text: str, default_port: int) -> Address:
    """HOST[:PORT] of `--probe`.

    Raises:
        ConfigError: not an address.
    """
    host, _, port = text.rpartition(":") if ":" in text else (text, "", "")
    try:
        number = int(port) if port else default_port
        if not host or not 0 < number < 65536:
            raise ValueError
        socket.inet_aton(socket.gethostbyname(host))
    except (ValueError, OSError):
        raise ConfigError(f"--probe: {text!r} is not HOST[:PORT]") from None
    return (host, number)


def answering(addrs: Iterable[Address]) -> list[str]:
    """The addresses where something accepts a TCP connection (an agent's
    gossip port accepts its streams)."""
    found = []
    for host, port in addrs:
        with contextlib.suppress(OSError):
            socket.create_connection((host, port), timeout=TCP_PROBE_S).close()
            found.append(f"{host}:{port}")
    return found


def advertised(interfaces: list[str] | None, cluster: str, service: str,
               wait_s: float = MDNS_WAIT_S) -> set[str]:  # fmt: skip
    """The names of the agents of `cluster` that multicast DNS finds in
    `wait_s` (their advertisement resolved), on `interfaces` (None: all)."""
    return asyncio.run(_browse(interfaces, cluster, service, wait_s))


async def _browse(interfaces: list[str] | None, cluster: str, service: str,
                  wait_s: float) -> set[str]:  # fmt: skip
    """Browse (never advertise) for `wait_s`; every advertisement of
    `cluster` resolved names a running agent, whatever its encryption."""
    # mdns first: it imports zeroconf without running ldconfig.
    from shoal.daemon.network import mdns  # noqa: F401, I001
    from zeroconf import InterfaceChoice, IPVersion, ServiceStateChange
    from zeroconf.asyncio import AsyncServiceBrowser, AsyncServiceInfo, AsyncZeroconf

    names: set[str] = set()
    tasks: set[asyncio.Task[None]] = set()
    try:
        zc = AsyncZeroconf(interfaces=interfaces or InterfaceChoice.All,
                           ip_version=IPVersion.V4Only)  # fmt: skip
    except OSError as exc:
        where = ", ".join(interfaces or ["every interface"])
        raise ConfigError(f"discovery_interfaces: cannot use {where} for "
                          f"multicast: {exc.strerror}") from None  # fmt: skip

    async def resolve(name: str) -> None:
        info = AsyncServiceInfo(service, name)
        if await info.async_request(zc.zeroconf, int(wait_s * 1000)):
            txt = {k.decode(errors="replace"): (v or b"").decode(errors="replace")
                   for k, v in info.properties.items()}  # fmt: skip
            if txt.get("cluster") == cluster and txt.get("node"):
                names.add(txt["node"])

    def changed(zeroconf: object, service_type: str, name: str,
                state_change: ServiceStateChange) -> None:  # fmt: skip
        if state_change in (ServiceStateChange.Added, ServiceStateChange.Updated):
            task = asyncio.get_running_loop().create_task(resolve(name))
            tasks.add(task)

    browser = AsyncServiceBrowser(zc.zeroconf, service, handlers=[changed])
    try:
        await asyncio.sleep(wait_s)
        if tasks:
            await asyncio.wait(tasks, timeout=wait_s)
    finally:
        for task in tasks:
            task.cancel()
        await browser.async_cancel()
        await zc.async_close()
    return names
