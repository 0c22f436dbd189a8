import sys

import pytest

from tests.integration.agents import AgentCluster

# On a failure, the report shows each agent's last log lines that matter
# (warnings, errors, controller and member events): a CI run leaves nothing
# else behind to tell what the agents saw.
_LOG_LINES = 25
_WORTH_SHOWING = ('"warning"', '"error"', '"controller-', '"member-', '"voters-')


@pytest.fixture
def agents(tmp_path):
    cluster = AgentCluster(tmp_path)
    yield cluster
    cluster.stop()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    cluster = getattr(item, "funcargs", {}).get("agents")
    if report.when != "call" or not report.failed or not isinstance(cluster, AgentCluster):
        return
    for agent in cluster.agents:
        try:
            lines = agent.log().splitlines()
        except OSError:
            continue
        shown = [ln for ln in lines if any(w in ln for w in _WORTH_SHOWING)][-_LOG_LINES:]
        report.sections.append((f"log of {agent.name} ({agent.ip})", "\n".join(shown)))


def pytest_terminal_summary(terminalreporter):
    """Which build stood in for the previous release (loudly when it was not
    a real release), and the upgrade tests' figures (releases.py)."""
    releases = sys.modules.get("tests.integration.releases")
    if releases is not None and releases.NOTICES:
        terminalreporter.section("upgrade: builds and figures")
        for line in releases.NOTICES:
            terminalreporter.write_line(line)
