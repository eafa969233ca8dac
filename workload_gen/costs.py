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
