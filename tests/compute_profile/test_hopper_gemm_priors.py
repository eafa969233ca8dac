"""H100's two fitted GEMM parameters take their priors from a published kernel benchmark.

Transformer Engine's GEMM profiling guide (NVIDIA/TransformerEngine
docs/examples/gemm_profiling/gemm_profiling.rst @ 1609c89, "Worked Example: 5B Model on
H200") times the 12 GEMMs of one layer of a 5B model (hidden 4096, FFN 16384 without a
gate, 32 heads, micro-batch 31 x sequence 512 = 15872 tokens) on an H200 NVL, a GH100 part
like H100 SXM, in BF16 and, with inputs already quantized, in FP8 (current scaling: the
GEMM kernels alone). The figures below are that page's per-phase sums in milliseconds.
The estimator, at factor 1 and FP8 speed-up 1, times the same GEMMs; measured over
estimated gives the priors declared in compute_profile/data/estimator_params.yaml.
"""
from __future__ import annotations

import statistics

import pytest

from compute_profile.estimator import declared_parameters, explain, load_params
from workload_gen import costs
from workload_gen.core.records import ComputeOp, OpKind

TOKENS, HIDDEN, FFN = 31 * 512, 4096, 16384
BF16_MS = {"fprop": 10.632, "dgrad": 10.747, "wgrad": 10.530}
FP8_MS = {"fprop": 5.577, "dgrad": 5.661, "wgrad": 5.547}


def _shapes(phase: str) -> list[tuple[int, int, int]]:
    """(m, n, k) of the layer's four GEMMs in one phase: fprop X[m,k] W[k,n]; dgrad swaps
    n and k; wgrad is (k, n, m), as workload_gen.layer_ops lists them."""
    fprop = [(TOKENS, 3 * HIDDEN, HIDDEN), (TOKENS, HIDDEN, HIDDEN), (TOKENS, FFN, HIDDEN), (TOKENS, HIDDEN, FFN)]
    if phase == "fprop":
        return fprop
    if phase == "dgrad":
        return [(m, k, n) for m, n, k in fprop]
    return [(k, n, m) for m, n, k in fprop]


def _phase_time(phase: str, dtype: str) -> float:
    p = load_params("h100-sxm", overrides=(("gpus.h100-sxm.tensor_throughput", 1.0),
                                           ("gpus.h100-sxm.gemm.fp8_speedup", 1.0)))
    nbytes = 1 if dtype == "fp8" else 2
    total = 0.0
    for m, n, k in _shapes(phase):
        op = ComputeOp("gemm", 0, "fwd", OpKind.GEMM, (m, n, k), dtype, *costs.gemm(m, n, k, nbytes, 2))
        total += explain(op, "h100-sxm", p).time_s
    return total


def _declared(path: str):
    return next(d for d in declared_parameters() if d.path == path)


def test_the_published_gemm_flops_are_these_shapes():
    """The page's BF16 fprop runs 2 * 15872 * (4096 * 12288 + 4096^2 + 2 * 4096 * 16384)
    = 6.39 TFLOP in 10.632 ms: 601 TFLOP/s, 61% of the 989 TFLOP/s dense peak."""
    flops = sum(2 * m * n * k for m, n, k in _shapes("fprop"))
    assert flops == pytest.approx(6.391e12, rel=1e-3)
    assert flops / (BF16_MS["fprop"] * 1e-3) / 989e12 == pytest.approx(0.608, abs=0.002)


def test_tensor_throughput_prior_is_estimate_over_measured():
    ratios = [_phase_time(ph, "bf16") / (BF16_MS[ph] * 1e-3) for ph in BF16_MS]
    assert max(ratios) - min(ratios) < 0.015  # the three phases agree
    assert _declared("gpus.h100-sxm.tensor_throughput").prior == pytest.approx(statistics.median(ratios), abs=5e-4)


def test_fp8_speedup_prior_reproduces_the_measured_ratio():
    """Measured FP8/BF16 speed-ups 1.90-1.91; the estimator at speed-up 1 (with its FP8
    K-loop overhead) gives 0.95-0.98, so the declared speed-up is their quotient."""
    measured = {ph: BF16_MS[ph] / FP8_MS[ph] for ph in BF16_MS}
    assert all(1.89 < r < 1.92 for r in measured.values())
    needed = [measured[ph] / (_phase_time(ph, "bf16") / _phase_time(ph, "fp8")) for ph in BF16_MS]
    assert _declared("gpus.h100-sxm.gemm.fp8_speedup").prior == pytest.approx(statistics.median(needed), abs=5e-3)


def test_blockwise_fp8_gemms_run_at_fbgemms_measured_fraction_on_hopper():
    """FBGEMM's H100 benchmark (PR 2546): block-scaled FP8 GEMMs at 0.765 (median of 0.773,
    0.765, 0.726) of row-scaled ones, GEMM only; the estimator's blockwise recipe takes that
    fraction of the per-tensor FP8 rate on Hopper parts; on Blackwell TE runs the recipe's
    GEMMs through MXFP8 (TransformerEngine PR 2157), so they take the MXFP8 rate there
    (test_blackwell_gemm_ratios.py)."""
    from statistics import median

    from compute_profile.attaching import recipe_params
    from compute_profile.estimator import explain, load_params
    from workload_gen.core.records import ComputeOp, OpKind, Phase
    from workload_gen.costs import gemm

    ratios = [870.4 / 1125.5, 828.3 / 1082.8, 828.3 / 1141.4]
    assert median(ratios) == pytest.approx(0.765, abs=0.001)
    op = ComputeOp("fc1", 0, Phase.FWD, OpKind.GEMM, (8192, 8192, 8192), "fp8", *gemm(8192, 8192, 8192, 1, 2))
    for gpu, rate in (("h100-sxm", 0.765), ("h200", 0.765), ("h800", 0.765), ("b200", 0.951)):
        p = load_params(gpu)
        tensorwise = explain(op, gpu, p)
        blockwise = explain(op, gpu, recipe_params(p, "blockwise"))
        assert tensorwise.compute_s / blockwise.compute_s == pytest.approx(rate, rel=1e-9), gpu
