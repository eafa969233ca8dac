"""One ns-3 import for the whole session: ``from ns import ns`` plus compiling tsim.cpp
costs 10-40 s, and C++ classes can be defined only once per process."""
from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def ns3_runtime():
    from network.ns3 import runtime

    return runtime.load()
