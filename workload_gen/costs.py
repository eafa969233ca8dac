"""FLOPs and HBM bytes of single kernels, in one place so the formulas are read once.

Conventions: a multiply-add is 2 FLOPs; bytes are what a kernel reads plus writes in
HBM (the roofline memory term), ignoring caches. ``b_in``/``b_out`` are element sizes
in bytes. Element-wise FLOP counts per element are nominal (they only matter for the
roofline estimate, where these kernels are memory-bound anyway).
"""
from __future__ import annotations

NORM_FLOPS = {"layernorm": 7.0, "rmsnorm": 4.0}
"""Per element, forward: LayerNorm = mean, variance, subtract, scale, shift (~7); RMSNorm
= square, sum, scale, weight (~4). Backward is taken as twice that."""


def gemm(m: int, n: int, k: int, b_in: int, b_out: int) -> tuple[float, float]:
    """C[m,n] = A[m,k] @ B[k,n]: 2mnk FLOPs; reads A and B, writes C."""
    return 2.0 * m * n * k, float((m * k + k * n) * b_in + m * n * b_out)


def wgrad_gemm(k: int, n: int, m: int, b_in: int, b_grad: int) -> tuple[float, float]:
    """dW[k,n] = X^T[k,m] @ dY[m,n] accumulated into the main gradient (Megatron's
    gradient-accumulation fusion): reads X and dY, reads and writes dW in the grad dtype."""
    return 2.0 * m * n * k, float((m * k + m * n) * b_in + 2 * k * n * b_grad)


def grouped_gemm(groups: int, m: float, n: int, k: int, b_in: int, b_out: int) -> tuple[float, float]:
    """``groups`` independent GEMMs of m x n x k (m may be fractional: balanced routing)."""
    return 2.0 * groups * m * n * k, float(groups * ((m * k + k * n) * b_in + m * n * b_out))


def grouped_wgrad(groups: int, k: int, n: int, m: float, b_in: int, b_grad: int) -> tuple[float, float]:
    return 2.0 * groups * m * n * k, float(groups * ((m * k + m * n) * b_in + 2 * k * n * b_grad))


def attention_fwd(batch: int, heads: int, kv_heads: int, sq: int, skv: int, d_qk: int, d_v: int,
                  causal: bool, b: int) -> tuple[float, float]:
    """Fused (flash) attention forward: S = Q K^T (2*sq*skv*d_qk per head) and O = P V
    (2*sq*skv*d_v per head), halved when causal (only the lower triangle is computed).
    Bytes: read Q, K, V, write O and the fp32 log-sum-exp; S and P stay on chip."""
    frac = 0.5 if causal else 1.0
    flops = 2.0 * batch * heads * sq * skv * (d_qk + d_v) * frac
    q = batch * sq * heads * d_qk
    kv = batch * skv * kv_heads * (d_qk + d_v)
    o = batch * sq * heads * d_v
    return flops, float((q + kv + o) * b + batch * heads * sq * 4)


def attention_bwd(batch: int, heads: int, kv_heads: int, sq: int, skv: int, d_qk: int, d_v: int,
                  causal: bool, b: int) -> tuple[float, float]:
    """Flash-attention backward: recomputes S (1 GEMM) and does dV, dP, dQ, dK (4 GEMMs):
    5 GEMMs against the forward's 2, so 2.5x the forward FLOPs. Bytes: reads Q, K, V, O,
    dO and the log-sum-exp; writes dQ, dK, dV."""
    f, _ = attention_fwd(batch, heads, kv_heads, sq, skv, d_qk, d_v, causal, b)
    q = batch * sq * heads * d_qk
    kv = batch * skv * kv_heads * (d_qk + d_v)
    o = batch * sq * heads * d_v
    return 2.5 * f, float((2 * q + 2 * kv + 2 * o) * b + batch * heads * sq * 4)


FP8_CAST_BYTES = {"delayed": 4.0, "tensorwise": 6.0, "mxfp8": 4.125, "blockwise": 4.0625}
"""HBM bytes per element to quantize one bf16 GEMM input for Transformer Engine's FP8 GEMMs.

The cast kernel reads the bf16 tensor (2 B) and writes it twice in fp8, row-wise for this
GEMM and column-wise (transposed) for the backward GEMM that reuses it (1 + 1 B): 4 B,
with the amax reduction fused in. Per recipe:
- delayed: the scale comes from the amax history, so nothing more (4 B);
- tensorwise (current scaling): the amax must be known before the cast, a second read
  pass over the tensor (+2 B);
- mxfp8: one e8m0 scale per 32 elements, in both directions (+2/32 B);
- blockwise: one fp32 scale per 1x128 block in each direction (+2*4/128 B)."""


def fp8_cast(rows: int, cols: int, recipe: str) -> tuple[float, float]:
    """Quantize a [rows, cols] bf16 tensor for FP8 GEMMs: ~3 FLOPs per element (scale,
    clamp, amax), memory-bound (see FP8_CAST_BYTES)."""
    e = rows * cols
    return 3.0 * e, FP8_CAST_BYTES[recipe] * e


def attention_scores_bytes(batch: int, heads: int, sq: int, skv: int, backward: bool) -> float:
    """HBM bytes of an unfused attention's score handling around its two batched GEMMs,
    per score element (bf16 scores, 1-byte dropout mask), Megatron's fused
    scale-mask-softmax then dropout:
    forward: softmax reads the scores and writes the probabilities (2 + 2), dropout reads
    them and writes the dropped probabilities and the mask (2 + 2 + 1): 9 B;
    backward: dropout's backward reads the incoming gradient and the mask and writes
    (2 + 1 + 2), softmax's reads it and the probabilities and writes dS (2 + 2 + 2): 11 B."""
    return (11.0 if backward else 9.0) * batch * heads * sq * skv
