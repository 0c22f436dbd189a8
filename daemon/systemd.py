"""The systemd service protocol, spoken directly (no libsystemd needed).

`sd_notify(3)`: datagrams of `KEY=VALUE` lines to the AF_UNIX socket named
by `$NOTIFY_SOCKET` (a leading `@` means the abstract namespace). The agent
sends `READY=1` once its gossip sockets and API listen, `STATUS=` with the
member counts and the controller, `RELOADING=1` ... `READY=1` around a
SIGHUP reload, and `STOPPING=1` on SIGTERM before the graceful leave.

Watchdog: when systemd sets `$WATCHDOG_USEC` (and `$WATCHDOG_PID` is ours,
or unset), `WATCHDOG=1` is sent at half that interval by a timer *on the
event loop*, so a loop stuck in a blocking call stops the pings and systemd
restarts the agent. A thread would keep pinging through a hung loop. This is
the one timer outside the cores' deadline (lifecycle code, like the leave
grace period).

Without `$NOTIFY_SOCKET` (not under systemd) every call is a no-op.
"""

from __future__ import annotations

import asyncio
import os
import socket

import structlog

log = structlog.get_logger("shoal")


class Notifier:
    """Sends notify messages to systemd, if it is listening."""

    def __init__(self, environ: dict[str, str] | None = None) -> None:
        env = os.environ if environ is None else environ
        self._address: str | bytes | None = None
        self._sock: socket.socket | None = None
        path = env.get("NOTIFY_SOCKET", "")
        if path:
            self._address = b"\0" + path[1:].encode() if path.startswith("@") else path
            self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
        self.watchdog_s: float | None = None
        usec, pid = env.get("WATCHDOG_USEC", ""), env.get("WATCHDOG_PID", "")
        if usec.isdigit() and int(usec) > 0 and (not pid or pid == str(os.getpid())):
            self.watchdog_s = int(usec) / 1_000_000
        self._watchdog: asyncio.TimerHandle | None = None
        self.sent = 0

    @property
    def enabled(self) -> bool:
        """Whether systemd is listening."""
        return self._sock is not None

    def notify(self, *lines: str) -> None:
        """Send `KEY=VALUE` lines; a failure is logged once, never fatal."""
        if self._sock is None or self._address is None:
            return
        try:
            self._sock.sendto("\n".join(lines).encode(), self._address)
            self.sent += 1
        except OSError as exc:
            log.warning("cannot notify systemd", error=str(exc), socket=str(self._address))
            self._sock.close()
            self._sock = None

    def start_watchdog(self, loop: asyncio.AbstractEventLoop) -> None:
        """Ping at half the interval systemd asked for, from `loop`."""
        if self.watchdog_s is None or self._sock is None:
            return
        half = self.watchdog_s / 2

        def ping() -> None:
            self.notify("WATCHDOG=1")
            self._watchdog = loop.call_later(half, ping)

        ping()

    def stop(self) -> None:
        """Stop the watchdog pings and close the socket."""
        if self._watchdog is not None:
            self._watchdog.cancel()
        if self._sock is not None:
            self._sock.close()
            self._sock = None
