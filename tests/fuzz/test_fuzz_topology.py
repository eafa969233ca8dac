"""Fuzz SimAI's topology-file reader (network/ns3/topology.py; reading only, no ns-3)."""
from __future__ import annotations

from fuzz_helpers import fuzz_settings, mutated_bytes, mutated_text, only_trainsim_errors, scratch_file
from fuzz_seeds import TOPOLOGY
from hypothesis import example, given
from hypothesis import strategies as st

from network.ns3.topology import read_simai_topology


def _read(text: str | bytes, nvswitch: bool) -> None:
    read_simai_topology(scratch_file("topo.txt", text), nvswitch=nvswitch)


@fuzz_settings(150)
@given(mutated_text([TOPOLOGY]), st.booleans())
@example(TOPOLOGY.replace("0.0005ms", "-0.0005ms", 1), False)     # negative delay: ns-3 asserted
@example(TOPOLOGY.replace("400Gbps", "0Gbps", 1), False)          # zero rate: ZeroDivisionError
@example(TOPOLOGY.replace("0 6 400Gbps 0.0005ms 0\n", ""), False)  # a GPU without a NIC link
def test_topology_only_raises_trainsim_errors(text, nvswitch):
    only_trainsim_errors(_read, text, nvswitch)


@fuzz_settings(50)
@given(mutated_bytes([TOPOLOGY.encode()]), st.booleans())
def test_topology_bytes_only_raise_trainsim_errors(data, nvswitch):
    only_trainsim_errors(_read, data, nvswitch)
