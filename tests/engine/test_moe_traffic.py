"""The flex dispatcher's traffic across nodes: one RDMA copy per remote node holding one of a
token's experts (DeepEP internode, HybridEP), checked against a seeded Monte-Carlo draw of
uniform routing and against the analytical all-to-all's split of bytes by node."""
from __future__ import annotations

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
