import pytest

from tests.integration.agents import AgentCluster


@pytest.fixture
def agents(tmp_path):
    cluster = AgentCluster(tmp_path)
    yield cluster
    cluster.stop()
