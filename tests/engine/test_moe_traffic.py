"""The flex dispatcher's traffic across nodes: one RDMA copy per remote node holding one of a
token's experts (DeepEP internode, HybridEP), checked against a seeded Monte-Carlo draw of
uniform routing and against the analytical all-to-all's split of bytes by node."""
from __future__ import annotations

import math
import random
from dataclasses import replace

import pytest

from engine.moe_traffic import hierarchical_dispatch, remote_node_copies
from workload_gen.builder import build
from workload_gen.core.model_presets import get_preset
from workload_gen.core.parallel_config import ParallelConfig
from workload_gen.core.records import CollectiveOp, Group


def _mc_remote_nodes(E, k, nodes, groups=None, gtopk=None, draws=20000, seed=3):
    rng = random.Random(seed)
    per_node, total = E // nodes, 0
    for _ in range(draws):
        if groups:
            size = E // groups
            pool = [g * size + i for g in rng.sample(range(groups), gtopk) for i in range(size)]
        else:
            pool = range(E)
        hit = {e // per_node for e in rng.sample(pool, k)}
        total += len(hit - {0})  # this rank's own node is node 0 (by symmetry any node)
    return total / draws


@pytest.mark.parametrize("E, k, ep, nodes, groups, gtopk", [
    (128, 8, 16, 2, None, None),   # Qwen3-30B-A3B, EP 16 over two 8-GPU nodes
    (256, 8, 32, 4, 8, 4),         # DeepSeek-V3, EP 32 over 4 nodes, top-4 of 8 groups
    (256, 8, 64, 8, 8, 4),         # DeepSeek-V3 as its report runs it: EP 64 over 8 nodes, <= 4 nodes
])
def test_remote_node_copies_match_monte_carlo(E, k, ep, nodes, groups, gtopk):
    exact = remote_node_copies(E, k, ep, nodes, groups, gtopk)
    assert exact == pytest.approx(_mc_remote_nodes(E, k, nodes, groups, gtopk), rel=0.02)
    if gtopk:
        assert exact <= gtopk  # node-limited routing: at most that many nodes (groups = nodes here or finer)


def _qwen(dispatcher="flex", world=16, ep=16):
    model = replace(get_preset("qwen3-30b-a3b"), num_layers=2)
    par = ParallelConfig(world_size=world, ep=ep, global_batch=world, micro_batch=1, seq_length=4096,
                         moe_token_dispatcher=dispatcher, moe_load_imbalance=1.0)  # even ranks: hand counts
    return build(model, par)


def _a2a_bytes(w):
    return {op.bytes for st in w.stages for ch in st.chunks for op in ch.forward + ch.backward
            if isinstance(op, CollectiveOp) and op.group is Group.EP}


def test_internode_flex_dispatch_moves_one_copy_per_remote_node():
    """EP 16 over two 8-GPU nodes: the analytical all-to-all sends (n-k)/n = 1/2 of its bytes
    over the NICs; the op is resized so that this share is T*h*b*R, R the expected remote
    copies (here ~1: with top-8 of 128 experts nearly every token needs the other node)."""
    w = _qwen()
    (nbytes,) = _a2a_bytes(hierarchical_dispatch(w, 8))
    R = remote_node_copies(128, 8, 16, 2)
    assert R == pytest.approx(1 - 0.5 ** 8, rel=0.05)  # rough: the other node's 64 experts all missed
    assert nbytes * (16 - 8) / 16 == pytest.approx(4096 * 2048 * 2 * R, rel=1e-6)
    assert nbytes < max(_a2a_bytes(w))  # fewer bytes than one copy per distinct rank


def test_single_node_and_alltoall_are_unchanged():
    one_node = _qwen(world=8, ep=8)
    assert hierarchical_dispatch(one_node, 8) is one_node
    nccl = _qwen(dispatcher="alltoall")
    assert hierarchical_dispatch(nccl, 8) is nccl


def test_flex_kernel_rates_are_the_published_tables_read_at_their_byte_count():
    """HybridEP's H100 table (16 SMs, torch API) and DeepEP's H800 table count the sender's own
    node as an RDMA destination, so (nodes - 1) / nodes of their bytes cross a 50 GB/s NIC:
    by hand, HybridEP at EP 16 (2 nodes): (54.47 + 53.35) / 2 x 1/2 / 50 = 0.539; DeepEP at EP 32
    (4 nodes): (58 + 57) / 2 x 3/4 / 50 = 0.8625; at EP 64 (8 nodes): (51 + 50) / 2 x 7/8 / 50."""
    from engine.moe_traffic import flex_rdma_efficiency

    assert flex_rdma_efficiency("hybridep", 2) == pytest.approx((54.47 + 53.35) / 2 / 2 / 50, rel=1e-12)
    assert flex_rdma_efficiency("deepep", 4) == pytest.approx((58 + 57) / 2 * 0.75 / 50, rel=1e-12)
    assert flex_rdma_efficiency("deepep", 8) == pytest.approx((51 + 50) / 2 * 0.875 / 50, rel=1e-12)
    for backend in ("hybridep", "deepep"):
        rates = [flex_rdma_efficiency(backend, n) for n in (1, 2, 3, 4, 5, 8, 16, 72)]
        assert all(0 < r < 1 for r in rates)
        assert rates == sorted(rates)  # more nodes, more of the wire: the published trend
        assert flex_rdma_efficiency(backend, 3) < flex_rdma_efficiency(backend, 4)


def test_the_backend_times_the_rdma_volume_at_the_kernels_rate():
    """Given the NIC efficiency the all-to-all path assumes, the bytes grow by it over the
    kernels' rate, so bytes / (line x nic_efficiency) = RDMA volume / (line x kernel rate).
    By hand: flex's default backend, DeepEP, at EP 16 over 2 nodes reaches 43 GB/s x 1/2 of
    a 50 GB/s NIC (its table), so the bytes grow by 0.92 / 0.43."""
    w = _qwen()
    assert w.parallel.flex_backend == "deepep"
    (plain,) = _a2a_bytes(hierarchical_dispatch(w, 8))
    (timed,) = _a2a_bytes(hierarchical_dispatch(w, 8, nic_efficiency=0.92))
    assert timed / plain == pytest.approx(0.92 / (43 / 2 / 50), rel=1e-6)


def _bench_shaped(backend="hybridep", sms=16, world=8):
    """The flex kernels' benchmark as a workload: 4096 tokens of hidden 7168 per rank, top-8,
    8 experts per rank (DeepEP's README_Hybrid-EP.md tables), force-balanced routing."""
    model = replace(get_preset("qwen3-30b-a3b"), num_layers=2, hidden_size=7168, num_experts=8 * world,
                    moe_router_topk=8)
    par = ParallelConfig(world_size=world, ep=world, global_batch=world, micro_batch=1, seq_length=4096,
                         moe_token_dispatcher="flex", moe_flex_dispatcher_backend=backend,
                         moe_hybridep_num_sms=sms, moe_load_imbalance=1.0)
    return build(model, par)


def _flex_ops(w):
    from engine.passes import is_flex_kernel

    return [op for st in w.stages for ch in st.chunks for op in ch.forward + ch.backward
            if isinstance(op, CollectiveOp) and is_flex_kernel(op)]


@pytest.mark.parametrize("system, backend, sms, published", [
    ("b200", "hybridep", 16, (550.10, 538.44)),    # GB200 table, 8 ranks, 16 SMs
    ("gb200-nvl72", "hybridep", 32, (545.71, 568.94)),
    ("b300", "deepep", 24, (512.72, 425.95)),
])
def test_inside_an_nvlink5_domain_the_flex_kernels_take_their_published_time(system, backend, sms, published):
    """At the benchmark's own shape the analytical backend times HybridEP's and DeepEP's
    dispatch and combine at the published torch-API rate: a rank's received bytes, its own
    tokens included, T x D x h x 2 with D the distinct ranks of a token's top-8 among 64
    experts on 8 ranks (1 - C(56,8)/C(64,8) of 8 ranks), over the mean of the dispatch and
    combine rates. NCCL's all-to-all on the same bytes is faster."""
    from math import comb

    from engine.moe_traffic import nvlink_dispatch
    from network.analytical import AnalyticalBackend
    from workload_gen.core.system import get_system

    sysc = get_system(system).for_job(8)
    w = _bench_shaped(backend, sms)
    D = 8 * (1 - comb(56, 8) / comb(64, 8))
    S = 4096 * 7168 * 2 * D
    plain = _flex_ops(w)
    (nbytes,) = {op.bytes for op in plain}
    assert nbytes == pytest.approx(S, rel=1e-4)  # the workload's own count (whole rows) is the benchmark's
    timed = _flex_ops(nvlink_dispatch(w, sysc))
    net = AnalyticalBackend(sysc, 8)
    ranks = tuple(range(8))
    want = nbytes / (sum(published) / 2 * 1e9)
    for op in timed:
        assert net.collective_time(op, ranks) == pytest.approx(want, rel=1e-5)  # whole rows vs expected D
    assert net.collective_time(plain[0], ranks) < want


def test_the_published_nvlink_rates_are_read_between_and_beyond_their_points():
    """Linear in SMs between the published 16 and 32, log-linear in ranks between 8 and 16,
    held past the last published point (36 ranks, 32 SMs)."""
    from engine.moe_traffic import flex_nvlink_rate

    assert flex_nvlink_rate("hybridep", 8, 24) == pytest.approx(
        ((550.10 + 538.44) / 2 + (545.71 + 568.94) / 2) / 2 * 1e9, rel=1e-12)
    r8, r16 = ((550.10 + 538.44) / 2, (472.84 + 474.48) / 2)
    assert flex_nvlink_rate("hybridep", 11, 16) == pytest.approx(
        (r8 + (r16 - r8) * (math.log2(11) - 3)) * 1e9, rel=1e-12)
    assert flex_nvlink_rate("hybridep", 64, 48) == flex_nvlink_rate("hybridep", 36, 32)
    assert flex_nvlink_rate("ncclep", 8, 16) is None


def test_nvlink4_and_multi_domain_groups_keep_their_own_timing():
    """No intra-node figure exists for H100's NVLink 4 (Megatron-LM's H100 MoE layer baselines
    agree with NCCL's rate there), and a group spanning nodes is sized by its RDMA share."""
    from engine.moe_traffic import nvlink_dispatch
    from workload_gen.core.system import get_system

    w = _bench_shaped()
    assert nvlink_dispatch(w, get_system("h100")) is w
    two_nodes = _bench_shaped(world=16)
    assert nvlink_dispatch(two_nodes, get_system("b200").for_job(16)) is two_nodes


def test_a_sized_workload_is_not_sized_again():
    """A result's workload run again (serve-web draws its timeline that way) keeps its dispatch
    bytes: the NVLink 5 sizing marks the workload and applies once."""
    from engine.moe_traffic import nvlink_dispatch
    from workload_gen.core.system import get_system

    sysc = get_system("b200").for_job(8)
    once = nvlink_dispatch(_bench_shaped(), sysc)
    assert nvlink_dispatch(once, sysc) is once
    assert [op.bytes for op in _flex_ops(once)] != [op.bytes for op in _flex_ops(_bench_shaped())]
