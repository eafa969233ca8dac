"""FP8 GEMMs measured with real torch kernels (torch._scaled_mm on the CPU), and which runs may use them.

What is checked against facts, not against the code:
- the timed call computes the product of its quantized operands (dequantize, multiply in fp32:
  the same numbers within bf16 output rounding);
- Megatron's ``--fp8-format hybrid`` (Transformer Engine's Format.HYBRID, NVIDIA's recipes):
  E4M3 for activations and weights, E5M2 for gradients, so the dgrad GEMM reads dY in E5M2 and
  the wgrad GEMM dY^T in E5M2;
- cuBLASLt's FP8 GEMM takes K and N in multiples of 16;
- a grouped GEMM is one GEMM per expert (Transformer Engine on Hopper);
- an MXFP8 run's GEMMs are block-scaled kernels: a per-tensor row must not time them.
"""
from __future__ import annotations

import io

import pytest
import torch
from cp_fixtures import gemm

from compute_profile.attaching import TimeResolver
from compute_profile.db import ProfileDB, ProfileRow
from compute_profile.estimator import estimate_time
from compute_profile.kernels import build_bench, fp8_gemm_bench
from compute_profile.measure import measure_workload
from workload_gen.core.model_config import ModelConfig
from workload_gen.core.parallel_config import ParallelConfig
from workload_gen.core.records import ChunkProgram, ComputeOp, OpKind, Phase, StageProgram, TimeSource, Workload

CPU = torch.device("cpu")
E4M3, E5M2 = torch.float8_e4m3fn, torch.float8_e5m2


@pytest.mark.parametrize("phase, formats", [(Phase.FWD, (E4M3, E4M3)), (Phase.BWD_INPUT, (E5M2, E4M3)),
                                            (Phase.BWD_WEIGHT, (E4M3, E5M2))], ids=lambda x: getattr(x, "value", ""))
def test_the_timed_call_is_the_product_of_its_quantized_operands(phase, formats):
    b = fp8_gemm_bench(torch, 24, 32, 48, phase, CPU)
    a, w = b.leaves
    assert (a.dtype, w.dtype) == formats
    assert a.shape == (24, 48) and w.shape == (32, 48)  # TN: both operands K-major
    out = b.step()
    assert out.dtype == torch.bfloat16 and out.shape == (24, 32)
    ref = a.float() @ w.float().t()
    assert torch.allclose(out.float(), ref, rtol=2 ** -7, atol=1e-2 * ref.abs().max().item())


def test_k_and_n_are_padded_to_cublas_fp8_alignment():
    b = fp8_gemm_bench(torch, 10, 24, 40, Phase.FWD, CPU)
    a, w = b.leaves
    assert a.shape == (10, 48) and w.shape == (32, 48)  # 40 -> 48, 24 -> 32; M is free
    assert "K/N padded to 48/32" in b.note
    assert "padded" not in fp8_gemm_bench(torch, 10, 32, 48, Phase.FWD, CPU).note


def test_a_grouped_fp8_gemm_is_one_call_per_expert():
    b = build_bench(torch, OpKind.GROUPED_GEMM, Phase.BWD_WEIGHT, (3, 16, 32, 48), "fp8", "expert_fc1", CPU)
    assert len(b.leaves) == 6 and "3 calls (one per expert)" in b.note
    assert b.step().shape == (16, 32)


def _fp8_workload(recipe: str) -> Workload:
    ops = [gemm("fc1", 32, 64, 48, dtype="fp8"), gemm("fc2", 32, 48, 64, dtype="fp8")]
    bwd = [gemm("fc1", 32, 48, 64, Phase.BWD_INPUT, dtype="fp8"), gemm("fc1", 64, 48, 32, Phase.BWD_WEIGHT, dtype="fp8")]
    model = ModelConfig(num_layers=1, hidden_size=48, num_attention_heads=4, vocab_size=1000)
    par = ParallelConfig(world_size=1, global_batch=1, micro_batch=1, seq_length=32, dtype="fp8", fp8_recipe=recipe)
    chunk = ChunkProgram(stage=0, chunk=0, layers=(0,), forward=tuple(ops), backward=tuple(bwd))
    stage = StageProgram(stage=0, chunks=(chunk,), iteration=(), params=1000, dense_params=1000)
    return Workload(model=model, parallel=par, stages=(stage,), params_total=1000)


@pytest.mark.parametrize("recipe", ["tensorwise", "delayed"])
def test_measure_times_a_per_tensor_runs_fp8_gemms(recipe):
    rows = measure_workload(_fp8_workload(recipe), gpu="cpu", device="cpu", repeats=2, warmup=1, quiet=True)
    assert {(r.phase, r.shape_key) for r in rows} == {("fwd", "32x64x48"), ("fwd", "32x48x64"),
                                                      ("bwd-input", "32x48x64"), ("bwd-weight", "64x48x32")}
    for r in rows:
        m, n, k = map(int, r.shape_key.split("x"))
        assert r.dtype == "fp8" and r.source == "measured" and r.time_s > 0
        assert r.flops == 2 * m * n * k
        assert "_scaled_mm" in r.note


@pytest.mark.parametrize("recipe", ["mxfp8", "blockwise"])
def test_measure_skips_block_scaled_gemms_and_says_why(recipe):
    out = io.StringIO()
    rows = measure_workload(_fp8_workload(recipe), gpu="cpu", device="cpu", repeats=2, warmup=1, progress=out, tty=False)
    assert rows == []
    assert "4 skipped (4 block-scaled FP8 GEMMs)" in out.getvalue()


def test_attach_takes_fp8_rows_for_per_tensor_runs_only():
    op = ComputeOp("fc1", 0, Phase.FWD, OpKind.GEMM, (4096, 4096, 4096), "fp8", 2.0 * 4096 ** 3, 3.0 * 4096 ** 2)
    db = ProfileDB(":memory:")
    db.put([ProfileRow(gpu="h100", kind="gemm", shape_key="4096x4096x4096", dtype="fp8", phase="fwd",
                       time_s=123e-6, source="measured", flops=op.flops, bytes=op.bytes)])
    for recipe in ("delayed", "tensorwise"):
        assert TimeResolver("h100", db, fp8_recipe=recipe).time(op) == (123e-6, TimeSource.MEASURED)
    for recipe in ("mxfp8", "blockwise"):
        t, source = TimeResolver("h100", db, fp8_recipe=recipe).time(op)
        assert source is TimeSource.ESTIMATED and t == estimate_time(op, "h100") and t != 123e-6
    bf16 = ComputeOp("fc1", 0, Phase.FWD, OpKind.GEMM, (64, 64, 64), "bf16", 2.0 * 64 ** 3, 6.0 * 64 ** 2)
    db.put([ProfileRow(gpu="h100", kind="gemm", shape_key="64x64x64", dtype="bf16", phase="fwd",
                       time_s=7e-6, source="measured")])
    assert TimeResolver("h100", db, fp8_recipe="mxfp8").time(bf16) == (7e-6, TimeSource.MEASURED)
