"""What an agent loads before its first announcement.

Five agents started together on 2 cores see each other only once the last
one has announced itself, so every module on that path is paid five times
over (docs/performance.md, "Start-up"). These modules are loaded later, by
the code that needs them.
"""

from __future__ import annotations

import subprocess
import sys

# Each is loaded by its user, never at start: the API server after the first
# announcement, urllib (http.client, email) by an HTTP health check, hashlib's
# OpenSSL initialisation not at all (kernel/hashes.py).
NOT_AT_START = ("shoal.daemon.api.server", "urllib.request", "http.client", "email",
                "hashlib", "httptools", "prometheus_client")  # fmt: skip


def test_the_start_path_leaves_the_api_http_clients_and_hashlib_unloaded() -> None:
    """Importing what an agent runs before it announces loads none of them."""
    code = ("import sys; import shoal.daemon.cli.app, shoal.daemon.config, "
            "shoal.daemon.agent, shoal.daemon.network.mdns; "
            f"print(' '.join(m for m in {NOT_AT_START!r} if m in sys.modules))")  # fmt: skip
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=60)  # fmt: skip
    assert out.stdout.split() == []
