#!/usr/bin/env python3
"""What the status page (GET /ui/, issue 24) costs, and its screenshots.

    .venv/bin/python bench/ui.py cost [--agents 20] [--pages 10] [--seconds 60]
    .venv/bin/python bench/ui.py shot --agents 5 docs/ui-5-members.png

`cost` starts a cluster of real agents on loopback (--profile, default lan,
the agent's default; no discovery; all join the first), waits until every
agent sees every other alive, then:

  first load  one page opened from agent 0 in a fresh headless chromium: the
              bytes of every response the page received, from the browser's
              Performance API (navigation and resource timing:
              `transferSize`, headers included, and `encodedBodySize`),
              once the page shows every member. The watch stream is still
              open then and is not counted (it has no timing entry until it
              ends); its first lines are the backfilled events.
  cpu         agent CPU (utime + stime from /proc/<pid>/stat) over --seconds:
              first with no page open, then with --pages tabs open on agent 0
              (each tab its own stream and counter refresh), after a
              --settle s wait so that the page loads are not counted. Agent 0
              (the one the pages read) and the sum over all agents.

`shot` starts --agents real agents (with --slow, a probe every 5 s and
gossip every 1 s, so that 200 Python agents fit on 2 cores), puts a few keys,
opens the page from agent 0 and saves a PNG of it.

Needs Debian's chromium and chromium-driver, and selenium (PyPI). Prints its
configuration, then the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

CLK_TCK = os.sysconf("SC_CLK_TCK")
NET = "127.91"
CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
TABS_PER_BROWSER = 5
SLOW_TOML = """[swim]
probe_interval_s = 5.0
probe_timeout_s = 1.0
gossip_interval_s = 1.0
push_pull_interval_s = 120.0
"""


def ip_of(i: int) -> str:
    return f"{NET}.{i // 250}.{i % 250 + 1}"


def get_json(ip: str, path: str, timeout_s: float = 3.0) -> Any:
    try:
        with urllib.request.urlopen(f"http://{ip}:7947{path}", timeout=timeout_s) as r:
            return json.loads(r.read())
    except (OSError, ValueError):
        return None


def request(ip: str, method: str, path: str, body: bytes) -> None:
    req = urllib.request.Request(f"http://{ip}:7947{path}", data=body, method=method)
    urllib.request.urlopen(req, timeout=10).close()


def wait(predicate: Any, timeout_s: float, what: str, interval_s: float = 0.5) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            sys.exit(f"gave up after {timeout_s:.0f} s waiting for {what}")
        time.sleep(interval_s)


class Cluster:
    """N `shoal agent` processes on 127.91.x.y, all joining the first."""

    def __init__(self, n: int, profile: str, root: Path, slow: bool) -> None:
        self.n = n
        self.profile = profile
        self.root = root
        self.slow = slow
        self.procs: list[subprocess.Popen[bytes]] = []

    def launch(self, i: int) -> None:
        ip = ip_of(i)
        args = [sys.executable, "-m", "shoal.daemon.cli", "agent", "--node-name", f"node-{i:03d}",
                "--bind", f"{ip}:7946", "--api", f"{ip}:7947", "--profile", self.profile,
                "--data-dir", str(self.root / f"node-{i:03d}"), "--no-discovery",
                "--log-level", "warning", "--tag", f"zone=z{i % 3}",
                "--tag", f"role={'broker' if i % 4 else 'controller'}"]  # fmt: skip
        if self.slow:
            config = self.root / "slow.toml"
            config.write_text(SLOW_TOML)
            args += ["--config", str(config)]
        if i:
            args += ["--join", f"{ip_of(0)}:7946"]
        log = open(self.root / f"node-{i:03d}.log", "ab")
        self.procs.append(subprocess.Popen(args, stdout=log, stderr=log, stdin=subprocess.DEVNULL))
        log.close()

    def start(self) -> float:
        """Start every agent; the seconds until all see all alive."""
        started = time.monotonic()
        self.launch(0)
        wait(lambda: get_json(ip_of(0), "/v1/self") is not None, 30, "the first agent")
        for i in range(1, self.n):
            self.launch(i)

        def formed() -> bool:
            for i in range(self.n):
                seen = get_json(ip_of(i), "/v1/members?status=alive", 10)
                if seen is None or len(seen["members"]) < self.n:
                    return False
            return True

        wait(formed, 60 + 2 * self.n, f"{self.n} agents to see each other", 1.0)
        return time.monotonic() - started

    def cpu_s(self) -> list[float]:
        out = []
        for p in self.procs:
            fields = Path(f"/proc/{p.pid}/stat").read_text().rsplit(")", 1)[1].split()
            out.append((int(fields[11]) + int(fields[12])) / CLK_TCK)
        return out

    def rss_mb(self) -> float:
        total = 0
        for p in self.procs:
            for line in Path(f"/proc/{p.pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        return total / 1024

    def stop(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGKILL)
        for p in self.procs:
            p.wait(10)


def browser(width: int = 1280, height: int = 1000) -> Any:
    missing = [p for p in (CHROMIUM, CHROMEDRIVER) if not shutil.which(p)]
    if missing:
        sys.exit(f"needs {', '.join(missing)}: apt-get install chromium chromium-driver")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--disable-gpu", f"--window-size={width},{height}",
                "--disable-dev-shm-usage", "--hide-scrollbars"):  # fmt: skip
        options.add_argument(arg)
    if os.geteuid() == 0:
        options.add_argument("--no-sandbox")
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)


def shown(driver: Any) -> int:
    """How many members the page lists (the count above the table)."""
    counts = driver.execute_script("return document.getElementById('member-counts').textContent;")
    head = counts.strip("(").split(":")[0]
    return int(head) if head.isdigit() else 0


def open_page(driver: Any, n: int) -> None:
    driver.get(f"http://{ip_of(0)}:7947/ui/")
    wait(lambda: shown(driver) >= n, 30, "the page to list the members", 0.05)


FIRST_LOAD_JS = """
const nav = performance.getEntriesByType('navigation')[0];
const res = performance.getEntriesByType('resource');
return [nav, ...res].map(e => [e.name, e.transferSize, e.encodedBodySize]);
"""


def cost(args: argparse.Namespace, root: Path) -> None:
    cluster = Cluster(args.agents, args.profile, root, slow=False)
    print(f"config: {args.agents} agents (profile {args.profile}, no discovery) on loopback, "
          f"{args.pages} pages on agent 0, {args.seconds:.0f} s per CPU window, "
          f"settle {args.settle:.0f} s")  # fmt: skip
    print(
        f"host: {platform.node()} {os.cpu_count()} CPUs, Python {platform.python_version()}, "
        f"{subprocess.run([CHROMIUM, '--version'], capture_output=True, text=True).stdout.strip()}"
    )  # noqa: E501
    driver = None
    try:
        formed_s = cluster.start()
        print(f"cluster formed in {formed_s:.1f} s; agents' RSS {cluster.rss_mb():.0f} MB")
        driver = browser()
        open_page(driver, args.agents)
        entries = driver.execute_script(FIRST_LOAD_JS)
        print("\nfirst load (one page, fresh browser):")
        print(f"  {'response':<44} {'transfer B':>10} {'body B':>8}")
        for name, transfer, body in entries:
            print(f"  {name.split(':7947', 1)[-1]:<44} {transfer:>10} {body:>8}")
        print(f"  {'total':<44} {sum(e[1] for e in entries):>10} "
              f"{sum(e[2] for e in entries):>8}")  # fmt: skip
        driver.get("about:blank")

        time.sleep(args.settle)  # steady state: not a condition, a measuring window
        before = cluster.cpu_s()
        time.sleep(args.seconds)
        idle = [b - a for a, b in zip(before, cluster.cpu_s(), strict=True)]

        # A browser keeps at most 6 HTTP/1.1 connections per host, and each
        # page holds one for its stream: TABS_PER_BROWSER pages per browser.
        tabs: list[tuple[Any, str]] = []
        drivers = [driver]
        for k in range(args.pages):
            if k and k % TABS_PER_BROWSER == 0:
                drivers.append(browser())
            if k % TABS_PER_BROWSER:
                drivers[-1].switch_to.new_window("tab")
            open_page(drivers[-1], args.agents)
            tabs.append((drivers[-1], drivers[-1].current_window_handle))
        time.sleep(args.settle)
        before = cluster.cpu_s()
        time.sleep(args.seconds)
        busy = [b - a for a, b in zip(before, cluster.cpu_s(), strict=True)]
        still = sum(1 for d, h in tabs if d.switch_to.window(h) is None and shown(d))
        errors = [e for d in drivers for e in d.get_log("browser") if e["level"] == "SEVERE"]
    finally:
        for d in drivers if "drivers" in locals() else [driver] if driver else []:
            d.quit()
        cluster.stop()

    def pct(cpu_s: float) -> str:
        return f"{100 * cpu_s / args.seconds:6.2f} %"

    print(f"\nagent CPU over {args.seconds:.0f} s (utime+stime; % of one core):")
    print(f"  {'':<28} {'no page':>10} {f'{args.pages} pages':>10} {'added':>10}")
    print(f"  {'agent 0 (serves the pages)':<28} {pct(idle[0]):>10} {pct(busy[0]):>10} "
          f"{pct(busy[0] - idle[0]):>10}")  # fmt: skip
    print(f"  {f'all {args.agents} agents':<28} {pct(sum(idle)):>10} "
          f"{pct(sum(busy)):>10} {pct(sum(busy) - sum(idle)):>10}")  # fmt: skip
    print(f"  per page on agent 0: {1000 * (busy[0] - idle[0]) / args.pages / args.seconds:.2f} "
          f"ms of CPU per second ({len(drivers)} browsers, {TABS_PER_BROWSER} tabs each at "
          "most)")  # fmt: skip
    print(f"  pages still showing the members at the end: {still}/{args.pages}; "
          f"console errors: {len(errors)}")  # fmt: skip


def shot(args: argparse.Namespace, root: Path) -> None:
    cluster = Cluster(args.agents, args.profile, root, slow=args.slow)
    print(f"config: {args.agents} agents (profile {args.profile}"
          f"{', probe every 5 s, gossip every 1 s' if args.slow else ''}), "
          f"page {args.width}x{args.height}")  # fmt: skip
    driver = None
    try:
        formed_s = cluster.start()
        print(f"cluster formed in {formed_s:.1f} s; agents' RSS {cluster.rss_mb():.0f} MB")
        keys = (("app/config/db", "postgres://db.internal:5432/app"), ("app/config/replicas", "3"),
                ("app/feature/dark-launch", "on"), ("brokers/leader", "node-001"),
                ("motd", "hello from shoal"))  # fmt: skip
        for key, value in keys:
            request(ip_of(1 % args.agents), "PUT", f"/v1/kv/{key}", value.encode())
        if args.agents > 3:
            cluster.procs[3].send_signal(signal.SIGKILL)  # one failed member, for the picture
            wait(lambda: (get_json(ip_of(0), "/v1/members?status=dead") or {})
                 .get("members"), 60, "a failed member")  # fmt: skip
        driver = browser(args.width, args.height)
        open_page(driver, args.agents)
        time.sleep(1.5)  # let the tenure clock and counters fill in: a picture, not a condition
        driver.save_screenshot(str(args.out))
        load = [os.getloadavg()[0]]
        print(
            f"saved {args.out}; load average {load[0]:.2f}; "
            f"console errors: {sum(e['level'] == 'SEVERE' for e in driver.get_log('browser'))}"
        )
    finally:
        if driver is not None:
            driver.quit()
        cluster.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    c = sub.add_parser("cost", help="bytes on first load, agent CPU with pages open vs none")
    c.add_argument("--agents", type=int, default=20)
    c.add_argument("--pages", type=int, default=10)
    c.add_argument("--seconds", type=float, default=60.0)
    c.add_argument("--settle", type=float, default=10.0)
    c.add_argument("--profile", default="lan")
    s = sub.add_parser("shot", help="a screenshot of the page")
    s.add_argument("out", type=Path)
    s.add_argument("--agents", type=int, default=5)
    s.add_argument("--profile", default="lan")
    s.add_argument("--slow", action="store_true", help="probe every 5 s, gossip every 1 s")
    s.add_argument("--width", type=int, default=1280)
    s.add_argument("--height", type=int, default=1400)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="shoal-ui-bench-", dir="/var/tmp"))
    try:
        cost(args, root) if args.command == "cost" else shot(args, root)
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
