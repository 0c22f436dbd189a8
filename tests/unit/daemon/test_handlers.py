"""daemon/handlers.py: a handler's input comes through a real pipe."""

import asyncio
import os

from shoal.daemon.handlers import run_command


def test_stdin_is_a_pipe_and_64_kib_arrive_whole():
    payload = os.urandom(64 * 1024)

    async def main():
        kind = await run_command("test -p /dev/stdin && echo pipe || echo other", {}, b"x", 10)
        size = await run_command("wc -c", {}, payload, 10)
        slow = await run_command("sleep 5", {}, b"", 0.2)
        return kind, size, slow

    kind, size, slow = asyncio.run(main())
    assert kind.stdout.strip() == b"pipe"
    assert int(size.stdout) == len(payload) and size.returncode == 0
    assert slow.returncode is None  # timed out, and killed
