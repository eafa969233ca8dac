"""MoE memory (engine/memory.py) against bytes counted by hand: the busiest EP rank's saved
activations (workload_gen/core/moe_routing.py's factor), each dispatcher's buffers, DeepEP's
and HybridEP's persistent buffers as their code sizes them, and the memory table's temporary
term that the 'DOES NOT FIT' check reads.

DeepSeek-V3's MoE layer throughout: hidden h = 7168, 256 experts, top-8, expert FFN 2048
(SwiGLU), one 4096-token sequence per micro-batch, bf16, TP 1."""
from __future__ import annotations

import pytest

from engine import estimate_memory
from engine.memory import (
    deepep_buffer_bytes,
    dispatcher_transient_bytes,
    dispatcher_workspace_bytes,
    hybridep_buffer_bytes,
    layer_activation_bytes,
)
from workload_gen.builder import build
from workload_gen.core.model_config import ModelConfig
from workload_gen.core.model_presets import get_preset
from workload_gen.core.moe_dispatch import rank_hit_probability
from workload_gen.core.moe_routing import LEARNED_RANK_IMBALANCE, rank_load_factor
from workload_gen.core.parallel_config import ParallelConfig

H, K, E, FE, T = 7168, 8, 256, 2048, 4096
DSV3 = get_preset("deepseek-v3")


def _par(ep: int = 8, pp: int = 1, **kw) -> ParallelConfig:
    return ParallelConfig(world_size=ep * pp, ep=ep, pp=pp, seq_length=T, global_batch=ep * pp, **kw)


# --- the busiest rank -----------------------------------------------------------------------

def test_alltoall_buffers_by_hand():
    """Each rank permutes its 4096 tokens x top-8 into a send buffer of T*k*h*2 bytes =
    4096*8*7168*2 = 469,762,048; the all-to-all receive buffer lives beside it, as large on
    an evenly loaded rank, the learned-routing prior's 1.2285x on the busiest one."""
    send = T * K * H * 2
    assert send == 469_762_048
    assert dispatcher_transient_bytes(DSV3, _par(moe_load_imbalance=1.0)) == 2 * send
    assert dispatcher_transient_bytes(DSV3, _par()) == pytest.approx(send * (1 + LEARNED_RANK_IMBALANCE))
    assert dispatcher_workspace_bytes(DSV3, _par()) == 0  # alltoall keeps nothing between layers


@pytest.mark.parametrize("imbalance", [1.25, 2.0])
def test_the_busiest_rank_saves_its_received_copies(imbalance):
    """Per received token copy the expert MLP saves its FC1 input (2h), the SwiGLU input
    (2 * 2 * 2048) and the FC2 input (2 * 2048): 26,624 bytes; what the rank sends does not
    grow with the imbalance."""
    even = layer_activation_bytes(DSV3, _par(moe_load_imbalance=1.0), 5).total
    busy = layer_activation_bytes(DSV3, _par(moe_load_imbalance=imbalance), 5).total
    per_copy = 2 * H + 2 * 2 * FE + 2 * FE
    assert per_copy == 26_624
    assert busy - even == pytest.approx((imbalance - 1) * T * K * per_copy)


def test_the_default_scaling_is_moe_routings_factor():
    for par in (_par(), _par(moe_router_force_load_balancing=True), _par(ep=64)):
        factor = rank_load_factor(DSV3, par, T)
        even = layer_activation_bytes(DSV3, ParallelConfig(**{**par.to_dict(), "moe_router_force_load_balancing": False,
                                                             "moe_load_imbalance": 1.0}), 5).total
        got = layer_activation_bytes(DSV3, par, 5).total
        assert got - even == pytest.approx((factor - 1) * T * K * 26_624)


# --- DeepEP and HybridEP: the buffers their code allocates -----------------------------------

def test_deepep_buffer_matches_megatrons_get_buffer():
    """Megatron fused_a2a.py ``get_buffer``: the max over DeepEP's dispatch and combine
    configs of ``get_nvl_buffer_size_hint`` / ``get_rdma_buffer_size_hint`` (DeepEP dd758caf
    csrc/legacy/config.hpp L53-98; configs deep_ep/buffers/legacy.py L233-290), hidden bytes
    7168*2, Megatron's default 20 SMs = 10 channels. A token slot: 14336 + source meta 8 +
    128 top-k int64 indices and fp32 weights + 128 fp32 scales = 16,392 bytes.

    EP 8 (one node): 10 ch x 8 peers x (2*1+3) ints + 10 x 8 x 256 slots x 16,392, rounded
    to 128 bytes; no RDMA buffer. EP 64 (8 nodes): NVLink 10 x 8 x (2*8+3) x 4 + 10 x 8 x 288
    x 16,392; RDMA 10 x 8 x 18 x 2 x 4 + 10 x 8 x 128 x 2 x (16,392 + 16)."""
    slot = 14336 + 8 + 128 * 8 + 128 * 4 + 128 * 4
    assert slot == 16_392

    def up(n):
        return -(-n // 128) * 128

    assert deepep_buffer_bytes(2 * H, 8) == (up(10 * 8 * 5 * 4 + 10 * 8 * 256 * slot), 0)
    nvl, rdma = deepep_buffer_bytes(2 * H, 64)
    assert nvl == up(10 * 8 * 19 * 4 + 10 * 8 * 288 * slot) == 377_677_824
    assert rdma == up(10 * 8 * 18 * 2 * 4 + 10 * 8 * 128 * 2 * (slot + 16)) == 336_047_360


def test_hybridep_buffers_are_sized_for_every_token_on_one_rank():
    """DeepEP hybrid-ep 94a9f8f6 buffer/intranode.cu (L127: max tokens = tokens per rank x
    ranks per node x nodes): EP 8, 32 local experts: 32768 rows x (bf16 token 14336 + fp32
    probabilities 32 x 8 x 4 + fp32 scales 56 x 4) = 510,656,512 bytes; no RDMA within a node."""
    assert hybridep_buffer_bytes(H, T, 32, 8) == (32768 * (14336 + 1024 + 224), 0)
    assert hybridep_buffer_bytes(H, T, 32, 8)[0] == 510_656_512
    nvl, rdma = hybridep_buffer_bytes(H, T, 4, 64)  # 8 nodes of 8
    assert nvl == T * 64 * (2 * H + 4 * 8 * 4 + 56 * 4)
    assert rdma == (T * (2 * H + 4 * 64 * 4 + 56 * 4) + 7 * T * (2 * H + 32 * 4 + 56 * 4)
                    + 2 * 7 * T * (2 * H + 32 * 4))


def test_flex_and_allgather_dispatchers():
    """flex/deepep: the DeepEP buffer persists; the transient is DeepEP's recv_x, one row per
    distinct (token, rank): 8 ranks x 4096 tokens x P(a token hits the rank) x the busiest
    rank's factor. flex/hybridep: its buffers, nothing transient beyond the saved copies.
    allgather: 4096 x 8 gathered rows (Megatron's global buffer) and the as large unpermuted
    output before the reduce-scatter."""
    deepep = _par(moe_token_dispatcher="flex", moe_load_imbalance=1.0)
    assert dispatcher_workspace_bytes(DSV3, deepep) == sum(deepep_buffer_bytes(2 * H, 8))
    hit = rank_hit_probability(E, K, 8)
    assert hit == pytest.approx(1 - (224 * 223 * 222 * 221 * 220 * 219 * 218 * 217)
                                / (256 * 255 * 254 * 253 * 252 * 251 * 250 * 249))
    assert dispatcher_transient_bytes(DSV3, deepep) == pytest.approx(2 * H * 8 * T * hit)
    hybrid = _par(moe_token_dispatcher="flex", moe_flex_dispatcher_backend="hybridep")
    assert dispatcher_workspace_bytes(DSV3, hybrid) == 510_656_512
    assert dispatcher_transient_bytes(DSV3, hybrid) == 0
    allgather = _par(moe_token_dispatcher="allgather")
    assert dispatcher_workspace_bytes(DSV3, allgather) == dispatcher_transient_bytes(DSV3, allgather) == 2 * H * T * 8


# --- the memory table ------------------------------------------------------------------------

def test_dispatcher_buffers_count_in_temporary_on_stages_with_moe_layers():
    """PP 2 with DeepSeek-V3's 3 dense layers alone on stage 0: HybridEP's buffers are
    allocated by the first dispatch, so only stage 1 holds them; the table's temporary (and
    so the peak the 'DOES NOT FIT' check compares with the GPU) grows by exactly their size."""
    kw = {"ep": 8, "pp": 2, "first_stage_layers": 3}
    plain = estimate_memory(build(DSV3, _par(**kw)))
    hybrid_par = _par(**kw, moe_token_dispatcher="flex", moe_flex_dispatcher_backend="hybridep")
    hybrid = estimate_memory(build(DSV3, hybrid_par))
    assert hybrid[0] == plain[0]
    buffers = dispatcher_workspace_bytes(DSV3, hybrid_par)
    # stage 1's largest transient is the loss's logits, (2 + 4) x 4096 x 129280 bytes, above
    # either dispatcher's: the difference is the buffers alone
    loss = 6 * T * 129_280
    assert loss > dispatcher_transient_bytes(DSV3, _par(**kw)) > dispatcher_transient_bytes(DSV3, hybrid_par)
    assert hybrid[1].temporary - plain[1].temporary == round(buffers)
    assert hybrid[1].allocated_peak - plain[1].allocated_peak == round(buffers)


def test_dense_memory_ignores_every_moe_option():
    dense = ModelConfig(num_layers=4, hidden_size=256, num_attention_heads=4, vocab_size=512)
    base = ParallelConfig(world_size=8, tp=2, sp=True, pp=2, seq_length=256, global_batch=8)
    ref = estimate_memory(build(dense, base))
    for kw in ({"moe_token_dispatcher": "flex"}, {"moe_token_dispatcher": "allgather"},
               {"moe_load_imbalance": 2.0}, {"moe_router_force_load_balancing": True}):
        assert estimate_memory(build(dense, ParallelConfig(**{**base.to_dict(), **kw}))) == ref
    assert dispatcher_workspace_bytes(dense, base) == dispatcher_transient_bytes(dense, base) == 0
