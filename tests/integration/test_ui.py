"""The status page (`GET /ui/`, daemon/ui/) in a real browser against real agents.

Debian's chromium, driven by Selenium through Debian's chromedriver, headless.
Every wait polls the page or the agent with a deadline (poll_until); none
sleeps for a condition. Each test ends by reading the browser's console: the
page must log no error.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import threading
import time
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from tests.conftest import IN_CI, poll_until
from tests.integration.agents import AgentCluster, AgentProcess

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
FAST = ["--no-discovery", "--profile", "local"]
TOKEN = "a-long-enough-api-token-for-the-page"


def _missing() -> list[str]:
    missing = [p for p in (CHROMIUM, CHROMEDRIVER) if not shutil.which(p)]
    try:
        import selenium  # noqa: F401
    except ImportError:
        missing.append("selenium (PyPI)")
    return missing


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """One headless chromium for the module; its console is read by each test."""
    missing = _missing()
    if missing:
        why = (f"the status page tests need {', '.join(missing)} (apt-get install chromium "
               "chromium-driver; pip install selenium)")  # fmt: skip
        if IN_CI:
            pytest.fail(f"CI=true: {why}")
        pytest.skip(why)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--disable-gpu", "--window-size=1280,1000",
                "--disable-dev-shm-usage"):  # fmt: skip
        options.add_argument(arg)
    if os.geteuid() == 0:
        options.add_argument("--no-sandbox")  # chromium refuses to run as root otherwise
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    """The browser, with its console drained before the test and checked after."""
    browser.get_log("browser")
    yield browser
    browser.get("about:blank")


def console_errors(driver: Any, expected: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    """The console's errors since the last read, less those containing `expected`."""
    return [e for e in driver.get_log("browser") if e["level"] == "SEVERE"
            and not any(x in e["message"] for x in expected)]  # fmt: skip


def js(driver: Any, script: str, *args: Any) -> Any:
    return driver.execute_script(script, *args)


def row_status(driver: Any, name: str) -> str | None:
    """The status a member's row shows (None when it has no row)."""
    return js(driver, "const r = document.querySelector(`tr[data-name='${arguments[0]}']`);"
              "return r ? r.dataset.status : null;", name)  # fmt: skip


def rows(driver: Any) -> dict[str, str]:
    return js(driver, "const out = {};"
              "for (const r of document.querySelectorAll('#member-rows tr'))"
              "  out[r.dataset.name] = r.dataset.status;"
              "return out;")  # fmt: skip


def text(driver: Any, element_id: str) -> str:
    return js(driver, "return document.getElementById(arguments[0]).textContent;", element_id)


def visible(driver: Any, element_id: str) -> bool:
    return bool(js(driver, "const e = document.getElementById(arguments[0]);"
                   "return !!e && !e.hidden && e.offsetParent !== null;", element_id))  # fmt: skip


def start(agents: AgentCluster, n: int) -> list[AgentProcess]:
    started = agents.start(n, extra=FAST)
    agents.wait_all_see([a.name for a in started], "alive", started, timeout_s=30)
    return started


def open_page(driver: Any, agent: AgentProcess, names: list[str]) -> None:
    """Load the page from `agent` and wait until it lists `names`, alive."""
    driver.get(f"http://{agent.ip}:7947/ui/")
    want = dict.fromkeys(names, "alive")
    poll_until(lambda: rows(driver) == want, 15)
    js(driver, "window.loadedOnce = 'yes';")  # gone if the page reloads


def test_the_page_lists_the_members_and_a_killed_agent_turns_failed_without_a_reload(agents, page):
    """The members table follows the watch stream: kill -9 shows as failed
    within the agent's own detection time plus 1 s, with no reload."""
    started = start(agents, 4)
    served, victim = started[0], started[3]
    open_page(page, served, [a.name for a in started])
    assert "(this agent)" in text(page, "member-rows")
    assert not visible(page, "banner-alone") and not visible(page, "banner-stream")
    killed_at = time.monotonic()
    victim.kill()
    seen: dict[str, float] = {}

    def failed_on_page() -> bool:
        now = time.monotonic()
        if "agent" not in seen and served.status_of(victim.name) == "dead":
            seen["agent"] = now  # the served agent's own detection
        if row_status(page, victim.name) == "failed":
            seen["page"] = now
        return "page" in seen

    poll_until(failed_on_page, 30, interval_s=0.02)
    detected = seen.get("agent", seen["page"])
    assert seen["page"] - detected <= 1.0, (
        f"the page showed failed {seen['page'] - killed_at:.2f} s after the kill, the agent "
        f"{detected - killed_at:.2f} s"
    )
    assert js(page, "return window.loadedOnce;") == "yes"
    feed = text(page, "feed-list")
    assert f"{victim.name} failed" in feed or f"{victim.name} suspected" in feed
    assert console_errors(page) == []


def test_a_controller_change_shows_the_new_epoch(agents, page):
    """kill -9 of the controller's agent: the page shows the new controller and epoch."""
    started = start(agents, 3)
    first = poll_until(lambda: started[0].api.get("/v1/controller").get("controller"), 20)
    old = started[0].api.get("/v1/controller")
    served = next(a for a in started if a.name != first)
    open_page(page, served, [a.name for a in started])
    poll_until(lambda: text(page, "ctl-name") == first, 10)
    assert text(page, "ctl-epoch") == str(old["epoch"])
    assert sorted(text(page, "ctl-voters").split(", ")) == sorted(a.name for a in started)
    next(a for a in started if a.name == first).kill()

    def new_controller() -> bool:
        name, epoch = text(page, "ctl-name"), text(page, "ctl-epoch")
        return name not in (first, "", "—") and epoch.isdigit() and int(epoch) > old["epoch"]

    poll_until(new_controller, 30)
    now = served.api.get("/v1/controller")
    poll_until(lambda: text(page, "ctl-epoch") == str(now["epoch"]), 5)
    assert text(page, "ctl-name") == now["controller"]
    assert "controller is" in text(page, "feed-list")
    assert js(page, "return window.loadedOnce;") == "yes"
    assert console_errors(page) == []


def test_a_key_put_on_another_agent_appears_in_the_tree(agents, page):
    """A PUT on one agent reaches the page of another (through the push and
    the watch), in the tree under its folders; a delete removes it."""
    started = start(agents, 2)
    open_page(page, started[0], [a.name for a in started])
    key, value = "app/config/db", "postgres://db.internal:5432/app"
    started[1].api.request("PUT", f"/v1/kv/{key}", value.encode())

    def leaf() -> str:
        return js(page, "const e = document.querySelector("
                  "  `#kv-tree li[data-key='${arguments[0]}']`);"
                  "return e ? e.textContent : '';", key)  # fmt: skip

    poll_until(lambda: value in leaf(), 10)
    tree = text(page, "kv-tree")
    assert "app/" in tree and "config/" in tree
    started[1].api.request("DELETE", f"/v1/kv/{key}")
    poll_until(lambda: leaf() == "", 10)
    started[0].api.request("POST", "/v1/leave")
    poll_until(lambda: visible(page, "banner-left"), 10)
    assert js(page, "return window.loadedOnce;") == "yes"
    assert console_errors(page) == []


class CuttableProxy:
    """A TCP relay in front of an agent's API that the test can cut: it
    closes every open connection and refuses new ones until `mend()`; it
    records each request line the browser sends."""

    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self.requests: list[str] = []
        self.refusing = False
        self._open: list[socket.socket] = []
        self._lock = threading.Lock()
        self._server = socket.create_server(("127.0.0.1", 0))
        self.port = self._server.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            if self.refusing:
                client.close()
                continue
            server = socket.create_connection(self.upstream)
            with self._lock:
                self._open += [client, server]
            threading.Thread(target=self._pump, args=(client, server, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(server, client, False), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, from_browser: bool) -> None:
        try:
            while data := src.recv(65536):
                if from_browser:
                    self.requests += re.findall(rb"^(?:GET|PUT|POST|DELETE) (\S+) HTTP", data, re.M)
                dst.sendall(data)
        except OSError:
            pass
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def cut(self) -> None:
        self.refusing = True
        with self._lock:
            for s in self._open:
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                s.close()
            self._open.clear()

    def mend(self) -> None:
        self.refusing = False

    def close(self) -> None:
        self.cut()
        self._server.close()

    def paths(self) -> list[str]:
        return [r.decode() for r in self.requests]


def test_a_dropped_stream_shows_a_banner_and_resumes_from_its_index(agents, page):
    """The connection to the agent breaks: the page says the stream dropped
    and is resuming, and when the agent is reachable again it resumes the
    watch from the last index it saw (no re-listing): a key put while the
    page was cut off arrives."""
    started = start(agents, 2)
    proxy = CuttableProxy((started[0].ip, 7947))
    try:
        page.get(f"http://127.0.0.1:{proxy.port}/ui/")
        poll_until(lambda: rows(page) == dict.fromkeys((a.name for a in started), "alive"), 15)
        js(page, "window.loadedOnce = 'yes';")
        poll_until(lambda: any(p.startswith("/v1/watch") for p in proxy.paths()), 5)
        listings = sum(p.startswith("/v1/members") for p in proxy.paths())
        proxy.cut()
        poll_until(lambda: visible(page, "banner-stream"), 10)
        assert "resuming" in text(page, "banner-stream")
        started[1].api.request("PUT", "/v1/kv/while/away", b"still-delivered")
        proxy.mend()
        poll_until(lambda: not visible(page, "banner-stream"), 15)
        poll_until(lambda: "still-delivered" in text(page, "kv-tree"), 10)
        watches = [p for p in proxy.paths() if p.startswith("/v1/watch")]
        assert len(watches) >= 2 and "&run=" in watches[-1]
        assert sum(p.startswith("/v1/members") for p in proxy.paths()) == listings
        assert js(page, "return window.loadedOnce;") == "yes"
    finally:
        proxy.close()
    # While cut off, the browser logs its failed connection attempts itself.
    assert console_errors(page, expected=("net::ERR_",)) == []


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_protected_agent_asks_for_the_token_and_shows_nothing_before_it(agents, page, tmp_path):
    """An agent whose reads need the token (its API listens beyond loopback):
    the page asks for the token, shows no member until it has it, refuses a
    wrong one, keeps the right one in sessionStorage only, and then works."""
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    os.chmod(token_file, 0o600)
    # 0.0.0.0 is not loopback, so every call needs the token (api/access.py);
    # the browser reaches it at 127.0.0.1 on a port of its own.
    port = free_port()
    agent = agents.add("guarded-ui", join=[], extra=[
        *FAST, "--bootstrap-expect", "1", "--api", f"0.0.0.0:{port}",
        "--api-token-file", str(token_file)])  # fmt: skip
    base = f"http://127.0.0.1:{port}"

    def answers() -> bool:
        try:
            urllib.request.urlopen(f"{base}/ui/", timeout=2).close()
            return True
        except OSError:
            return False

    poll_until(answers, 20)
    page.get(f"{base}/ui/")
    poll_until(lambda: visible(page, "auth"), 10)
    assert not visible(page, "main")
    assert agent.name not in page.page_source
    page.find_element("id", "auth-token").send_keys("not-the-token-at-all\n")
    poll_until(lambda: "refused" in text(page, "auth-error"), 10)
    assert agent.name not in page.page_source
    assert js(page, "return sessionStorage.length + localStorage.length;") == 0
    page.find_element("id", "auth-token").send_keys(TOKEN + "\n")
    poll_until(lambda: rows(page) == {agent.name: "alive"}, 15)
    assert not visible(page, "auth")
    # The only member, by configuration (bootstrap_expect 1, no join, no
    # discovery, as a --dev agent): told calmly, not warned about.
    poll_until(lambda: visible(page, "banner-single"), 5)
    assert not visible(page, "banner-alone")
    assert js(page, "return [sessionStorage.getItem('shoal-api-token'), localStorage.length];"
              ) == [TOKEN, 0]  # fmt: skip
    page.refresh()  # the same tab keeps the token: no prompt again
    poll_until(lambda: rows(page) == {agent.name: "alive"}, 15)
    assert not visible(page, "auth")
    # The two refused calls are the browser's own network lines, not the page's errors.
    assert console_errors(page, expected=("status of 401",)) == []
