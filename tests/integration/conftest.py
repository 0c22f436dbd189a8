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
    if report.when == "teardown":
        _pass_on_notices(report)
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


def _pass_on_notices(report):
    """The upgrade tests' notices (which build stood in for the previous
    release, loudly when it was not a real release, and their figures:
    releases.py) ride on the report of the test that made them, to the
    summary (tests/conftest.py, "figures the tests reported")."""
    global _notices_sent
    releases = sys.modules.get("tests.integration.releases")
    if releases is not None:
        report.user_properties.extend(("figure", line) for line in releases.NOTICES[_notices_sent:])
        _notices_sent = len(releases.NOTICES)


_notices_sent = 0
