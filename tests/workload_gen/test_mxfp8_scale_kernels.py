"""MXFP8 linears on Blackwell launch more than their quantize kernel: cuBLAS reads block scales
in a swizzled layout, and Transformer Engine v2.12-v2.16 swizzles every GEMM operand whose
scales were not written that way, a kernel each, every call (csrc/extensions/gemm.cpp
``swizzle_scales_for_gemm``). Inputs and output gradients are quantized with swizzled scales
unless a sequence-parallel all-gather assembled them (module/linear.py: ``optimize_for_gemm``
except column-parallel input / row-parallel gradient under SP); weights never are. Counted by
hand per te.Linear pass (the quantize op's third shape entry):

- no SP: forward = quantize X + swizzle W (fprop) = 2; backward = quantize dY + swizzle W
  (dgrad) = 2;
- column-parallel under SP: forward + the gathered X for fprop = 3; backward + the gathered
  X's column-wise copy for wgrad = 3;
- row-parallel under SP: forward 2; backward + the gathered dY for dgrad and for wgrad = 4.
A quantized operand with swizzled scales that is not whole 128 x 128 tiles adds two memsets."""
from __future__ import annotations

from dataclasses import replace

import pytest

from workload_gen import build
from workload_gen.core.model_presets import get_preset
from workload_gen.core.parallel_config import ParallelConfig
from workload_gen.core.records import ComputeOp, Phase


def _casts(tp: int, sp: bool, recipe: str = "mxfp8", seq: int = 4096) -> dict[tuple[str, Phase], tuple[int, ...]]:
    model = replace(get_preset("llama3-8b"), num_layers=1)
    par = ParallelConfig(world_size=tp, tp=tp, sp=sp, global_batch=1, micro_batch=1, seq_length=seq,
                         dtype="fp8", fp8_recipe=recipe)
    return {(op.name, op.phase): op.shape for _, _, op in build(model, par).ops()
            if type(op) is ComputeOp and op.name.endswith(".fp8_cast") and op.layer == 0}


def test_no_sp_each_pass_adds_the_weight_swizzle():
    for (name, phase), shape in _casts(1, False).items():
        assert shape[2] == 2, (name, phase)


def test_sequence_parallel_adds_the_gathered_operands():
    casts = _casts(2, True)
    want = {("qkv", Phase.FWD): 3, ("qkv", Phase.BWD_INPUT): 3, ("fc1", Phase.FWD): 3, ("fc1", Phase.BWD_INPUT): 3,
            ("proj", Phase.FWD): 2, ("proj", Phase.BWD_INPUT): 4, ("fc2", Phase.FWD): 2, ("fc2", Phase.BWD_INPUT): 4}
    for (name, phase), k in want.items():
        assert casts[(f"{name}.fp8_cast", phase)][2] == k, (name, phase)


def test_rows_not_whole_tiles_add_two_memsets():
    """4000 tokens: not a multiple of 128, so each quantize with swizzled scales zero-fills its
    two scale buffers first (common/cast/mxfp8/quantize_mxfp8.cuh)."""
    for (name, phase), shape in _casts(1, False, seq=4000).items():
        assert shape[2] == 2 + 2, (name, phase)


@pytest.mark.parametrize("recipe, kernels", [("tensorwise", 4), ("delayed", 1)])
def test_per_tensor_scales_need_no_swizzle(recipe, kernels):
    """No swizzle or memset: a delayed-scaling quantize is its one cast kernel; a current-scaling
    one is its four (zero the amax, the amax, the scale, the cast: TE's
    Float8CurrentScalingQuantizer::quantize_impl), whatever the tensor-parallel gathers."""
    casts = _casts(2, True, recipe).values()
    assert all((len(shape) == 2 if kernels == 1 else shape[2] == kernels) for shape in casts)


@pytest.mark.parametrize("experts, launches", [(8, 1), (64, 1), (65, 2), (256, 4)])
def test_a_grouped_gemm_swizzles_its_weights_64_at_a_time(experts, launches):
    """TE v2.14's multi-tensor swizzle kernel takes at most 64 tensors (common/swizzle/swizzle.cu,
    kMaxTensorsPerKernel): ceil(E / 64) launches per GroupedLinear GEMM call, whichever pass."""
    from workload_gen.costs import mxfp8_swizzle_kernels

    assert mxfp8_swizzle_kernels(False, experts=experts) == launches
    assert mxfp8_swizzle_kernels(True, experts=experts) == launches
