"""FLOPs and HBM bytes of single kernels, in one place so the formulas are read once.

Every compute op of a workload takes its (FLOPs, bytes) from a function here:
:mod:`workload_gen.layer_ops` for the per-micro-batch ops, :mod:`workload_gen.builder`
for the once-per-iteration ones (the optimizer step's bytes per parameter come from
:mod:`workload_gen.core.optimizer_state`, which the memory estimate shares). The op lists
decide which kernels run and on which shapes; this module decides what each one costs.

Conventions: a multiply-add is 2 FLOPs; bytes are what a kernel reads plus writes in
HBM (the roofline memory term), ignoring caches. ``b``/``b_in``/``b_out`` are element
sizes in bytes (``b`` the activation dtype's), ``b_grad`` the main-gradient dtype's.
Element-wise FLOP counts per element are nominal (they only matter for the roofline
estimate, where these kernels are memory-bound anyway). Functions return
``(flops, bytes)``; those of a layer's building blocks return the forward's and the
backward's as ``(fwd, bwd)``.
"""
from __future__ import annotations

from workload_gen.core.flops import attention_pairs, mamba_scan_flops
from workload_gen.core.optimizer_state import optimizer_step_bytes

Cost = tuple[float, float]
"""(FLOPs, HBM bytes) of one kernel."""

NORM_FLOPS = {"layernorm": 7.0, "rmsnorm": 4.0}
"""Per element, forward: LayerNorm = mean, variance, subtract, scale, shift (~7); RMSNorm
= square, sum, scale, weight (~4). Backward is taken as twice that."""

ADAM_FLOPS_PER_PARAM = 16.0
"""Adam with weight decay and bias correction, per element: ~16 FLOPs. Nominal: the step
moves 26-30 bytes per parameter for these FLOPs, far below any GPU's ridge point, so its
time is the bytes'."""


def gemm(m: int, n: int, k: int, b_in: int, b_out: int) -> tuple[float, float]:
    """C[m,n] = A[m,k] @ B[k,n]: 2mnk FLOPs; reads A and B, writes C."""
    return 2.0 * m * n * k, float((m * k + k * n) * b_in + m * n * b_out)


def wgrad_gemm(k: int, n: int, m: int, b_in: int, b_grad: int, b_out: int = 0) -> tuple[float, float]:
    """dW[k,n] = X^T[k,m] @ dY[m,n] accumulated into the main gradient (Megatron's
    gradient-accumulation fusion): reads X and dY, reads and writes dW in the grad dtype.
    ``b_out`` > 0: without the fusion the GEMM writes a fresh dW of that element size instead
    (the parameter's dtype), which :func:`grad_accumulate` then adds to the main gradient."""
    out = k * n * b_out if b_out else 2 * k * n * b_grad
    return 2.0 * m * n * k, float((m * k + m * n) * b_in + out)


def grad_accumulate(params: int, b_wgrad: int, b_grad: int) -> tuple[float, float]:
    """``main_grad += grad`` for weights whose wgrad GEMM did not accumulate in place (Megatron's
    --no-gradient-accumulation-fusion): Megatron-Core DDP's backward post-hook on each
    parameter (distributed_data_parallel.py, _make_backward_post_hook: main_grad.add_(grad)
    when grad_added_to_main_grad is unset), one add per element; reads the fresh gradient and
    the main gradient, writes the main gradient."""
    return float(params), float(params * (b_wgrad + 2 * b_grad))


def grouped_gemm(groups: int, m: float, n: int, k: int, b_in: int, b_out: int) -> tuple[float, float]:
    """``groups`` independent GEMMs of :func:`gemm`'s m x n x k (m may be fractional: balanced routing)."""
    flops, nbytes = gemm(m, n, k, b_in, b_out)
    return groups * flops, groups * nbytes


def grouped_wgrad(groups: int, k: int, n: int, m: float, b_in: int, b_grad: int, b_out: int = 0) -> tuple[float, float]:
    """``groups`` weight-gradient GEMMs (:func:`wgrad_gemm`, the same ``b_out``)."""
    flops, nbytes = wgrad_gemm(k, n, m, b_in, b_grad, b_out)
    return groups * flops, groups * nbytes


def attention_fwd(batch: int, heads: int, kv_heads: int, sq: int, skv: int, d_qk: int, d_v: int,
                  causal: bool, b: int, span: tuple[str, int] | None = None) -> tuple[float, float]:
    """Fused (flash) attention forward: S = Q K^T (2*sq*skv*d_qk per head) and O = P V
    (2*sq*skv*d_v per head), halved when causal (only the lower triangle is computed); with
    a sliding window or chunks (``span``, sq == skv), only the pairs of
    :func:`workload_gen.core.flops.attention_pairs`.
    Bytes: read Q, K, V, write O and the fp32 log-sum-exp; S and P stay on chip (a window
    still reads every K and V once)."""
    if span is not None:
        flops = 2.0 * batch * heads * attention_pairs(sq, span) * (d_qk + d_v)
    else:
        frac = 0.5 if causal else 1.0
        flops = 2.0 * batch * heads * sq * skv * (d_qk + d_v) * frac
    q = batch * sq * heads * d_qk
    kv = batch * skv * kv_heads * (d_qk + d_v)
    o = batch * sq * heads * d_v
    return flops, float((q + kv + o) * b + batch * heads * sq * 4)


def attention_bwd(batch: int, heads: int, kv_heads: int, sq: int, skv: int, d_qk: int, d_v: int,
                  causal: bool, b: int, span: tuple[str, int] | None = None) -> tuple[float, float]:
    """Flash-attention backward: recomputes S (1 GEMM) and does dV, dP, dQ, dK (4 GEMMs):
    5 GEMMs against the forward's 2, so 2.5x the forward FLOPs. Bytes: reads Q, K, V, O,
    dO and the log-sum-exp; writes dQ, dK, dV."""
    f, _ = attention_fwd(batch, heads, kv_heads, sq, skv, d_qk, d_v, causal, b, span)
    q = batch * sq * heads * d_qk
    kv = batch * skv * kv_heads * (d_qk + d_v)
    o = batch * sq * heads * d_v
    return 2.5 * f, float((2 * q + 2 * kv + 2 * o) * b + batch * heads * sq * 4)


def attention_sink(batch: int, heads: int, sq: int, b: int, learnable: bool) -> tuple[Cost, Cost | None]:
    """Attention sinks (GPT-OSS's learnable per-head logit, or off-by-one's fixed zero one):
    one extra term exp(sink - max) in each query row's softmax denominator.

    Forward: fused in the attention kernel's epilogue (cuDNN's sink token, flash kernels'
    final rescale): ~3 FLOPs per (sequence, head, query row) and the sink vector read,
    returned as an addition to the attention op. Backward (learnable only; off-by-one's sink
    is a constant): dsink_h = -sum over the head's query rows of P_sink * Delta, P_sink =
    exp(sink - lse) and Delta = rowsum(dO * O), the per-row term the flash backward's
    preprocess already writes; a reduction across every query tile of the head, so its own
    pass: reads the fp32 log-sum-exp and Delta (4 + 4 B per row), writes one fp32 per head;
    None when there is no gradient."""
    rows = batch * heads * sq
    fwd = (3.0 * rows, float(heads * b))
    return fwd, ((3.0 * rows, float(8 * rows + 4 * heads)) if learnable else None)


def bias_grad(rows: int, width: int, b: int) -> Cost:
    """dbias = column sum of dY[rows, width] where no kernel that reads dY anyway can fuse it
    (Megatron's skip_bias_add linears: the bias is added by a fused bias-activation or
    bias-dropout-add kernel, whose autograd returns a [rows, width] gradient that the
    autograd engine sums to the bias's shape): reads dY, writes the width-vector, one add
    per element."""
    e = rows * width
    return float(e), float((e + width) * b)


def expert_fc2_bias(rows: int, width: int, experts: int, b: int, probs_fp32: bool
                    ) -> tuple[Cost, Cost, tuple[int, int]]:
    """The expert fc2 bias weighted by the router probabilities (TEGroupedMLP._apply_bias,
    Megatron-LM experts.py at every recipe commit from 0d8e0714 to d0b3b775; d98e8a64 added a
    vectorised path the recipes do not run): one ``t + bias * prob`` per local expert on its rows,
    a cat, and a cast back to the activation dtype, in eager PyTorch; autograd runs the backward
    of those ops. ``rows`` routed rows of ``width`` over ``experts`` local experts; ``b`` the
    activation bytes. The probabilities are fp32 when the flex dispatcher converts them
    (DeepEP, HybridEP) and the activation dtype otherwise (the router's logits dtype: Megatron's
    and TE's fused router keep it), and the arithmetic follows them. Bytes per element
    (tests/workload_gen/test_linear_bias.py counts them from a real autograd run):
    - fp32 probabilities, forward: bias x prob (write 4), the add (read b + 4, write 4), the cat
      (4 + 4), the cast (4 + b): 24 + 2b; backward: the cast's gradient (b + 4), per expert the
      rows' gradient cast back (4 + b), grad x prob and its sum over rows for the bias (4 + 4,
      4), grad x bias and its sum over the width for the prob (4 + 4, 4), and the cat that
      assembles the rows' gradient (b + b): 32 + 4b;
    - probabilities in the activation dtype: forward bias x prob (b), the add (2b + b), the cat
      (b + b): 6b; backward the two products and sums (2b + b each) and the cat (2b): 8b.
    Kernels (forward, backward): 2 per expert plus the cat and the cast (no cast when the
    dtypes agree); backward 6 per expert plus 3 (4 per expert plus 2). One FLOP per element
    for each product, sum and add."""
    e = rows * width
    if probs_fp32:
        return (2.0 * e, (24.0 + 2 * b) * e), (4.0 * e, (32.0 + 4 * b) * e), (2 * experts + 2, 6 * experts + 3)
    return (2.0 * e, 6.0 * b * e), (4.0 * e, 8.0 * b * e), (2 * experts + 1, 4 * experts + 2)


FP8_CAST_BYTES = {"delayed": 4.0, "tensorwise": 6.0, "mxfp8": 4.0625, "blockwise": 4.0625}
"""HBM bytes per element to quantize one bf16 GEMM input for Transformer Engine's FP8 GEMMs.

The cast kernel reads the bf16 tensor (2 B) and writes it twice in fp8, row-wise for this
GEMM and column-wise (transposed) for the backward GEMM that reuses it (1 + 1 B): 4 B,
with the amax reduction fused in. Per recipe:
- delayed: the scale comes from the amax history, so nothing more (4 B);
- tensorwise (current scaling): the amax must be known before the cast, a second read
  pass over the tensor (+2 B);
- mxfp8: one e8m0 scale per 32 elements in each direction (+2/32 B: 4.0625 B);
- blockwise: one fp32 scale per 1x128 block in each direction (+2*4/128 B).
A GPU whose FP8 GEMMs take any layout (Blackwell: GpuSpec.fp8_gemm_any_layout) needs no
transposed copy of a per-tensor (delayed, tensorwise) tensor: Transformer Engine writes the
data alone there, one byte fewer, which the estimator leaves out at attach
(compute_profile.estimator, ``EstimatorParams.fp8_transpose_copies``)."""


TENSORWISE_QUANTIZE_KERNELS = 4
"""Kernels of one FP8 current-scaling quantize: the amax buffer zeroed, the amax, the scale
from it, then the cast (Transformer Engine ``Float8CurrentScalingQuantizer::quantize_impl``,
common/recipe/current_scaling.cu ``zero_amax_kernel``; the same in TE 2.8 to 2.18). Delayed
scaling's cast takes its scale from the amax history: one kernel."""


def fp8_cast(rows: int, cols: int, recipe: str) -> tuple[float, float]:
    """Quantize a [rows, cols] bf16 tensor for FP8 GEMMs: ~3 FLOPs per element (scale,
    clamp, amax), memory-bound (see FP8_CAST_BYTES)."""
    e = rows * cols
    return 3.0 * e, FP8_CAST_BYTES[recipe] * e


FP4_BYTES = 0.5
"""Bytes of one e2m1 element (1 sign, 2 exponent, 1 mantissa bit: TE docs, NVFP4 'Data Format')."""
NVFP4_BLOCK = 16
"""Elements per NVFP4 scale block: each block of 16 consecutive values shares one FP8 E4M3
scale (1 B), and the tensor one FP32 scale (TE docs, features/low_precision_training/nvfp4;
arXiv 2509.25149 sec. 2). Weights use 16x16 blocks (2D scaling, the recipe's default), which
the GEMM still reads through the 1x16 scale layout; counted at one scale per 16 either way."""
NVFP4_GEMM_IN_BYTES = FP4_BYTES + 1 / NVFP4_BLOCK
"""Bytes per element an NVFP4 GEMM reads of each operand: the e2m1 value and its share of
the E4M3 block scale (0.5 + 1/16 = 0.5625)."""
FP4_CAST_TRAFFIC = 2.0 + 2.0 + 2 * NVFP4_GEMM_IN_BYTES
"""HBM bytes per element to quantize one bf16 GEMM input to NVFP4 (Transformer Engine's
NVFP4BlockScaling, TE >= 2.7):
- the per-tensor FP32 scale is current scaling, global_amax / (448 * 6), so the tensor's amax
  must be known before any block is cast: one read pass first (2 B). For the wgrad operands
  the amax is taken after the random Hadamard transform too; TE fuses the two amaxes into the
  same pass (its hadamard_transform_amax kernel), and the RHT itself is 16x16 products done
  on the fly in the cast (a 16-wide transform per block, compute the cast hides);
- the cast reads the bf16 tensor again (2 B) and writes it twice in e2m1 with one E4M3 scale
  per 16 values: row-wise for this GEMM, column-wise (transposed, with the RHT) for the wgrad
  GEMM that reuses it: 2 * (0.5 + 1/16) B. Stochastic rounding (gradients) uses Blackwell's
  hardware cvt.rs instruction in the same kernel: no extra traffic.
Total 5.125 B per element, against FP8_CAST_BYTES' 4-6 B: NVFP4 saves write bytes but pays
the amax pass like FP8's tensorwise recipe."""
NVFP4_CAST_RATE = 0.775
"""The fraction of the memory-bound rate Transformer Engine's NVFP4 cast kernels reach.
Transformer Engine's GEMM profiling guide (docs/examples/gemm_profiling/gemm_profiling.rst,
"Worked Example: 5B Model on B300") times one layer's NVFP4 quantization at 2.689 ms (6.453 ms
under autocast less 3.764 ms of GEMM kernels alone); :data:`FP4_CAST_TRAFFIC` at B300's
memory-bound rate (the rate that prices the same page's FP8 current-scaling and MXFP8 casts
within 4% and 7%) gives 2.084 ms, so 2.084 / 2.689 = 0.775. The Hadamard transform runs on
tensor cores (TE hadamard_transform.cu: mma m16n16k16), so this is not arithmetic the
traffic hides: the fused amax and cast kernels simply move their bytes at about 3/4 of the
rate the FP8 casts reach (tests/compute_profile/test_blackwell_gemm_ratios.py)."""
FP4_CAST_BYTES = FP4_CAST_TRAFFIC / NVFP4_CAST_RATE
"""Bytes per element an NVFP4 cast is priced at: its traffic at the rate its kernels reach
(:data:`FP4_CAST_TRAFFIC` / :data:`NVFP4_CAST_RATE`, 6.61), so the estimator's memory-bound
rate gives the measured time."""

FP4_CAST_FLOPS = 5.0
"""Nominal FLOPs per element of the NVFP4 cast (amax, block amax, scale, round, and the
16-point Hadamard transform on the column-wise copy); memory-bound either way."""


def fp4_cast(rows: int, cols: int) -> Cost:
    """Quantize a [rows, cols] bf16 tensor for NVFP4 GEMMs: :data:`FP4_CAST_BYTES` per
    element (amax pass, then row- and column-wise e2m1 with E4M3 scales, at the rate the
    kernels reach)."""
    e = rows * cols
    return FP4_CAST_FLOPS * e, FP4_CAST_BYTES * e


def quantize_cast(rows: int, cols: int, dtype: str, fp8_recipe: str) -> Cost:
    """The cast of one bf16 GEMM input for the quantized training ``dtype`` (fp8 with its
    recipe, or fp4's NVFP4): the one entry point layer_ops and the builder share."""
    return fp4_cast(rows, cols) if dtype == "fp4" else fp8_cast(rows, cols, fp8_recipe)


MXFP8_SCALE_TILE = 128
"""Rows and columns of the tile in which cuBLAS reads MXFP8 block scales ("swizzled" layout):
a quantized tensor whose scales Transformer Engine writes straight in that layout
(``optimize_for_gemm``) and that is not a whole number of 128 x 128 tiles gets its scale
buffers zero-filled first (TE v2.12-v2.16 common/cast/mxfp8/quantize_mxfp8.cuh: "Zero out
swizzled scales if padding is needed", one cudaMemsetAsync per row- and column-wise buffer)."""
MXFP8_SWIZZLE_BATCH = 64
"""Tensors one multi-tensor scale-swizzle kernel takes (TE v2.14 common/swizzle/swizzle.cu,
``kMaxTensorsPerKernel``): a grouped GEMM swizzles its experts' weight scales ceil(E / 64) launches at a time."""


def mxfp8_unaligned(width: int, row_align: int, rows: float | None = None) -> float:
    """Chance that an MXFP8 GEMM input of ``width`` columns, quantized with GEMM-swizzled scales,
    is not a whole number of :data:`MXFP8_SCALE_TILE` tiles (and so pays two memsets). ``rows``
    known (a fixed count): 0 or 1. Unknown rows that are a multiple of ``row_align`` (Megatron
    pads each expert's count to 32 under MXFP8: core.moe_padding) land on each multiple of it
    below 128 alike (routed counts spread over many of them), so 1 - row_align / 128; rows with
    no alignment (``row_align`` 0) essentially never fill whole tiles: 1."""
    if width % MXFP8_SCALE_TILE:
        return 1.0
    if rows is not None:
        return 0.0 if round(rows) % MXFP8_SCALE_TILE == 0 else 1.0
    if row_align <= 0 or MXFP8_SCALE_TILE % row_align:
        return 1.0
    return 1.0 - row_align / MXFP8_SCALE_TILE


def mxfp8_swizzle_kernels(backward: bool, gathered_input: bool = False, gathered_grad: bool = False,
                          experts: int = 0) -> int:
    """Scale-swizzle kernels Transformer Engine launches for one pass of an MXFP8 linear on
    Blackwell: cuBLAS reads block scales in a swizzled layout, and TE swizzles every GEMM
    operand whose scales were not written that way (TE v2.12-v2.16 csrc/extensions/gemm.cpp
    ``swizzle_scales_for_gemm``, csrc/extensions/swizzle.cpp; each a kernel of its own into a
    new buffer, redone every call). Inputs and output gradients are quantized with swizzled
    scales (``optimize_for_gemm``: module/linear.py, grouped_linear.py) except an operand that a
    sequence-parallel all-gather assembled (the gather moves compact scales); weights never
    are (weight quantizers do not set it). So per te.Linear pass: the weight's scales for
    fprop (forward) or dgrad (backward), plus the gathered input's for fprop (forward) and its
    column-wise copy for wgrad (backward) under column-parallel SP, plus the gathered output
    gradient's for dgrad and wgrad under row-parallel SP. A GroupedLinear (``experts`` > 0)
    swizzles its experts' weight scales in multi-tensor launches
    (:data:`MXFP8_SWIZZLE_BATCH`), once for fprop and once for dgrad. The swizzled buffers are
    1/32 of an operand's bytes: their traffic is left out, each kernel costs its launch."""
    if experts:
        return -(-experts // MXFP8_SWIZZLE_BATCH)
    if backward:
        return 1 + int(gathered_input) + 2 * int(gathered_grad)
    return 1 + int(gathered_input)


def split_quantize_kernels(dtype: str, fp8_recipe: str, splits: int, width: int, row_align: int = 0,
                           rows: float | None = None, scale_buffers: int = 2) -> int:
    """Kernels Transformer Engine launches to quantize one grouped GEMM input split ``splits``
    ways (one split per local expert: GroupedLinear's ``split_quantize``), by recipe.

    Read in TransformerEngine@d0067d0d (2026-08), ``csrc/extensions/cast.cpp``
    ``split_quantize`` / ``multi_tensor_quantize_impl`` and ``csrc/quantizer.cpp``:
    - delayed scaling: one fused multi-tensor cast-transpose for every split ("currently only
      have fused kernel for FP8 delayed scaling"): 1;
    - current scaling (tensorwise): each split quantized on its own, and each quantize is
      four kernels: the amax buffer zeroed and the amax (``nvte_compute_amax_with_config``,
      common/recipe/current_scaling.cu ``zero_amax_kernel`` then the amax kernel), the scale
      from it, then the cast (``Float8CurrentScalingQuantizer::quantize_impl``; the same in
      TE 2.8 to 2.18): 4 per split;
    - MXFP8 and FP8 blockwise: each split on its own, one kernel each (the block scales are
      computed in the cast): 1 per split; under MXFP8 GroupedLinear asks for GEMM-swizzled
      scales (TE v2.12-v2.16), so a split of ``rows`` per expert (each a multiple of
      ``row_align``) that is not whole 128 x 128 tiles first has its ``scale_buffers`` scale
      buffers zero-filled, a memset each (:func:`mxfp8_unaligned`): 2 for a row- and
      column-wise quantize, 1 for the column-wise-only requantize before a wgrad;
    - NVFP4: one fused grouped kernel when the inner dimension is a multiple of 128, else
      each split on its own."""
    if dtype == "fp4":
        return 1 if width % 128 == 0 else splits
    if fp8_recipe == "delayed":
        return 1
    if fp8_recipe == "mxfp8":
        return round(splits * (1 + scale_buffers * mxfp8_unaligned(width, row_align, rows)))
    return (TENSORWISE_QUANTIZE_KERNELS if fp8_recipe == "tensorwise" else 1) * splits


def attention_softmax_dropout(batch: int, heads: int, sq: int, skv: int, backward: bool) -> Cost:
    """The unfused attention's score handling around its two batched GEMMs, Megatron's fused
    scale-mask-softmax then dropout, per score element (bf16 scores, 1-byte dropout mask):
    forward: 5 FLOPs (scale, max, exp, sum, divide); softmax reads the scores and writes the
    probabilities (2 + 2), dropout reads them and writes the dropped probabilities and the
    mask (2 + 2 + 1): 9 B;
    backward: 4 FLOPs; dropout's backward reads the incoming gradient and the mask and writes
    (2 + 1 + 2), softmax's reads it and the probabilities and writes dS (2 + 2 + 2): 11 B."""
    e = float(batch * heads * sq * skv)
    return (4.0 if backward else 5.0) * e, (11.0 if backward else 9.0) * batch * heads * sq * skv


# --- a layer's element-wise building blocks: (forward, backward) ------------------------


def norm(normalization: str, rows: int, width: int, b: int) -> tuple[Cost, Cost]:
    """LayerNorm / RMSNorm over [rows, width]: forward :data:`NORM_FLOPS` per element,
    reads x and writes y (2 elements of traffic); backward twice the FLOPs, reads x and
    dy, writes dx (3)."""
    f = NORM_FLOPS[normalization] * rows * width
    n = rows * width * b
    return (f, float(2 * n)), (2 * f, float(3 * n))


def residual(rows: int, width: int, b: int) -> tuple[Cost, Cost]:
    """Bias-dropout-add on the hidden state: forward reads x and the residual, writes the
    sum and a 1-byte dropout mask; backward reads dy and the mask, writes dx."""
    e = rows * width
    return (3.0 * e, float(e * (3 * b + 1))), (1.0 * e, float(e * (2 * b + 1)))


def mamba_conv1d(rows: int, channels: int, kernel: int, b: int) -> tuple[Cost, Cost]:
    """The Mamba mixer's causal depthwise conv1d (+ SiLU) over x, B and C, ``channels``
    columns per row (causal_conv1d_fwd inside mamba_split_conv1d_scan_combined): forward
    ``2*kernel + 4`` FLOPs per element, reads the input and writes the output; backward
    (it recomputes the forward from the saved in_proj output, then dx, dweight) twice the
    FLOPs and 4 passes (read x, dy; re-made y; write dx)."""
    e = rows * channels
    f = (2.0 * kernel + 4.0) * e
    return (f, float(2 * e * b)), (2 * f, float(4 * e * b))


def mamba_scan(rows: int, d_inner: int, heads: int, groups: int, state: int, chunk: int,
               b: int) -> tuple[Cost, Cost]:
    """The Mamba-2 SSD chunked scan (mamba_chunk_scan_combined: chunk cumsum, chunk states,
    state passing, chunk scan, with the D skip and the z gate) on one rank: FLOPs by
    Megatron's estimate (core.flops.mamba_scan_flops), costed by the roofline like any
    non-GEMM op. Forward reads x, z (``d_inner`` each), B and C (``2*groups*state``) and dt
    (``heads``) per row, writes the gated output and the pre-gate output the backward keeps
    (``2*d_inner``), and writes and reads back the fp32 chunk states, ``heads*P*state`` per
    chunk of ``chunk`` rows (P = d_inner/heads). Backward: twice the FLOPs (the convention
    for a layer's backward) and twice the traffic (it recomputes the chunk states and
    writes d(x, z, B, C, dt))."""
    f = mamba_scan_flops(rows, d_inner, state)
    chunks = -(-rows // chunk)
    states = 2.0 * chunks * d_inner * state * 4
    per_row = 2 * d_inner + 2 * groups * state + heads + 2 * d_inner
    fwd = (f, float(rows * per_row * b) + states)
    return fwd, (2 * f, 2 * fwd[1])


def activation(kind: str, rows: int, width: int, b: int) -> tuple[Cost, Cost]:
    """The MLP activation on ``width`` outputs per row. GeLU: forward reads and writes
    ``width`` (~8 FLOPs per element, tanh approximation), backward reads input and dy,
    writes d(input) (~12); SwiGLU: reads the 2*width fc1 output (gate and up halves),
    writes width (6 FLOPs: sigmoid, two multiplies), backward 10; squared ReLU
    (Nemotron-4): GeLU's traffic, 2 FLOPs (max, multiply), backward dx = 2 relu(x) dy (3)."""
    e = rows * width
    if kind == "swiglu":
        return (6.0 * e, float(3 * e * b)), (10.0 * e, float(5 * e * b))
    if kind == "squared_relu":
        return (2.0 * e, float(2 * e * b)), (3.0 * e, float(3 * e * b))
    return (8.0 * e, float(2 * e * b)), (12.0 * e, float(3 * e * b))


GLU_CLAMP_KERNELS = (3, 9)
"""Kernels of Megatron's clamp of a gated activation's input, (forward, backward): two clamps
and a cat forward; backward, PyTorch's clamp_backward for each half (``where`` over a mask:
ge, le, logical_and_ and where for the two-sided clamp, le and where for the one-sided one,
each with a zero from scalar_tensor) and the cat that assembles the chunked input's gradient."""


def glu_clamp(rows: int, width: int, b: int) -> tuple[Cost, Cost]:
    """The clamp Megatron applies to a gated activation's input ([rows, 2*width] fc1 output)
    before its fused GLU, as separate kernels (fused_bias_geglu.weighted_bias_quick_geglu_impl
    at every recipe commit since 0d8e0714: ``x_glu.clamp(max=c)``, ``x_linear.clamp(-c, c)``,
    ``torch.cat``). Forward: each clamp reads and writes its half, the cat reads both and
    writes the whole: 4 passes of the whole, 2b per element each way. Backward (autograd,
    ATen's clamp_backward = where(mask, grad, 0)): the two-sided half builds its mask with ge
    and le (read b, write a 1-byte bool each) and logical_and_ (read 2, write 1), the one-sided
    half with le alone, each then where (read the mask and the gradient, write the gradient),
    and a cat assembles the two halves' gradients: (4b + 6 + 3b + 2) / 2 + 2b = 5.5b + 4 bytes
    per element of the whole (15 at bf16; tests/workload_gen/test_glu_clamp.py counts them from
    a real autograd run). One comparison per element and pass. Kernels: :data:`GLU_CLAMP_KERNELS`."""
    e = 2 * rows * width
    return (2.0 * e, float(4 * e * b)), (2.0 * e, (5.5 * b + 4.0) * e)


def rope(rows: int, width: int, b: int) -> tuple[Cost, Cost]:
    """Rotary embedding on q and k: x*cos + rot(x)*sin, 3 FLOPs per element, read and
    write; the backward is the same rotation on the gradients."""
    e = rows * width
    c = (3.0 * e, float(2 * e * b))
    return c, c


ROPE_UNFUSED_BYTES = (12.0, 14.0)
"""HBM bytes per element of q and k, in units of the element size, of Megatron-Core's eager
RoPE (rope_utils._apply_rotary_pos_emb_bshd, Megatron-LM d98e8a64, the same at every recipe
commit since 0d8e0714) on a [s, b, h, d] tensor with the whole head dimension rotated; read
and written per element by these ATen ops (as PyTorch runs them: tests/workload_gen/
test_rope_unfused.py counts them from a real autograd run):
- forward: ``t * cos`` (1 + 1), ``_rotate_half``'s negation of one half (1/2 + 1/2) and its
  ``cat`` (1 + 1), ``* sin`` (1 + 1), the sum (2 + 1), and the final ``cat`` with the empty
  unrotated part (1 + 1): 12;
- backward (autograd): the gradient times sin (1 + 1) and times cos (1 + 1), the negation's
  (1/2 + 1/2), the chunk's gradient assembled by a cat (1 + 1), the two paths summed (2 + 1),
  the empty unrotated slice's gradient as a full zeros tensor (``slice_backward``: 1; the
  full-width rotated slice is an alias, no op) and the two slices' gradients summed (2 + 1): 14."""
ROPE_UNFUSED_KERNELS = (12, 7)
"""Kernels of one eager RoPE call on one tensor, (forward, backward): the forward's six passes
above plus cos, sin, their two scalings by the cos/sin scale and two casts to the activation
dtype on the [s, 1, 1, d] angles; the backward's seven passes above."""


def rope_unfused(rows: int, width: int, positions: int, head_dim: int, b: int) -> tuple[Cost, Cost, tuple[int, int]]:
    """Megatron-Core's eager RoPE (``apply_rotary_pos_emb`` when TE's fused kernel is off or
    cannot take YaRN's cos/sin scale, ModelConfig.rope_cos_sin_scale): called once for q and
    once for k, ``width`` = (q heads + k heads) x head_dim columns of ``rows`` tokens; each call
    also computes cos and sin of the [positions, head_dim] fp32 angles, scales them and casts
    them (4 + 4, 4 + 4, 4 + 2 bytes per angle, twice). ~4 FLOPs per element each way (two
    products, a sum, a negation). Memory-bound (:data:`ROPE_UNFUSED_BYTES`). Returns the
    forward and backward costs and the kernels each launches for q and k together."""
    e = rows * width
    fb, bb = ROPE_UNFUSED_BYTES
    angles = 2 * 2 * positions * head_dim * (8 + 8 + 6)  # q and k calls, cos and sin
    kf, kb = ROPE_UNFUSED_KERNELS
    return (4.0 * e, fb * e * b + angles), (4.0 * e, bb * e * b), (2 * kf, 2 * kb)


def mla_rope(rows: int, heads: int, dn: int, dr: int, dv: int, b: int) -> tuple[Cost, Cost]:
    """MLA's RoPE with the layout change the attention kernel needs (Megatron-Core's
    fused_apply_mla_rope_for_q / _for_kv, the default with rope fusion on): one pass
    reads q [rows, heads, dn+dr], kv [rows, heads, dn+dv] and the shared k_pe [rows, dr],
    rotates the dr parts and writes contiguous query and key [rows, heads, dn+dr] and
    value [rows, heads, dv]. Unlike plain RoPE it moves the whole q, k and v, not only
    the rotated parts. Backward runs the same pass on the gradients."""
    qk = heads * (dn + dr)
    elems = rows * (qk + heads * (dn + dv) + dr + 2 * qk + heads * dv)
    c = (3.0 * rows * (heads + 1) * dr, float(elems * b))
    return c, c


def router(tokens: int, hidden: int, experts: int, b: int, b_grad: int) -> tuple[Cost, Cost, Cost]:
    """The MoE router's (forward, input-gradient, weight-gradient) kernels: logits =
    x @ W_r (h x E), then softmax and top-k in fp32 (~5 FLOPs per logit). Forward reads x
    and W_r and writes the fp32 logits and probabilities; the input gradient reads the
    fp32 gradient of the logits and W_r and writes dx; the weight gradient reads x and
    the logits' gradient and accumulates into the main gradient of W_r (read + write)."""
    f = 2.0 * tokens * hidden * experts
    fwd = (f + 5.0 * tokens * experts, float(tokens * hidden * b + hidden * experts * b + 2 * tokens * experts * 4))
    dgrad = (f, float(tokens * experts * 4 + hidden * experts * b + tokens * hidden * b))
    wgrad = (f, float(tokens * hidden * b + tokens * experts * b + 2 * hidden * experts * b_grad))
    return fwd, dgrad, wgrad


def permute(rows_in: int, rows_out: int, hidden: int, b: int, weighted: bool) -> Cost:
    """Token (un)permutation, a gather of rows: reads rows_in and writes rows_out rows of
    ``hidden``; ``weighted`` (unpermute) also multiplies by the router probabilities, one
    FLOP per element. The backward is the same gather the other way."""
    return (float(rows_in * hidden) if weighted else 0.0), float((rows_in + rows_out) * hidden * b)


PROBS_BYTES = 4
"""Bytes of one router probability as the experts receive it, taken as fp32: Megatron's router
computes in fp32 under --moe-router-dtype fp32 (the MoE layer baselines and 13 of the 47 MoE
recipes set it; HybridEP converts to fp32 whatever it is given, token_dispatcher.py d98e8a64),
in the input's bf16 otherwise. The 2 B that would save is 0.05% of a padded row at h 2048."""


def expert_pad(rows: int, padded: float, hidden: int, b: int, probs: bool) -> Cost:
    """Transformer Engine's Fp8Padding or Fp8Unpadding of the experts' rows (core.moe_padding):
    one fused multi-row copy between ``rows`` rows of ``hidden`` and ``padded`` rows (pad rows
    zero-filled), a row gather as :func:`permute` counts it, in either direction (the backward
    of each is the other's copy); ``probs``: the same copy of the rows' router probabilities
    (:data:`PROBS_BYTES`; Megatron pads them with the hidden states, a second kernel)."""
    _, moved = permute(rows, padded, hidden, b, weighted=False)
    return 0.0, moved + ((rows + padded) * PROBS_BYTES if probs else 0.0)


UNFUSED_PERMUTE_KERNELS = {("permute", True): 9, ("permute", False): 2, ("unpermute", True): 5, ("unpermute", False): 5}
"""Kernels of Megatron-LM's unfused (un)permute (moe_utils.permute / unpermute with fused=False,
d98e8a64), by (op, forward): permute forward transposes the routing map, argsorts it (a CUB
radix sort, about four launches), slices the indices and gathers the rows and probs; its
backward zero-fills and index-adds. Unpermute forward gathers the probs, multiplies, zero-fills
and scatter-adds; its backward gathers, multiplies and reduces the probs' gradient."""


def permute_unfused(rows_in: int, rows_out: int, hidden: int, b: int, experts: int,
                    unpermute: bool, forward: bool) -> Cost:
    """Megatron-LM's unfused token (un)permutation (``--moe-permute-fusion`` off, its default;
    moe_utils.py at d98e8a64), as the torch ops it runs; the fused TE kernel it replaces is
    :func:`permute`. ``rows_in`` -> ``rows_out`` rows of ``hidden``; ``experts``: the routing
    map's columns. Why it costs more: the unfused unpermute multiplies the rows by their probs
    in a pass of its own, zero-fills its output and scatter-adds into it (a read-modify-write
    per element); the unfused permute sorts the routing map before its gather, and its backward
    is a zero-fill and an index-add instead of the fused kernel's gather.

    Bytes (R routed rows, T tokens): permute forward 72*T*E (the map's transpose and a
    four-pass sort of 1-byte keys with 8-byte indices) + 2*R*h*b (the gather); its backward
    T*h*b + 3*R*h*b. Unpermute forward 5*R*h*b + T*h*b (multiply, zero-fill, scatter-add with
    its read-modify-write) and R*h FLOPs; its backward 6*R*h*b (gather, multiply, the probs'
    reduction) and 2*R*h FLOPs."""
    if unpermute:
        routed, tokens = rows_in, rows_out
        if forward:
            return float(routed * hidden), float((5 * routed + tokens) * hidden * b + 5 * tokens * experts)
        return float(2 * routed * hidden), float(6 * routed * hidden * b)
    tokens, routed = rows_in, rows_out
    if forward:
        return 0.0, float(72 * tokens * experts + 2 * routed * hidden * b)
    return float(routed * hidden), float((tokens + 3 * routed) * hidden * b)


def embedding_lookup(tokens: int, hidden: int, b: int) -> Cost:
    """Word-embedding forward: gathers ``tokens`` rows of the table (read) and writes them."""
    return 0.0, float(2 * tokens * hidden * b)


def embedding_wgrad(tokens: int, hidden: int, b: int, b_grad: int) -> Cost:
    """An embedding table's backward: scatter-adds the incoming gradient rows (read) into
    the main gradient (read + write), one add per element."""
    e = tokens * hidden
    return float(e), float(e * b + 2 * e * b_grad)


def position_embedding(tokens: int, hidden: int, b: int) -> Cost:
    """Learned positions' forward: reads the position rows and the word embeddings, writes
    their sum, one add per element."""
    e = tokens * hidden
    return float(e), float(3 * e * b)


def dropout(rows: int, width: int, b: int) -> Cost:
    """Dropout (forward or backward alike): reads the tensor, writes it and the 1-byte mask
    (backward: reads the gradient and the mask, writes the gradient), one multiply per
    element."""
    e = rows * width
    return float(e), float(e * (2 * b + 1))


def loss(tokens: int, vocab: int, b: int) -> tuple[Cost, Cost]:
    """Vocab-parallel cross-entropy on [tokens, vocab] logits: the forward reads the logits
    and keeps an fp32 copy (b + 4 per element; max, subtract, exp, sum, log: ~5 FLOPs),
    the backward reads the fp32 softmax and writes the logits' gradient (~2 FLOPs)."""
    n = tokens * vocab
    return (5.0 * n, float(n * (b + 4))), (2.0 * n, float(n * (b + 4)))


def logits_argmax(tokens: int, vocab: int, b: int) -> Cost:
    """The max and argmax over [tokens, vocab] logits (MTP's acceptance count): reads the
    logits, one compare per element, writes each token's max (b) and index (int64, 8)."""
    n = tokens * vocab
    return float(n), float(n * b + tokens * (b + 8))


# --- once per iteration ------------------------------------------------------------------


def grad_norm(params: int, b_grad: int) -> Cost:
    """The gradient norm over a main-grad shard: reads it once, a multiply-add per element
    (the clip's rescale is fused into the optimizer step)."""
    return 2.0 * params, float(b_grad * params)


def zero_grad(params: int, b_grad: int) -> Cost:
    """Zeroing the whole grad buffer: one write per element."""
    return 0.0, float(b_grad * params)


def adam_step(params: int, optimizer: str, dtype: str, b_grad: int, b_param: int,
              pa: tuple[int, int, bool] | None = None, fp8_weights: int = 0) -> Cost:
    """One Adam step over ``params`` parameters: :data:`ADAM_FLOPS_PER_PARAM` each, and the
    bytes per parameter of :func:`workload_gen.core.optimizer_state.optimizer_step_bytes`
    (``pa``: the precision-aware optimizer's dtypes, ``precision_aware_dtypes``), less the
    ``b_param`` model-weight write for the ``fp8_weights`` of them that are per-tensor fp8
    primary weights (``--fp8-param-gather``: distrib_optimizer.py ``copy_group_params`` skips
    quantized parameters; their shard is cast instead, :func:`fp8_param_shard_cast`)."""
    nbytes = float(optimizer_step_bytes(optimizer, dtype, b_grad, b_param, pa) * params)
    return ADAM_FLOPS_PER_PARAM * params, nbytes - b_param * fp8_weights if fp8_weights else nbytes


# --- fp8 primary weights (--fp8-param-gather) ---------------------------------------------

FP8_PARAM_SHARD_CAST_BYTES = {"delayed": 9.0, "tensorwise": 11.0}
"""HBM bytes per master-shard element of the optimizer step's cast into the fp8 weight, with
Megatron's ``--fp8-param-gather`` (``DistributedOptimizer._copy_main_params_to_model_params``
-> ``fp8_utils.quantize_param_shard`` -> TE ``quantize_master_weights``,
transformer_engine/pytorch/tensor/utils.py at d0067d0d):
``master_weight.to(model_weight.dtype)`` reads the fp32 shard and writes it in bf16 (4 + 2);
then per recipe
- delayed (``_cast_master_weights_to_fp8_delayed_scaling``): ``update_quantized`` reads the
  bf16 shard and writes the fp8 bytes in place in the weight (2 + 1), the amax taken in the
  same kernel: 9 B;
- tensorwise (``_cast_master_weights_to_fp8_current_scaling``): ``tex.compute_amax`` reads
  the bf16 shard first (2), then the cast (2 + 1): 11 B.
The bf16 model-weight write that the plain step makes (2 B) is not made for these weights:
``copy_group_params`` skips quantized parameters."""


def fp8_param_shard_cast(elements: int, recipe: str) -> Cost:
    """The optimizer step's cast of ``elements`` fp32 master-shard elements into the fp8
    weights (see :data:`FP8_PARAM_SHARD_CAST_BYTES`): ~3 FLOPs per element, memory-bound."""
    return 3.0 * elements, FP8_PARAM_SHARD_CAST_BYTES[recipe] * elements


def fp8_transpose(elements: int) -> Cost:
    """TE's ``post_all_gather_processing`` on a gathered ``Float8Tensor`` weight (utils.py at
    d0067d0d; Megatron calls it after each bucket's all-gather, ``_post_param_sync``): where
    the GPU has no non-TN fp8 GEMM (``is_non_tn_fp8_gemm_supported``: false before Blackwell)
    ``_create_transpose`` reads the fp8 weight and writes its transpose: 1 + 1 B per element."""
    return 0.0, 2.0 * elements
