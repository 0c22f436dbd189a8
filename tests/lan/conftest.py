import shutil

import pytest

from tests.lan.netlab import VirtualLan, remove_stale_namespaces, require_lan


@pytest.fixture(scope="session", autouse=True)
def _clean_leftovers():
    import os

    if os.geteuid() == 0 and shutil.which("ip"):
        remove_stale_namespaces()


@pytest.fixture
def make_lan(tmp_path):
    """Build virtual LANs for a test; all are torn down even if it fails."""
    require_lan()
    lans: list[VirtualLan] = []

    def make(n: int, disable_dad: bool = True) -> VirtualLan:
        lan = VirtualLan(n, tmp_path, disable_dad=disable_dad)
        lans.append(lan)
        return lan

    yield make
    for lan in lans:
        lan.close()


@pytest.fixture(scope="module")
def make_module_lan(tmp_path_factory):
    """`make_lan` for a whole module: LANs its tests share, built once and torn
    down after the module's last test."""
    require_lan()
    lans: list[VirtualLan] = []

    def make(n: int, disable_dad: bool = True) -> VirtualLan:
        lan = VirtualLan(n, tmp_path_factory.mktemp("lan"), disable_dad=disable_dad)
        lans.append(lan)
        return lan

    yield make
    for lan in lans:
        lan.close()
