"""Contention-free timing of the expanded flows vs the closed forms.

Expected values are written out here from the formulas (not taken from the code), and the
closed_form functions the analytical backend imports must give the same numbers.

Tolerance: where every link the algorithm uses has the same rate, the flow-level time is
the closed form exactly; sizes are chosen so every flow has the same byte count, and the
only error left is float64 rounding over at most a few thousand additions, far below
1e-9 relative. So rel=1e-9 (a one-byte flow-size error would already show at ~1e-9 for
these sizes only if it sat on the critical path of every step, and we avoid it by choice
of sizes).
"""
from __future__ import annotations

import closed_form_oracle as oracle
import pytest

from collectives import closed_form as cf
from collectives import expand
from collectives.timing import LinkModel, evaluate, flow_rates
from workload_gen.core.placement import Placement
from workload_gen.core.system import SYSTEMS

H100 = SYSTEMS["h100"]
LINKS = LinkModel.from_system(H100)
NV, NIC = H100.nvlink_busbw, H100.nic_busbw
LAT_NV, LAT_NET = H100.nvlink_latency_s, H100.network_latency_s
MiB, GiB = 1 << 20, 1 << 30
REL = 1e-9


def _time(g):
    return evaluate(g, LINKS).time_s


@pytest.mark.parametrize("n,ch", [(2, 1), (4, 4), (8, 8), (8, 2)])
@pytest.mark.parametrize("S", [64 * MiB, GiB])
def test_ring_allreduce_inside_a_node(n, ch, S):
    g = expand("allreduce", S, range(n), Placement(8, 8), algorithm="ring", channels=ch)
    want = 2 * (n - 1) / n * S / NV + 2 * (n - 1) * LAT_NV
    assert _time(g) == pytest.approx(want, rel=REL)
    assert oracle.ring_time("allreduce", S, n, NV, LAT_NV) == pytest.approx(want, rel=REL)
    assert oracle.closed_form_time("allreduce", "ring", S, n, NV, LAT_NV) == pytest.approx(want, rel=REL)


@pytest.mark.parametrize("op", ["allgather", "reducescatter"])
@pytest.mark.parametrize("n", [4, 16])
def test_ring_allgather_reducescatter_one_gpu_per_node(op, n):
    S = 256 * MiB
    g = expand(op, S, range(n), Placement(n, 1), algorithm="ring", channels=4)
    assert not g.is_intra_node.any()
    want = (n - 1) / n * S / NIC + (n - 1) * LAT_NET
    assert _time(g) == pytest.approx(want, rel=REL)
    assert oracle.ring_time(op, S, n, NIC, LAT_NET) == pytest.approx(want, rel=REL)


def test_hierarchical_ring_is_bound_by_the_nics_within_one_pass():
    """16 ranks on 2 DGX-H100 nodes, 8 channels: every NIC carries one ring per direction
    (NIC-bound: 46 GB/s per channel vs 360/7 GB/s of NVLink per channel). The time is at
    least the closed form with busbw = 8 NICs and at most that plus one pass around the
    ring (pipeline fill when link rates differ)."""
    n, S = 16, GiB
    g = expand("allreduce", S, range(n), Placement(16, 8), algorithm="ring", channels=8, system=H100)
    t = _time(g)
    busbw = 8 * NIC
    low = 2 * (n - 1) / n * S / busbw + 2 * (n - 1) * LAT_NET
    one_pass = n * (S / n / busbw + LAT_NET)
    assert low * (1 - REL) <= t <= low + one_pass


@pytest.mark.parametrize("n", [4, 8])
def test_tree_allreduce_inside_a_node_is_a_pipelined_chain(n):
    """One node: NCCL's tree degenerates to a chain of height n-1. With channels = n the
    rotated chains load every NVLink port with 2(n-1)/n lanes per channel, so the lane rate
    is NV*n/(2(n-1)C) and T = 2h*lat + (2h+K-1)/K * 2(n-1)/n * S/NV."""
    S, ch = 512 * MiB, n
    g = expand("allreduce", S, range(n), Placement(8, 8), algorithm="tree", channels=ch)
    K = int(g.chunk.max()) + 1
    assert K == S // ch // (512 * 1024)  # NCCL: the tree takes one 512 KiB Simple step per chunk
    h = n - 1
    want = 2 * h * LAT_NV + (2 * h + K - 1) / K * 2 * (n - 1) / n * S / NV
    assert _time(g) == pytest.approx(want, rel=REL)
    assert oracle.closed_form_time("allreduce", "tree", S, n, NV, LAT_NV, chunks=K) == pytest.approx(want, rel=REL)


@pytest.mark.parametrize("nodes", [2, 5, 8])
def test_tree_allreduce_across_nodes_between_its_lane_bounds(nodes):
    """Across nodes the double tree loads NICs unevenly (a node interior in one tree sends to
    two children), so the time lies between the closed form at the fastest and at the
    slowest lane rate, with the tree's height from collectives.closed_form.tree_height."""
    S, ch = 256 * MiB, 2
    g = expand("allreduce", S, range(nodes), Placement(nodes, 1), algorithm="tree", channels=ch)
    K = int(g.chunk.max()) + 1
    rates = flow_rates(g, LINKS)
    h = cf.tree_height(nodes, 1)
    f = 2 * (nodes - 1) / nodes

    def t_at(rate):  # per-lane rate -> busbw of the closed form: C * rate * f (a chunk S/(C K) per edge)
        return oracle.tree_time(S, nodes, ch * rate * f, LAT_NET, h, K)

    assert t_at(rates.max()) * (1 - REL) <= _time(g) <= t_at(rates.min()) * (1 + REL)


@pytest.mark.parametrize("n,ch", [(2, 1), (4, 2), (8, 8)])
def test_nvls_allreduce(n, ch):
    S = GiB
    g = expand("allreduce", S, range(n), Placement(8, 8), algorithm="nvls", channels=ch, system=H100)
    K = int(g.chunk.max()) + 1
    want = 2 * LAT_NV + (1 + 1 / K) * 2 * (n - 1) / n * S / H100.nvls_busbw
    assert _time(g) == pytest.approx(want, rel=REL)
    assert oracle.nvls_time(S, n, H100.nvls_busbw, LAT_NV, chunks=K) == pytest.approx(want, rel=REL)
    # with ideal pipelining the NVLS busbw is the system's figure
    assert S * 2 * (n - 1) / n / (oracle.nvls_time(S, n, H100.nvls_busbw, 0.0)) == pytest.approx(H100.nvls_busbw)


@pytest.mark.parametrize("n", [2, 4, 8])
def test_halving_doubling_power_of_two(n):
    S = GiB
    g = expand("allreduce", S, range(n), Placement(8, 8), algorithm="hd", channels=4)
    rounds = n.bit_length() - 1
    want = 2 * (n - 1) / n * S / NV + 2 * rounds * LAT_NV
    assert _time(g) == pytest.approx(want, rel=REL)
    assert oracle.hd_time("allreduce", S, n, NV, LAT_NV) == pytest.approx(want, rel=REL)


@pytest.mark.parametrize("n", [3, 6, 7])
def test_halving_doubling_non_power_of_two_folds_in_and_out(n):
    S = GiB
    g = expand("allreduce", S, range(n), Placement(8, 8), algorithm="hd", channels=1)
    p = 1 << (n.bit_length() - 1)
    rounds = p.bit_length() - 1
    want = 2 * (p - 1) / p * S / NV + 2 * rounds * LAT_NV + 2 * S / NV + 2 * LAT_NV
    assert _time(g) == pytest.approx(want, rel=REL)
    assert oracle.hd_time("allreduce", S, n, NV, LAT_NV) == pytest.approx(want, rel=REL)


@pytest.mark.parametrize("algo,steps", [("alltoall", 1), ("pairwise", None)])
def test_alltoall_inside_a_node(algo, steps):
    n, S = 8, 512 * MiB
    g = expand("alltoall", S, range(n), Placement(8, 8), algorithm=algo, channels=2)
    lat_terms = 1 if algo == "alltoall" else n - 1
    want = (n - 1) / n * S / NV + lat_terms * LAT_NV
    assert _time(g) == pytest.approx(want, rel=REL)
    assert oracle.closed_form_time("alltoall", algo, S, n, NV, LAT_NV) == pytest.approx(want, rel=REL)


def test_broadcast_chain_one_channel():
    n, S = 8, 256 * MiB
    g = expand("broadcast", S, range(n), Placement(8, 8), algorithm="ring", channels=1)
    K = int(g.chunk.max()) + 1
    want = (1 + (n - 2) / K) * S / NV + (n - 1) * LAT_NV
    assert _time(g) == pytest.approx(want, rel=REL)
    assert oracle.closed_form_time("broadcast", "ring", S, n, NV, LAT_NV, chunks=K) == pytest.approx(want, rel=REL)


def test_sendrecv_across_nodes():
    S = 64 * MiB
    g = expand("sendrecv", S, (3, 11), Placement(16, 8), channels=2)
    # 2 channels share one NIC: the message sees one NIC
    assert _time(g) == pytest.approx(S / NIC + LAT_NET, rel=REL)
    assert oracle.p2p_time(S, NIC, LAT_NET) == pytest.approx(S / NIC + LAT_NET, rel=REL)


def test_bus_factors_are_nccl_tests():
    assert cf.bus_factor("allreduce", 8) == pytest.approx(14 / 8)
    assert cf.bus_factor("allgather", 8) == pytest.approx(7 / 8)
    assert cf.bus_factor("reducescatter", 4) == pytest.approx(3 / 4)
    assert cf.bus_factor("alltoall", 16) == pytest.approx(15 / 16)
    assert cf.bus_factor("broadcast", 16) == 1.0
    assert cf.bus_factor("allreduce", 1) == 0.0


def test_latency_steps():
    assert cf.latency_steps("allreduce", "ring", 8) == 14
    assert cf.latency_steps("allgather", "ring", 8) == 7
    assert cf.latency_steps("allreduce", "hd", 16) == 8
    assert cf.latency_steps("allreduce", "nvls", 8) == 2


@pytest.mark.parametrize("algorithm,kinds", [
    ("ring", ("allreduce", "allgather", "reducescatter")), ("tree", ("allreduce",)), ("nvls", ("allreduce",)),
    ("hd", ("allreduce",)), ("alltoall", ("alltoall",)), ("pairwise", ("alltoall",)), ("p2p", ("sendrecv",)),
])
@pytest.mark.parametrize("n,nodes", [(2, 1), (8, 1), (16, 2), (24, 3), (64, 8), (128, 16), (96, 12)])
def test_production_latency_steps_equal_the_oracles(algorithm, kinds, n, nodes):
    """The production step counts (what the analytical backend charges) are the latency
    terms of the independently written oracle: its time with S = 0 and latency = 1."""
    if algorithm == "p2p":
        n, nodes = 2, min(nodes, 2)
    for kind in kinds:
        expect = oracle.closed_form_time(kind, algorithm, 0.0, n, 1.0, 1.0, nodes=nodes)
        assert cf.latency_steps(kind, algorithm, n, nodes=nodes) == round(expect)


@pytest.mark.parametrize("nodes", [1, 2, 3, 5, 8, 13, 64, 100])
@pytest.mark.parametrize("per_node", [1, 4, 8])
def test_production_tree_height_equals_the_oracles(nodes, per_node):
    assert cf.tree_height(nodes, per_node) == oracle.tree_height(nodes, per_node)
