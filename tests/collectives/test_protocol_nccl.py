"""The protocol and chunking follow NCCL for the whole collective (issue 15).

NCCL facts (NVIDIA/nccl src/graph/tuning.cc, src/enqueue.cc calcCollChunking,
src/transport/nvls.cc): NVLS and NVLS-tree run the Simple protocol only, on 16 channels
(Hopper), each channel cut over the node's heads; NVLS-tree's chunk is 64 KiB on >= 4
nodes (128 KiB below), halved for small buffers; the ring's Simple chunk is 4 steps of
512 KiB, every other algorithm's one step; the protocol of ring and tree is the one NCCL's
latency/bandwidth model predicts fastest for the whole buffer.
"""
from __future__ import annotations

from dataclasses import replace

import pytest

from collectives import expand
from collectives.protocol import (NVLS_CHANNELS, NcclTuning, nccl_protocol, nccl_protocol_time, nvls_chunk,
                                  nvls_pipeline)
from workload_gen.core.placement import Placement
from workload_gen.core.system import get_system, load_system
from workload_gen.core.units import KiB, MiB

H100 = get_system("h100")


# Flow size by hand: NCCL's NVLS chunk is NCCL_NVLS_CHUNKSIZE = 128 KiB below 4 nodes and
# nvlsTreeMaxChunkSize = 64 KiB from 4 nodes on; 16 NVLS channels x 8 heads = 128 lanes move
# in lock step on our 16 channels, so one flow carries 128 / 16 = 8 chunks.
@pytest.mark.parametrize("n, flow", [(8, 128 * KiB * 8), (16, 128 * KiB * 8), (512, 64 * KiB * 8)])
def test_large_nvls_all_reduce_runs_simple(n, flow):
    g = expand("allreduce", 128 * MiB, range(n), Placement(n, 8), system=H100)
    assert g.algorithm == ("nvls" if n == 8 else "nvls_tree")
    assert g.protocol == "simple"
    assert g.bytes.max() <= g.chunk_bytes
    assert set(g.bytes.tolist()) == {flow}


def test_small_nvls_all_reduce_still_simple_with_smaller_chunks():
    # 1 MiB (the smallest NVLS message of the auto rule) over 64 GPUs: NCCL's chunk halves to
    # 32 KiB (nBytes < concurrentOps x 64 KiB), still Simple, never LL
    g = expand("allreduce", MiB, range(64), Placement(64, 8), system=H100)
    assert (g.algorithm, g.protocol) == ("nvls_tree", "simple")
    assert nvls_chunk(MiB, heads=8, nodes=8) == 32 * KiB


def test_a_forced_protocol_is_kept():
    g = expand("allreduce", 128 * MiB, range(64), Placement(64, 8), protocol="ll", system=H100)
    assert g.protocol == "ll" and g.bytes.max() <= 32 * KiB


def _nvls_tree_edges_per_channel(nodes: int, gpn: int = 8) -> int:
    # per node: gpn reduces into the switch, switch -> head, head -> switch, gpn-1 multicasts;
    # across nodes: one up and one down edge per non-root node of the channel's tree
    return nodes * (gpn + 1 + 1 + gpn - 1) + 2 * (nodes - 1)


@pytest.mark.parametrize("n", [512, 1024])
def test_flow_count_of_the_dp_all_reduce_is_channels_x_chunks_x_edges(n):
    nodes = n // 8
    g = expand("allreduce", 128 * MiB, range(n), Placement(n, 8), system=H100)
    # NCCL: 16 channels x 8 heads = 128 lanes; chunk 64 KiB (>= 4 nodes): 128 MiB / 128 lanes
    # = 1 MiB per lane = 16 chunks. Our 16 channels each stand for 8 lanes: 16 flows of 512 KiB.
    assert nvls_chunk(128 * MiB, heads=8, nodes=nodes) == 64 * KiB
    assert nvls_pipeline(128 * MiB, 16, 8, nodes) == (16, 512 * KiB)
    assert g.channels == NVLS_CHANNELS == 16 and int(g.chunk.max()) + 1 == 16
    assert g.num_flows == 16 * 16 * _nvls_tree_edges_per_channel(nodes)
    assert g.num_flows == {512: 310_784, 1024: 622_080}[n]
    assert g.bytes.max() == 512 * KiB and g.chunk_bytes == 512 * KiB


def test_nvls_pipeline_depth_is_nccls_whatever_our_channel_count():
    # 1 GiB over 2 nodes: chunk 128 KiB (< 4 nodes), 16 x 8 lanes -> K = 1 GiB / (128 x 128 KiB) = 64
    assert nvls_pipeline(1 << 30, 16, 8, 2) == (64, MiB)
    assert nvls_pipeline(1 << 30, 8, 8, 2) == (64, 2 * MiB)


def test_ring_protocol_follows_nccls_model_of_the_whole_buffer():
    P = Placement(1024, 8)
    assert expand("allreduce", 8 * KiB, range(8), P, algorithm="ring").protocol == "ll"
    assert expand("allreduce", 1 << 30, range(8), P, algorithm="ring").protocol == "simple"
    # 1 GiB over 16 nodes: Simple (the bench case; the old per-slice rule agreed)
    assert expand("allreduce", 1 << 30, range(128), P, algorithm="ring", system=H100).protocol == "simple"
    # 128 MiB over 512 GPUs: 16 KiB per rank and channel made it LL (bandwidth capped at
    # 35 GB/s by llMaxBw); NCCL's model of the whole buffer picks LL128 there
    g = expand("allreduce", 128 * MiB, range(512), P, algorithm="ring", system=H100)
    assert (g.protocol, g.channels) == ("ll128", 8)


# tuning.cc by hand, ring all-reduce of 128 MiB over 64 nodes x 8 GPUs, 8 channels, bus
# bandwidth min(NVLink 360, 8 rails x 46) = 360 GB/s: 2 x 511 = 1022 steps, 2 x 63 = 126 of
# them across nodes; latency base + 896 intra-node steps + 126 network steps (us), bandwidth
# term 128 MiB / (bw x 512 / 1022). Across nodes LL's cap is the host CPU's row, not the
# GPU's: llMaxBws[Intel][> 2 nodes] = 20.4 GB/s.
_RING_512 = {
    "ll": (6.6 + 896 * 1.0 + 126 * 2.7) * 1e-6 + 128 * MiB * 1022 / (512 * 20.4e9),  # llMaxBw 20.4 GB/s
    "ll128": (14.0 + 896 * 1.9 + 126 * 4.0) * 1e-6 + 128 * MiB * 1022 / (512 * 8 * 36.7e9),  # 8 ch x 36.7
    "simple": (8.4 + 896 * 3.4 + 126 * 14.0) * 1e-6 + 128 * MiB * 1022 / (512 * 360e9),
}


@pytest.mark.parametrize("protocol, seconds", sorted(_RING_512.items()))
def test_ring_time_of_each_protocol_is_nccls_formula(protocol, seconds):
    """14.4 ms LL, 3.13 ms LL128, 5.56 ms Simple: LL128 is NCCL's pick for this buffer."""
    t = nccl_protocol_time("ring", "allreduce", 128 * MiB, 512, 64, 8, 360e9, protocol, 8)
    assert t == pytest.approx(seconds, rel=1e-9)


@pytest.mark.parametrize("nbytes, protocol", [
    # one node, 8 GPUs, 8 channels, 360 GB/s; 14 steps over NVLink. By hand (us):
    # LL 15.0 + S/80.6 kB/us, LL128 40.6 + S/167.8 kB/us, Simple 56.0 + S/205.7 kB/us:
    # LL below ~4 MB, LL128 to ~14 MB, Simple above
    (8 * KiB, "ll"),
    (1 * MiB, "ll"),     # 28.0 us against 46.9 (LL128) and 61.1 (Simple)
    (8 * MiB, "ll128"),  # 90.6 us against 119.1 (LL) and 96.8 (Simple)
    (64 * MiB, "simple"),  # 382.2 us against 440.6 (LL128)
    (1 << 30, "simple"),
])
def test_one_node_ring_protocol_by_size(nbytes, protocol):
    assert nccl_protocol("ring", "allreduce", nbytes, 8, 1, 8, 360e9, 8).name == protocol


def test_tree_simple_chunk_is_one_nccl_step():
    g = expand("allreduce", 1 << 30, range(64), Placement(64, 8), algorithm="tree", protocol="simple")
    assert g.bytes.max() == 512 * KiB


def test_the_caps_are_the_gpu_rows_of_tuning_cc_and_the_cpu_row_across_nodes():
    """tuning.cc's tables by compute capability (A100 8.0 Ampere, H100 9.0 Hopper, B200
    10.0 Blackwell); across nodes LL is capped by the host CPU's row (Intel: Volta's,
    AMD: Ampere's), whatever the GPU."""
    a100, h100, b200 = (NcclTuning.for_system(load_system(n)) for n in ("a100", "h100", "b200"))
    assert (a100.arch, h100.arch, b200.arch) == ("ampere", "hopper", "blackwell")
    assert a100.caps(1) == (87.7, 20.0, 24.0, 20.0)
    assert h100.caps(1) == (141.0, 36.7, 38.7, 36.7)
    assert b200.caps(1) == (282.0, 40.0, 70.0, 55.6)
    assert b200.caps(2) == (39.0, 40.0, 42.8, 31.67) and b200.caps(64)[0] == 20.4
    assert replace(b200, cpu_vendor="amd").caps(64)[0] == 19.0
    assert (h100.nvlink_busbw, b200.nvlink_busbw) == (360e9, 720e9)


@pytest.mark.parametrize("nbytes, hopper, blackwell", [
    # one node, 8 GPUs, 8 channels, ring all-reduce. Hopper (360 GB/s busbw, LL cap 141):
    # LL below ~4 MB, LL128 to ~14 MB, Simple above (see above). Blackwell (720 GB/s, LL cap
    # 282, LL128 8 x 40 GB/s): LL 15.0 + S/161.1 kB/us, LL128 40.6 + S/182.9 kB/us, Simple
    # 56.0 + S/411.4 kB/us by hand, so LL up to ~10.9 MB, Simple above, LL128 never.
    (1 * MiB, "ll", "ll"),          # B200: 21.5 us against 46.3 (LL128), 58.6 (Simple)
    (8 * MiB, "ll128", "ll"),       # B200: 67.1 us against 86.5 (LL128), 76.4 (Simple)
    (12 * MiB, "ll128", "simple"),  # H100: 115.6 against 117.2 (Simple); B200: 86.6 against 93.1 (LL)
])
def test_blackwell_moves_the_protocol_crossovers(nbytes, hopper, blackwell):
    h100, b200 = (NcclTuning.for_system(load_system(n)) for n in ("h100", "b200"))
    assert nccl_protocol("ring", "allreduce", nbytes, 8, 1, 8, h100.nvlink_busbw, 8, h100).name == hopper
    assert nccl_protocol("ring", "allreduce", nbytes, 8, 1, 8, b200.nvlink_busbw, 8, b200).name == blackwell
    # and the expander, given the system, asks the same model
    P = Placement(8, 8)
    assert expand("allreduce", nbytes, range(8), P, algorithm="ring", system=load_system("b200")).protocol == blackwell
