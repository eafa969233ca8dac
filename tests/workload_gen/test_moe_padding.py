"""Quantization padding of the experts' rows (workload_gen.core.moe_padding), checked against
Megatron-LM's and Transformer Engine's code as read (Megatron-LM d98e8a64 experts.py
TEGroupedMLP.forward and moe_utils.skip_routed_expert_padding; TE d0067d0d
module/fp8_padding.py): who copies, how many bytes, and the alignment per recipe."""
from __future__ import annotations

from dataclasses import replace

import pytest

from workload_gen import build
from workload_gen.core.errors import ConfigError
from workload_gen.core.model_presets import get_preset
from workload_gen.core.moe_padding import experts_pad, quantization_align
from workload_gen.core.parallel_config import ParallelConfig
from workload_gen.core.records import CollectiveOp, ComputeOp, Phase

QWEN3 = replace(get_preset("qwen3-30b-a3b"), num_layers=1)  # h 2048, 128 experts, top-8
EP, T = 8, 4096


def _par(**kw) -> ParallelConfig:
    base = dict(world_size=EP, ep=EP, global_batch=EP, micro_batch=1, seq_length=T, dtype="fp8",
                fp8_recipe="tensorwise", moe_permute_fusion=True, moe_load_imbalance=1.0)
    return ParallelConfig(**{**base, **kw})


def _ops(par: ParallelConfig, name: str) -> list[ComputeOp]:
    return [op for _, _, op in build(QWEN3, par).ops() if type(op) is ComputeOp and op.name == name]


@pytest.mark.parametrize("dtype, recipe, want", [
    ("fp8", "mxfp8", 32), ("fp8", "tensorwise", 16), ("fp8", "delayed", 16), ("fp8", "blockwise", 16),
    ("fp4", "tensorwise", 128), ("bf16", "tensorwise", 0),
])
def test_alignment_is_megatrons(dtype, recipe, want):
    """fp8_utils.get_fp8_align_size: 32 for MXFP8, else 16; fp4_utils.get_fp4_align_size: 128."""
    assert quantization_align(dtype, recipe) == want


def test_alltoall_fp8_copies_every_routed_row_in_and_out_both_ways():
    """Forced-balance rows per rank: T*k = 32,768, over 16 local experts each padded to 16 rows
    on average 7.5 more; pad copies hidden (bf16) and fp32 probs, unpad the hidden only."""
    rows, h = T * 8, 2048
    padded = rows + 16 * 15 / 2
    pad, unpad = _ops(_par(), "expert_pad"), _ops(_par(), "expert_unpad")
    assert sorted(op.phase for op in pad) == sorted([Phase.FWD, Phase.BWD_INPUT])
    assert sorted(op.phase for op in unpad) == sorted([Phase.FWD, Phase.BWD_INPUT])
    for op in pad:
        assert op.bytes == pytest.approx((rows + padded) * (h * 2 + 4))
        assert op.shape == (rows, h, 2)  # two kernels: hidden states and probabilities
    for op in unpad:
        assert op.bytes == pytest.approx((rows + padded) * h * 2)
        assert op.shape == (rows, h, 1)


def test_pad_sits_between_the_permutation_and_fc1_and_unpad_after_fc2():
    w = build(QWEN3, _par())
    fwd = [op.name for _, _, op in w.ops() if op.phase is Phase.FWD and op.layer == 0]
    assert fwd.index("sort_chunks") < fwd.index("expert_pad") < fwd.index("expert_fc1.fp8_cast")
    assert fwd.index("expert_fc2") < fwd.index("expert_unpad") < fwd.index("unsort_chunks")


@pytest.mark.parametrize("kw", [
    dict(dtype="bf16"),  # nothing quantized
    dict(moe_token_dispatcher="flex", moe_flex_dispatcher_backend="hybridep"),  # pads in its dispatch
    dict(moe_router_padding_for_quantization=True),  # the router's map is already aligned
    # drop-and-pad: capacity ceil(4096*8/128) = 256 per expert and rank, x EP 8 = 2048 rows: aligned
    dict(moe_expert_capacity_factor=1.0, moe_pad_expert_input_to_capacity=True),
])
def test_no_copy_where_megatron_skips_it(kw):
    assert not _ops(_par(**kw), "expert_pad") and not _ops(_par(**kw), "expert_unpad")


def test_deepep_pads_like_alltoall():
    """DeepEP's fused permute pads only for TE's grouped-tensor path (moe_use_grouped_tensor),
    which the recipes do not set: the expert module copies."""
    assert _ops(_par(moe_token_dispatcher="flex", moe_flex_dispatcher_backend="deepep"), "expert_pad")


def test_an_unaligned_capacity_still_copies():
    """Capacity ceil(32768/128 * 1.001) = 257 per expert and rank, x EP 8 = 2,056 rows per
    expert: not a multiple of MXFP8's 32 (nor of 16), so TE pads."""
    assert experts_pad(32, None, False, 2056.0)
    assert not experts_pad(32, None, False, 2048.0)
    assert _ops(_par(fp8_recipe="mxfp8", moe_expert_capacity_factor=1.001, moe_pad_expert_input_to_capacity=True),
                "expert_pad")


def test_router_padding_sends_the_padding_slots():
    """--moe-router-padding-for-quantization: each of the 128 experts' counts from this rank
    rounded up to 16 adds 7.5 rows on average, 960 rows of h bf16 through the dispatch."""
    def dispatch_bytes(par):
        return next(op.bytes for _, _, op in build(QWEN3, par).ops()
                    if isinstance(op, CollectiveOp) and op.name == "dispatch_a2a" and op.phase is Phase.FWD)
    extra = dispatch_bytes(_par(moe_router_padding_for_quantization=True)) - dispatch_bytes(_par())
    assert extra == 960 * 2048 * 2


def test_router_padding_refusals():
    """Megatron-Core TransformerConfig.__post_init__ (d98e8a64): fp8/fp4 required, allgather refused.
    (Both flag spellings: tests/workload_gen/test_moe_flags.py.)"""
    with pytest.raises(ConfigError, match="needs fp8 or fp4"):
        _par(dtype="bf16", moe_router_padding_for_quantization=True)
    with pytest.raises(ConfigError, match="allgather"):
        _par(moe_token_dispatcher="allgather", moe_router_padding_for_quantization=True)

