"""Per-tensor fp8 on a GPU whose FP8 GEMMs take any layout (Blackwell, compute capability 10.x):
Transformer Engine writes and keeps a Float8Tensor's data alone (TE 2.14 quantizer.cpp:
with_transpose = columnwise_usage && !is_non_tn_fp8_gemm_supported), so a quantize moves one
byte per element fewer than Hopper's cast-transpose, and the gathered weights need no transpose."""
from __future__ import annotations

import pytest

from compute_profile.attaching import attach, fp8_run_params
from compute_profile.estimator import explain, load_params
from workload_gen import build, costs
from workload_gen.core.gpu_specs import get_gpu
from workload_gen.core.model_config import ModelConfig
from workload_gen.core.parallel_config import ParallelConfig
from workload_gen.core.records import FP8_PARAM_TRANSPOSE_OP, ComputeOp, OpKind, Phase


@pytest.mark.parametrize("gpu, any_layout", [("h100-sxm", False), ("h200", False), ("a100", False), ("b200", True),
                                             ("gb200", True), ("b300", True), ("gb300", True)])
def test_compute_capability_decides(gpu, any_layout):
    """Hopper (9.0) and Ampere (8.0) take TN only; Blackwell 10.0 and Blackwell Ultra 10.3 any."""
    assert get_gpu(gpu).fp8_gemm_any_layout is any_layout


@pytest.mark.parametrize("recipe, gpu, copies", [("tensorwise", "b200", False), ("delayed", "gb300", False),
                                                 ("mxfp8", "b200", True), ("tensorwise", "h100-sxm", True)])
def test_only_a_per_tensor_run_on_such_a_gpu_drops_the_transposed_copy(recipe, gpu, copies):
    p = fp8_run_params(load_params(get_gpu(gpu).name), recipe, get_gpu(gpu))
    assert p.fp8_transpose_copies is copies


def test_a_current_scaling_quantize_on_blackwell_moves_five_bytes_per_element():
    """Hand count: amax read 2 + cast read 2 + data write 1 = 5 B per element on B200, against
    the workload's 6 (Hopper's data and transpose); the memory term follows, the launches stay
    the four kernels."""
    rows, cols = 8192, 4096
    op = ComputeOp("fc1.fp8_cast", 0, Phase.FWD, OpKind.ELEMENTWISE, (rows, cols, 4), "bf16",
                   *costs.fp8_cast(rows, cols, "tensorwise"))
    assert op.bytes == 6 * rows * cols
    hopper = load_params("b200")
    blackwell = fp8_run_params(hopper, "tensorwise", get_gpu("b200"))
    a, b = explain(op, "b200", hopper), explain(op, "b200", blackwell)
    assert b.memory_s == pytest.approx(a.memory_s * 5 / 6, rel=1e-12)
    assert b.launch_s == a.launch_s == pytest.approx(4 * hopper.launch_overhead_s)
    transpose = ComputeOp(FP8_PARAM_TRANSPOSE_OP, -1, Phase.ITERATION, OpKind.ELEMENTWISE, (1 << 20, 1), "fp8",
                          *costs.fp8_transpose(1 << 20))
    assert explain(transpose, "b200", blackwell).memory_s == 0.0 < explain(transpose, "b200", hopper).memory_s


def test_attach_prices_a_blackwell_tensorwise_run_lighter_and_leaves_mxfp8_alone():
    """A tiny FP8 workload attached on B200: each per-tensor cast takes less than the estimator
    gives it with Hopper's copies kept (the workload's bytes as built); MXFP8's casts keep both
    directions and take exactly that."""
    model = ModelConfig(num_layers=1, hidden_size=1024, num_attention_heads=8, vocab_size=1024)
    hopper_copies = load_params("b200")
    assert hopper_copies.fp8_transpose_copies
    for recipe in ("tensorwise", "mxfp8"):
        w = build(model, ParallelConfig(world_size=1, dtype="fp8", fp8_recipe=recipe, seq_length=2048,
                                        global_batch=1))
        got, _ = attach(w, "b200")
        casts = [op for _, _, op in got.ops() if isinstance(op, ComputeOp) and op.name.endswith(".fp8_cast")]
        assert casts
        for op in casts:
            full = explain(op, "b200", hopper_copies).time_s
            if recipe == "tensorwise":
                assert op.time_s < full
            else:
                assert op.time_s == pytest.approx(full, rel=1e-12)
