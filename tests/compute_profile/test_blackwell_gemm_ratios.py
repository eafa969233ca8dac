"""Blackwell's FP8 recipes against a published kernel benchmark on Blackwell Ultra.

Transformer Engine's GEMM profiling guide (NVIDIA/TransformerEngine
docs/examples/gemm_profiling/gemm_profiling.rst, "Worked Example: 5B Model on B300") times
the 12 GEMMs of one layer of a 5B model (hidden 4096, FFN 16384 without a gate, micro-batch
31 x sequence 512 = 15872 tokens) on a B300 in BF16, FP8 current scaling, MXFP8 and NVFP4,
twice: with inputs already quantized (the GEMM kernels alone) and under autocast (each call
quantizes its input and its weight first). The figures below are that page's per-phase sums
in milliseconds. They check three things the estimator takes from elsewhere or from this page:
the per-tensor FP8 speed-up (fitted on B200 step times, capped at the datasheet's 2.0), the
MXFP8 kernels' rate against per-tensor FP8 (``gemm.mxfp8_rate``, from this page), and the
casts' bytes per recipe (workload_gen.costs.FP8_CAST_BYTES, from the kernels' traffic).
"""
from __future__ import annotations

import pytest

from compute_profile.attaching import recipe_params
from compute_profile.estimator import explain, load_params
from workload_gen import costs
from workload_gen.core.records import ComputeOp, OpKind, Phase

TOKENS, HIDDEN, FFN = 31 * 512, 4096, 16384
PREQUANT_MS = {  # fprop, dgrad, wgrad: GEMM kernels alone
    "bf16": (4.250, 4.434, 4.418),
    "fp8-current": (2.158, 2.329, 2.325),
    "mxfp8": (2.365, 2.397, 2.400),
    "nvfp4": (1.254, 1.305, 1.205),
}
AUTOCAST_LAYER_MS = {"bf16": 12.758, "fp8-current": 9.147, "mxfp8": 8.984, "nvfp4": 6.453}
"""Per-layer totals under autocast: each GEMM call quantizes its activation and its weight."""
BLACKWELL = ("b200", "gb200", "gb300", "b300")


def _gemms() -> list[tuple[int, int, int]]:
    """(m, n, k) of the layer's 12 GEMMs: fprop X[m,k] W[k,n], dgrad with n and k swapped,
    wgrad (k, n, m), as workload_gen.layer_ops lists them."""
    fprop = [(TOKENS, 3 * HIDDEN, HIDDEN), (TOKENS, HIDDEN, HIDDEN), (TOKENS, FFN, HIDDEN), (TOKENS, HIDDEN, FFN)]
    return fprop + [(m, k, n) for m, n, k in fprop] + [(k, n, m) for m, n, k in fprop]


def _layer_s(gpu: str, dtype: str, recipe: str = "tensorwise", part: str = "time_s") -> float:
    """The layer's 12 GEMMs on ``gpu``: their estimated time, or one term of it (``part``)."""
    p = recipe_params(load_params(gpu), recipe)
    nbytes = {"bf16": 2, "fp8": 1}[dtype]
    return sum(getattr(explain(ComputeOp("gemm", 0, Phase.FWD, OpKind.GEMM, (m, n, k), dtype,
                                         *costs.gemm(m, n, k, nbytes, 2)), gpu, p), part)
               for m, n, k in _gemms())


def test_the_page_sums_and_flops():
    """The per-layer totals the page prints are its phase sums (13.102, 6.812, 7.161, 3.764
    ms); the layer is 3 x 6.39 TFLOP, so BF16 runs at 1.46 PFLOP/s on B300."""
    printed = {"bf16": 13.102, "fp8-current": 6.812, "mxfp8": 7.161, "nvfp4": 3.764}
    for k, v in PREQUANT_MS.items():  # the page sums unrounded phase times
        assert sum(v) == pytest.approx(printed[k], abs=2e-3), k
    flops = sum(2 * m * n * k for m, n, k in _gemms())
    assert flops == pytest.approx(3 * 6.391e12, rel=1e-3)
    assert flops / 13.102e-3 == pytest.approx(1.463e15, rel=1e-3)


def test_mxfp8_rate_is_the_pages_mxfp8_over_per_tensor_kernels():
    """7.161 ms of MXFP8 GEMMs against 6.812 ms per-tensor: 0.951 of the rate, declared for
    every Blackwell GPU, and what a run with the mxfp8 recipe gets (nothing on Hopper, where
    TE has no MXFP8)."""
    rate = 6.812 / 7.161  # the page's per-layer totals
    assert rate == pytest.approx(0.951, abs=5e-4)
    for gpu in BLACKWELL:
        assert load_params(gpu).gemm.mxfp8_rate == pytest.approx(rate, abs=5e-4), gpu
        compute = _layer_s(gpu, "fp8", part="compute_s") / _layer_s(gpu, "fp8", "mxfp8", part="compute_s")
        assert compute == pytest.approx(0.951, rel=1e-9), gpu  # the tensor-core term takes the rate
        # Transformer Engine runs the blockwise recipe's GEMMs through MXFP8 on Blackwell
        assert _layer_s(gpu, "fp8", "blockwise") == pytest.approx(_layer_s(gpu, "fp8", "mxfp8"), rel=1e-12)
    assert load_params("h100-sxm").gemm.mxfp8_rate == 1.0


def test_per_tensor_fp8_speedup_on_blackwell_reproduces_the_page():
    """B200's fitted FP8 speed-up (2.0, the datasheet cap) with the FP8 K-loop overhead gives
    the page's per-tensor FP8 over BF16 GEMM time, 13.102 / 6.812 = 1.92, within 2% on the
    Blackwell Ultra parts that carry it: a figure no parameter was fitted to."""
    measured = sum(PREQUANT_MS["bf16"]) / sum(PREQUANT_MS["fp8-current"])
    assert measured == pytest.approx(1.923, abs=1e-3)
    for gpu in ("b300", "gb300", "b200"):
        assert _layer_s(gpu, "bf16") / _layer_s(gpu, "fp8") == pytest.approx(measured, rel=0.02), gpu


def test_nvfp4_cast_rate_is_the_pages_quantize_time_over_its_traffic():
    """NVFP4's casts: 6.453 - 3.764 = 2.689 ms per layer on the page. Their traffic
    (costs.FP4_CAST_TRAFFIC, 5.125 B per element) at B300's memory-bound rate, which prices the
    FP8 casts of the same page within 10% (below), takes 0.775 of that; priced at the rate
    the kernels reach (costs.NVFP4_CAST_RATE) the casts take the page's time."""
    measured_s = (AUTOCAST_LAYER_MS["nvfp4"] - sum(PREQUANT_MS["nvfp4"])) * 1e-3
    assert measured_s == pytest.approx(2.689e-3, abs=1e-6)
    p = load_params("b300")

    def casts(nbytes: float) -> float:
        return sum(explain(ComputeOp("x.fp4_cast", 0, Phase.FWD, OpKind.ELEMENTWISE, (rows, cols), "bf16",
                                     costs.FP4_CAST_FLOPS * rows * cols, nbytes * rows * cols), "b300", p).time_s
                   for m, n, k in _gemms() for rows, cols in ((m, k), (k, n)))

    assert casts(costs.FP4_CAST_TRAFFIC) / measured_s == pytest.approx(costs.NVFP4_CAST_RATE, abs=2e-3)
    assert sum(explain(ComputeOp("x.fp4_cast", 0, Phase.FWD, OpKind.ELEMENTWISE, (rows, cols), "bf16",
                                 *costs.fp4_cast(rows, cols)), "b300", p).time_s
               for m, n, k in _gemms() for rows, cols in ((m, k), (k, n))) == pytest.approx(measured_s, rel=0.02)


@pytest.mark.parametrize("recipe,page,rel", [("tensorwise", "fp8-current", 0.02), ("mxfp8", "mxfp8", 0.10)])
def test_cast_bytes_reproduce_the_pages_quantize_cost(recipe, page, rel):
    """Autocast minus pre-quantized is the quantization the page's autocast loop adds: each
    of the 12 calls casts its activation [m, k] and its weight [k, n] (both directions, the
    weight needing a gradient). Current scaling, as the model prices it on B300: the amax pass,
    the cast's read and the fp8 data alone (2 + 2 + 1 B per element: Blackwell's FP8 GEMMs take
    any layout, so Transformer Engine writes no transposed copy, costs.FP8_CAST_BYTES less
    one byte at attach) in the quantize's four kernels (costs.TENSORWISE_QUANTIZE_KERNELS),
    each at the estimator's launch cost: within 2% of the page's 2.335 ms per layer (-0.5%;
    6 B in one kernel, Hopper's accounting, gave +3.8%). MXFP8 (4.0625 B, row- and column-wise
    with their scales, at B300's memory-bound rate) within 10% of 1.823 ms; under MXFP8 each
    linear also swizzles its weight's block scales for fprop and for dgrad, a kernel each
    (costs.mxfp8_swizzle_kernels; the activations and gradients are quantized with swizzled
    scales, and 15872 x 4096 and the weights are whole 128 x 128 tiles: no memset), 8 kernels
    at the estimator's launch cost."""
    from compute_profile.attaching import fp8_run_params
    from workload_gen.core.gpu_specs import get_gpu

    measured_s = (AUTOCAST_LAYER_MS[page] - sum(PREQUANT_MS[page])) * 1e-3
    p = fp8_run_params(load_params("b300"), recipe, get_gpu("b300"))
    assert p.fp8_transpose_copies is (recipe != "tensorwise")
    # TE's current-scaling quantize: zero the amax, the amax, the scale, the cast
    assert costs.TENSORWISE_QUANTIZE_KERNELS == 4
    kernels = 4 if recipe == "tensorwise" else 1
    total = 0.0
    for m, n, k in _gemms():
        for rows, cols in ((m, k), (k, n)):
            op = ComputeOp("x.fp8_cast", 0, Phase.FWD, OpKind.ELEMENTWISE, (rows, cols, kernels), "bf16",
                           *costs.fp8_cast(rows, cols, recipe))
            total += explain(op, "b300", p).time_s
    if recipe == "mxfp8":
        swizzles = 4 * (costs.mxfp8_swizzle_kernels(False) + costs.mxfp8_swizzle_kernels(True))
        assert swizzles == 8
        total += swizzles * p.launch_overhead_s
    assert total == pytest.approx(measured_s, rel=rel)


def test_nvfp4_gemms_take_the_pages_rate_on_every_blackwell_gpu():
    """The page's NVFP4 GEMMs alone: 13.102 / 3.764 = 3.48x the BF16 ones, the rate
    ``gemm.fp4_speedup`` declares for every Blackwell GPU (as ``mxfp8_rate``, from the same page).
    The estimator's layer, with its shape efficiency and memory terms, reproduces it within 1%;
    with the datasheets' dense ratio (4.0 on B200, 6.0 on Blackwell Ultra) it would not."""
    measured = sum(PREQUANT_MS["bf16"]) / sum(PREQUANT_MS["nvfp4"])
    assert measured == pytest.approx(3.481, abs=1e-3)
    for gpu in BLACKWELL:
        p = load_params(gpu)
        fp4 = sum(explain(ComputeOp("gemm", 0, Phase.FWD, OpKind.GEMM, (m, n, k), "fp4",
                                    *costs.gemm(m, n, k, costs.NVFP4_GEMM_IN_BYTES, 2)), gpu, p).time_s
                  for m, n, k in _gemms())
        ratio = _layer_s(gpu, "bf16") / fp4
        assert ratio == pytest.approx(measured, rel=0.01), gpu
        assert abs(ratio - 4.0) > 0.4, gpu
