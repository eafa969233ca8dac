"""One ns-3 load for the whole session: C++ classes can be defined only once per process.
From the user's cache it takes under a second; the first session of an installation
compiles the core (10-15 s, network/ns3/runtime.py)."""
from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def ns3_runtime():
    from network.ns3 import runtime

    return runtime.load()


SIMAI_TOPOLOGY = [
    # 4 GPUs in 2 servers, 2 NVSwitches (ids 4, 5), 2 leaves (6, 7), 1 spine (8)
    "9 2 2 3 10 H100", "4 5 6 7 8",
    "0 4 2880Gbps 0.000025ms 0", "1 4 2880Gbps 0.000025ms 0", "2 5 2880Gbps 0.000025ms 0",
    "3 5 2880Gbps 0.000025ms 0", "0 6 400Gbps 0.0005ms 0", "2 6 400Gbps 0.0005ms 0",
    "1 7 400Gbps 0.0005ms 0", "3 7 400Gbps 0.0005ms 0", "6 8 800Gbps 0.0005ms 0", "7 8 800Gbps 0.0005ms 0",
]


@pytest.fixture
def simai_topology_file(tmp_path):
    """A small SimAI topology file: GPU i of each server on leaf 6 + i, one spine."""
    p = tmp_path / "topo.txt"
    p.write_text("\n".join(SIMAI_TOPOLOGY) + "\n")
    return p
