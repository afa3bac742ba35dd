import os
from pathlib import Path

import pytest

from harness import REPO_ROOT

FIXTURES = Path(__file__).resolve().parent / "fixtures"
FIXTURE_SOLUTIONS = FIXTURES / "solutions"
ADD_PROBLEM = REPO_ROOT / "problems" / "examples" / "elementwise_add.py"


def pytest_configure(config):
    config.addinivalue_line("markers", "gpu: needs a CUDA device (skipped without one)")


def pytest_collection_modifyitems(config, items):
    import torch
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session", autouse=True)
def traversable_tmp(tmp_path_factory):
    """Where the tests run as root, sandboxed processes run as unprivileged uids of their own
    (harness/isolate/sandbox.py): the folders pytest makes for a test (0700), where its solution files
    and throwaway repositories live, are open to others (read and pass), as a user's checkout is;
    the folders above them let others pass."""
    base = tmp_path_factory.getbasetemp()
    for folder in (base.parent, base):
        folder.chmod(folder.stat().st_mode | 0o011)
    made = tmp_path_factory.mktemp

    def mktemp(*args, **kwargs):
        path = made(*args, **kwargs)
        path.chmod(path.stat().st_mode | 0o055)
        return path

    tmp_path_factory.mktemp = mktemp
    yield


@pytest.fixture(scope="session", autouse=True)
def build_cache(traversable_tmp, tmp_path_factory):
    """One build cache per test session: each C++ fixture compiles once."""
    cache = os.environ.get("KB_TEST_BUILD_CACHE") or str(tmp_path_factory.mktemp("builds"))
    old = os.environ.get("KB_BUILD_CACHE")
    os.environ["KB_BUILD_CACHE"] = cache
    yield Path(cache)
    if old is None:
        os.environ.pop("KB_BUILD_CACHE", None)
    else:
        os.environ["KB_BUILD_CACHE"] = old


def strays(token: str) -> list[int]:
    """Processes whose environment carries this test's token (every process of its run does; a forked step
    shows its fork server's, which has it)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                if token.encode() in (entry / "environ").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                pass
    return found
