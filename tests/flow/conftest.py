"""One ns-3 import for the flow tests that compare against it (10-40 s of cppyy JIT, once
per process; the same fixture as tests/ns3/conftest.py)."""
from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def ns3_runtime():
    from network.ns3 import runtime

    return runtime.load()
