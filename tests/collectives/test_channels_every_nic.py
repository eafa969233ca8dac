"""Large collectives use every NIC of a node, as NCCL does (issue 15).

NCCL keeps a channel for the Simple protocol while the whole buffer holds >= 32 KiB per
channel (512 threads x NCCL_SIMPLE_THREAD_THRESHOLD 64 B); only the ring's LL protocol
scales that threshold by the rank count. A 128 MiB all-reduce over 64 DGX-H100 nodes
therefore runs one ring per NIC (8 channels), rail-aligned: every NIC sends and
receives the same bytes, the ring formula's 2(n-1)/n of its channel's share. Bytes are counted from the FlowGraph by the NIC of each
inter-node flow's sending and receiving GPU.
"""
from __future__ import annotations

import numpy as np
import pytest

from collectives import expand
from collectives.layout import GroupLayout
from workload_gen.core.placement import Placement
from workload_gen.core.system import get_system

H100 = get_system("h100")
MiB = 1 << 20


def _nic_bytes(g, nics: int = 8):
    inter = ~g.is_intra_node.astype(bool)
    src, dst, b = g.src[inter], g.dst[inter], g.bytes[inter].astype(np.int64)
    gpn = g.gpus_per_node
    out_nic = (src // gpn) * nics + (src % gpn) * nics // gpn
    in_nic = (dst // gpn) * nics + (dst % gpn) * nics // gpn
    n_nics = len(g.ranks) // gpn * nics
    return np.bincount(out_nic, b, n_nics), np.bincount(in_nic, b, n_nics)


def test_512_gpu_ring_all_reduce_puts_equal_bytes_on_all_8_nics_of_each_node():
    n = 512
    g = expand("allreduce", 128 * MiB, range(n), Placement(n, 8), algorithm="ring", system=H100)
    assert g.channels == 8
    sent, received = _nic_bytes(g)
    # ring all-reduce: each rank sends 2(n-1) slices of its channel's buffer / n; channel c
    # (128 MiB / 8 = 16 MiB) rides NIC c and leaves each node once, so every NIC sends and
    # receives exactly 2 x 511 x 16 MiB / 512 = 1022 x 32 KiB
    per_nic = 2 * (n - 1) * (128 * MiB // 8 // n)
    assert per_nic == 1022 * 32 * 1024
    assert (sent == per_nic).all() and (received == per_nic).all()


def test_512_gpu_auto_all_reduce_uses_every_nic_equally():
    """The auto rule's NVLS tree on H100: two channels per NIC (one per tree). Each channel
    carries 1/16 of the buffer once up and once down each of its tree's (nodes - 1) edges,
    so rail r (channels 2r and 2r+1) sends, over all nodes, 2 x 2 (nodes - 1) x S/16 =
    (nodes - 1) S / 4, and receives the same."""
    n, size = 512, 128 * MiB
    g = expand("allreduce", size, range(n), Placement(n, 8), system=H100)
    assert g.algorithm == "nvls_tree" and g.channels == 16
    sent, received = _nic_bytes(g)
    per_rail = (n // 8 - 1) * size // 4
    assert per_rail == 63 * 32 * MiB
    assert (sent.reshape(-1, 8).sum(axis=0) == per_rail).all()
    assert (received.reshape(-1, 8).sum(axis=0) == per_rail).all()


@pytest.mark.parametrize("n,nbytes,per_rail,channels", [
    (1024, 128 * MiB, 1, 8),   # 1024 GPUs: still every NIC (the whole buffer counts)
    (1024, 128 * MiB, 2, 16),
    (512, 256 * 1024, 1, 8),   # 256 KiB = 8 x 32 KiB: still 8
    (512, 128 * 1024, 1, 4),   # small: NCCL drops channels
    (16, 32 * 1024, 1, 1),
])
def test_channel_count_follows_nccl_simple_threshold_across_nodes(n, nbytes, per_rail, channels):
    layout = GroupLayout.build(range(n), Placement(n, 8), 8)
    assert layout.default_channels(nbytes, per_rail=per_rail) == channels


def test_inside_one_node_the_per_rank_rule_is_unchanged():
    layout = GroupLayout.build(range(8), Placement(8, 8), 8)
    assert layout.default_channels(8 * 64 * 1024) == 1
    assert layout.default_channels(1 << 30) == 8


@pytest.mark.parametrize("n", [512, 1024])
def test_auto_all_reduce_puts_equal_bytes_on_the_8_nics_of_every_node(n):
    """NVLS-tree (Simple, NCCL's chunking): channels 2r and 2r+1 (trees 0 and 1) ride NIC
    r, and a node plays the same role in a tree on every rail, so all 8 NICs of a node send
    the same bytes and receive the same bytes (a node's total depends on its place in the
    trees: interior nodes forward more)."""
    g = expand("allreduce", 128 * MiB, range(n), Placement(n, 8), system=H100)
    assert (g.algorithm, g.protocol, g.channels) == ("nvls_tree", "simple", 16)
    sent, received = _nic_bytes(g)
    sent, received = sent.reshape(-1, 8), received.reshape(-1, 8)
    assert sent.min() > 0 and received.min() > 0
    assert (sent == sent[:, :1]).all() and (received == received[:, :1]).all()
    # per channel (1/16 of the buffer) every non-root node has one up and one down edge
    assert sent.sum() == received.sum() == 2 * (n // 8 - 1) * 128 * MiB
