"""Running a handler command: one way for events, user events, queries
and script checks.

The input goes in through a real pipe, written before the command starts.
uvloop gives a subprocess a socket pair for `stdin=PIPE`, and bash, seeing
a socket on stdin and no SHLVL, takes itself for a remote shell and reads
~/.bashrc and /etc/bash.bashrc: on a machine whose .bashrc runs `pyenv
init`, each handler took 3 s instead of 5 ms, and some hung until their
timeout (bench/events.py). A pipe holds 64 KiB by default on Linux, which
is the largest payload shoal accepts, so writing it all before the spawn
never blocks; it is raised with F_SETPIPE_SZ when needed.

A command runs in a session of its own, and a timeout kills its whole
process group: killing only the shell left its children holding the
output pipe, and the agent waiting for them.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import signal

MAX_INPUT_BYTES = 1 << 20


class HandlerResult:
    """What a command did: its exit code (None: timed out), its output."""

    __slots__ = ("returncode", "stdout", "stderr")

    def __init__(self, returncode: int | None, stdout: bytes, stderr: bytes) -> None:
        self.returncode = returncode
        self.stdout = stdout
        self.stderr = stderr


async def run_command(command: str, env: dict[str, str], stdin: bytes, timeout_s: float,
                      merge_stderr: bool = True) -> HandlerResult:  # fmt: skip
    """Run `command` in a shell with `stdin` on its standard input.

    Raises:
        OSError: it could not start.
    """
    read_end, write_end = os.pipe()
    try:
        if len(stdin) > 65536:
            fcntl.fcntl(write_end, fcntl.F_SETPIPE_SZ, min(len(stdin), MAX_INPUT_BYTES))
        view = memoryview(stdin)[:MAX_INPUT_BYTES]
        while view:
            view = view[os.write(write_end, view) :]
    finally:
        os.close(write_end)
    try:
        proc = await asyncio.create_subprocess_shell(
            command, stdin=read_end, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT if merge_stderr else asyncio.subprocess.PIPE,
            env={**os.environ, **env}, start_new_session=True)  # fmt: skip
    finally:
        os.close(read_end)
    try:
        out, err = await asyncio.wait_for(proc.communicate(), timeout_s)
    except (TimeoutError, asyncio.CancelledError) as exc:
        # The whole group: a shell's children would hold its output open.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        await proc.wait()
        if isinstance(exc, asyncio.CancelledError):
            raise
        return HandlerResult(None, b"", b"")
    return HandlerResult(proc.returncode, out or b"", err or b"")
