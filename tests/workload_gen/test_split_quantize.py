"""The expert GEMM inputs' quantize kernels (costs.split_quantize_kernels), counted by hand from
Transformer Engine's split_quantize (TransformerEngine@d0067d0d, csrc/extensions/cast.cpp and
csrc/quantizer.cpp): delayed scaling is one fused multi-tensor cast for every split; current
scaling quantizes each split with four kernels (the amax buffer zeroed, the amax, the scale,
the cast: common/recipe/current_scaling.cu launches zero_amax_kernel before the amax); MXFP8 and blockwise one
kernel per split; NVFP4 one fused kernel when the width is a multiple of 128. Under MXFP8
GroupedLinear writes GEMM-swizzled scales, and TE v2.12-v2.16 zero-fills a split's row- and
column-wise scale buffers (two memsets) unless it is whole 128 x 128 tiles
(common/cast/mxfp8/quantize_mxfp8.cuh); a GEMM then swizzles the weights' scales, one
multi-tensor kernel per 64 experts (csrc/extensions/gemm.cpp, common/swizzle/swizzle.cu)."""
from __future__ import annotations

from dataclasses import replace

import pytest

from compute_profile.estimator import explain, load_params
from workload_gen import build
from workload_gen.core.model_presets import get_preset
from workload_gen.core.parallel_config import ParallelConfig
from workload_gen.core.records import ComputeOp
from workload_gen.costs import split_quantize_kernels


@pytest.mark.parametrize("dtype, recipe, splits, width, want", [
    ("fp8", "delayed", 8, 2048, 1),
    ("fp8", "tensorwise", 8, 2048, 32),
    ("fp8", "mxfp8", 16, 2048, 16 * 3),  # rows of no known alignment: two memsets per split
    ("fp8", "blockwise", 4, 7168, 4),
    ("fp4", "tensorwise", 8, 2048, 1),
    ("fp4", "tensorwise", 8, 2880, 8),  # 2880 % 128 != 0: TE falls back to one kernel per split
])
def test_kernels_per_recipe(dtype, recipe, splits, width, want):
    assert split_quantize_kernels(dtype, recipe, splits, width) == want


@pytest.mark.parametrize("row_align, rows, width, buffers, want", [
    (32, None, 2048, 2, 16 * (1 + 2 * 3 / 4)),  # rows a multiple of 32: 3 of the 4 residues mod 128 pay
    (16, None, 2048, 2, 16 * (1 + 2 * 7 / 8)),
    (32, None, 2048, 1, 16 * (1 + 3 / 4)),      # a column-wise-only requantize: one buffer
    (32, 4096, 2048, 2, 16),                    # a fixed count of whole tiles: no memset
    (32, 4000, 2048, 2, 16 * 3),
    (32, None, 2880, 2, 16 * 3),                # a width that is not whole tiles: always
])
def test_mxfp8_memsets_by_alignment(row_align, rows, width, buffers, want):
    got = split_quantize_kernels("fp8", "mxfp8", 16, width, row_align, rows, scale_buffers=buffers)
    assert got == round(want)


def test_mxfp8_expert_casts_hold_memsets_and_the_weight_swizzle():
    """DeepSeek-V3-like experts under MXFP8 with HybridEP (rows padded to 32 per expert): 32
    local experts at EP 8, each cast 32 x (1 + 2 x 3/4) = 80 quantize kernels and memsets plus
    one swizzle launch for the 32 weights (at most 64 per launch)."""
    model = replace(get_preset("qwen3-30b-a3b"), num_layers=1, num_experts=256)
    par = ParallelConfig(world_size=8, ep=8, global_batch=8, micro_batch=1, seq_length=4096, dtype="fp8",
                         fp8_recipe="mxfp8", moe_token_dispatcher="flex", moe_flex_dispatcher_backend="hybridep")
    w = build(model, par)
    casts = [op for _, _, op in w.ops() if type(op) is ComputeOp and op.name.startswith("expert_") and
             op.name.endswith(".fp8_cast")]
    assert casts and all(op.shape[2] == 80 + 1 for op in casts)


def test_qwen3_expert_casts_carry_their_kernels_and_pay_a_launch_each():
    """Qwen3-30B-A3B, EP 16: 128 / 16 = 8 local experts; tensorwise FP8: 32 kernels per cast."""
    model = replace(get_preset("qwen3-30b-a3b"), num_layers=1)
    par = ParallelConfig(world_size=16, ep=16, global_batch=16, micro_batch=1, seq_length=4096, dtype="fp8",
                         fp8_recipe="tensorwise", moe_token_dispatcher="flex", moe_flex_dispatcher_backend="hybridep")
    w = build(model, par)
    casts = [op for _, _, op in w.ops() if type(op) is ComputeOp and op.name.startswith("expert_") and
             op.name.endswith(".fp8_cast")]
    assert casts and all(len(op.shape) == 3 and op.shape[2] == 32 for op in casts)
    p = load_params("h100-sxm")
    for op in casts:
        assert explain(op, "h100-sxm", p).launch_s == pytest.approx(32 * p.launch_overhead_s)
    # a dense layer's cast is one quantize: its four kernels (tokens x width x 4)
    dense = [op for _, _, op in w.ops() if type(op) is ComputeOp and op.name.endswith(".fp8_cast")
             and not op.name.startswith("expert_")]
    assert dense and all(len(op.shape) == 3 and op.shape[2] == 4 for op in dense)
    for op in dense:
        assert explain(op, "h100-sxm", p).launch_s == pytest.approx(4 * p.launch_overhead_s)
