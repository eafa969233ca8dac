"""A data-parallel all-reduce through real ns-3 at CI scale, against run-analytical (issue 15).

128 MiB over 32 H100 (4 nodes) on a non-blocking fat-tree: the auto rule's NVLS tree with
NCCL's Simple protocol and chunking (16 channels, 64 KiB NCCL chunks, 16 per lane; our
flows carry 512 KiB, see collectives.protocol.nvls_pipeline). The scale-up case (512 GPUs,
docs/ns3.md "512 and 1024 GPUs") has the same structure with a deeper node tree.

NCCL's pipeline fill and drain: each lane pipelines only K = 16 chunks through 2h
node-tree levels (h = node tree height), so the first chunk crosses 2h - 1 levels before
the NICs at the top are busy, and the first chunk round through the NVSwitches (every
channel at once) precedes the network. The oracle below writes that fill out by hand:

    fill = (2h - 1) * flow / nic_rate + channels * flow / nvlink_rate

The analytical backend carries the same term (collectives.closed_form.nvls_tree_fill_s);
ns-3 must agree with it within 15%, be slower than the closed form without the fill,
drop nothing, and put the same bytes on the 8 NICs of every node.
"""
from __future__ import annotations

import math

import numpy as np
import pytest

from collectives import expand
from collectives.closed_form import nvls_tree_fill_s
from network.analytical import AnalyticalBackend
from network.backend import Transfer
from network.ns3.backend import Ns3Backend
from workload_gen.core.placement import Placement
from workload_gen.core.records import CollectiveOp, CollKind, Group, Phase
from workload_gen.core.system import load_system

MiB = 1 << 20
N, S = 32, 128 * MiB


def _fill_s(system) -> float:
    """NCCL's NVLS-tree pipeline fill for 128 MiB over 4 H100 nodes, from NCCL's constants:
    at >= 4 nodes the chunk is nvlsTreeMaxChunkSize = 64 KiB; 16 NVLS channels x 8 heads =
    128 lanes move in lock step on our 16 channels, so one flow is 64 KiB x 128 / 16 =
    512 KiB. NCCL's 4-node tree (1 -> 2, 3 -> 2, 2 -> 0) has height 2, so the first flow
    crosses 2*2 - 1 = 3 edges at one NIC's rate, and 16 channels' first flows leave the GPU
    over NVLink."""
    flow = 64 * 1024 * 128 // 16
    assert flow == 512 * 1024
    nic_rate = system.nic_bw * system.nic_efficiency
    return 3 * flow / nic_rate + 16 * flow / system.nvlink_busbw


@pytest.fixture(scope="module")
def run(ns3_runtime):
    h100 = load_system("h100")
    be = Ns3Backend(h100, N, topology="fat-tree", oversubscription=1)
    op = CollectiveOp("grads", 0, Phase.ITERATION, CollKind.ALL_REDUCE, Group.DP, N, S)
    be.submit(Transfer(0, op, tuple(range(N))), 0.0)
    done = be.advance_until(math.inf)
    analytical = AnalyticalBackend(h100, N).collective_time(op, tuple(range(N)))
    yield h100, be, done[0].time, analytical
    be.net.close()


def test_flows_are_nccls_chunks(run):
    h100, be, _, _ = run
    g = expand("allreduce", S, range(N), Placement(N, 8), system=h100)
    assert (g.algorithm, g.protocol) == ("nvls_tree", "simple")
    # 16 channels x 16 chunks x (17 flows per node + an up and a down edge per non-root node)
    assert be.stats()["flows"] == g.num_flows == 16 * 16 * (17 * 4 + 2 * 3) == 18_944


def test_agrees_with_analytical_which_carries_nccls_pipeline_fill(run):
    h100, _, t_ns3, t_an = run
    fill = _fill_s(h100)
    assert nvls_tree_fill_s(S, N // 8, 8, h100.nic_busbw, h100.nvlink_busbw) == pytest.approx(fill, rel=1e-12)
    assert t_ns3 == pytest.approx(t_an, rel=0.15)
    # the fill is real: without it the packets are slower than the closed form
    assert t_ns3 > t_an - fill


def test_nothing_dropped_and_every_nic_of_a_node_carries_the_same_bytes(run):
    _, be, _, _ = run
    st = be.stats()
    assert st["queue_drops"] == 0 and st["ip_drops"] == 0
    table = be.net.flow_table()  # src, dst, bytes, start, finish, fluid
    net = table[:, 5] == 0
    sent = np.bincount(table[net, 0].astype(int), table[net, 2], minlength=N).reshape(-1, 8)
    assert sent.min() > 0 and (sent == sent[:, :1]).all()
    assert sent.sum() == st["fabric_bytes"] == 2 * (N // 8 - 1) * S
