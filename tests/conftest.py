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
def build_cache(tmp_path_factory):
    """One build cache per test session: each C++ fixture compiles once."""
    cache = os.environ.get("KB_TEST_BUILD_CACHE") or str(tmp_path_factory.mktemp("builds"))
    old = os.environ.get("KB_BUILD_CACHE")
    os.environ["KB_BUILD_CACHE"] = cache
    yield Path(cache)
    if old is None:
        os.environ.pop("KB_BUILD_CACHE", None)
    else:
        os.environ["KB_BUILD_CACHE"] = old
