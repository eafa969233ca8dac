"""Model FLOPs for MFU: the useful work of one iteration, independent of recompute.

Narayanan et al. 2021 (arXiv 2104.04473, Section 5.1) count, per iteration,
``72*B*s*l*h^2 * (1 + s/(6h) + V/(12*l*h))`` FLOPs for GPT: forward GEMMs
(``24*B*s*h^2`` per layer), attention scores and values (``4*B*s^2*h`` per layer, the full
s x s matrix, not halved for the causal mask), the logits (``2*B*s*h*V``), times 3 for
forward plus backward (backward = 2x forward). Recompute is excluded: MFU counts model
FLOPs, not hardware FLOPs (Chowdhery et al. 2022, PaLM, Appendix B). The paper's own
figures (its eq. 3, ``96*B*s*l*h^2 * (1 + s/(6h) + V/(16*l*h))``) count the layers' forward
once more, as full activation recomputation runs it: :func:`narayanan_flops` is that
formula with and without recompute, the one home of both (the measured-run tables turn the
paper's achieved TFLOP/s into step times with it).

:func:`model_flops_per_iteration` generalises the same accounting to GQA, SwiGLU, MLA
and MoE by counting 2 FLOPs per multiply-add over the weights each token actually
passes through (topk routed experts, shared experts, router), plus attention with the
real q/k and v head widths, plus the logits. For GPT-3-style models it reproduces the
paper's formula up to the biases and norms, which the paper leaves out too.
"""
from __future__ import annotations

from workload_gen.core.model_config import ModelConfig
from workload_gen.core.parallel_config import ParallelConfig
from workload_gen.core.params import ParamTensor, layer_tensors

_NOT_MATMUL = ("norm", "bias", "experts", "softmax_offset", "mamba.ssm.")
"""Tensors no token multiplies through: norms, biases, the routed experts (counted apart,
topk of E), the Mamba mixer's conv and SSM parameters (its scan is counted
apart, :func:`mamba_scan_flops`) and GPT-OSS's attention sinks (one logit per head added to the softmax
denominator, an exp-add per query row, not a multiply-add per token: ModelConfig.softmax_type)."""


def _matmul_weights(ts: tuple[ParamTensor, ...], model: ModelConfig) -> float:
    """Weights one token multiplies through in a layer (routed experts: topk of E)."""
    n = 0.0
    for t in ts:
        if t.name == "experts":
            n += t.numel * model.moe_router_topk / model.num_experts
        elif not any(k in t.name for k in _NOT_MATMUL):
            n += t.numel
    return n


def attention_pairs(s: int, span: tuple[str, int] | None, causal: bool = True) -> float:
    """(query, key) pairs one attention head scores on a sequence of ``s`` tokens.

    Full attention (``span`` None): s*s/2 causal (the lower triangle, its diagonal's s/2
    left out, as the kernels have always been counted), s*s otherwise. A sliding window
    ("window", w) lets query i see keys max(0, i-w)..i (Megatron's ``--window-size (w,0)``),
    min(i+1, w+1) of them: the causal band (w+1)(w+2)/2 + (s-w-1)(w+1) when w+1 < s. Chunks
    ("chunk", c) let query i see its own chunk up to itself: c(c+1)/2 per whole chunk and
    r(r+1)/2 for the last r tokens. Non-causal (the MFU convention of Narayanan et al.,
    which counts every query against every key it may see): s*min(w+1, s) for a window,
    c*c per whole chunk plus r*r. A window or chunk covering the sequence (w+1 >= s,
    c >= s) does not bind and counts as full attention."""
    if span is not None:
        kind, n = span
        if kind == "window" and n + 1 < s:
            return (n + 1) * (n + 2) / 2 + (s - n - 1) * (n + 1) if causal else float(s * (n + 1))
        if kind == "chunk" and n < s:
            whole, rest = divmod(s, n)
            if causal:
                return whole * n * (n + 1) / 2 + rest * (rest + 1) / 2
            return float(whole * n * n + rest * rest)
    return 0.5 * s * s if causal else float(s * s)


def mamba_scan_flops(tokens: float, d_inner: int, state_dim: int) -> float:
    """FLOPs of the Mamba-2 selective scan (SSD) over ``tokens`` tokens: Megatron-LM's
    estimate ``7 * tokens * d_inner * state_dim`` (training.py num_floating_point_operations,
    mamba_layer_flops, @d98e8a64; its note says it predates the SSD kernels and is a small
    part of the layer). The one home of the formula: the model FLOPs and the scan op's cost
    (workload_gen.costs.mamba_scan) both take it."""
    return 7.0 * tokens * d_inner * state_dim


def mamba_layer_flops(tokens: float, hidden: int, d_inner: int, heads: int, groups: int, state_dim: int) -> float:
    """Forward FLOPs of one Mamba layer over ``tokens`` tokens, Megatron-LM's formula
    (training.py mamba_layer_flops @d98e8a64): in_proj ``2*T*h*(2*d + 2*G*N + H)``, the scan
    (:func:`mamba_scan_flops`) and out_proj ``2*T*d*h``; the conv1d and norms are left out,
    as there. Departure (docs/design_notes.md): Megatron takes d = 2*hidden whatever
    --mamba-num-heads says; here d is the layer's real heads*head_dim."""
    in_proj = 2.0 * tokens * hidden * (2 * d_inner + 2 * groups * state_dim + heads)
    out_proj = 2.0 * tokens * d_inner * hidden
    return in_proj + mamba_scan_flops(tokens, d_inner, state_dim) + out_proj


def forward_flops_per_sequence(model: ModelConfig, seq_length: int, causal: bool = False) -> float:
    """Forward FLOPs for one sequence of ``seq_length`` tokens (the whole model); a layer
    with a sliding window or chunked attention counts only its :func:`attention_pairs`."""
    s = seq_length
    total = 0.0
    cache: dict[str, float] = {}
    d_qk, d_v = model.qk_dim, model.v_dim
    attn = 2.0 * s * s * model.num_attention_heads * (d_qk + d_v) * (0.5 if causal else 1.0)
    for layer in range(model.num_layers):
        kind = model.layer_kind(layer)
        if kind not in cache:
            cache[kind] = 2.0 * s * _matmul_weights(layer_tensors(model, layer), model)
            if kind == "M":  # in_proj and out_proj are matmul weights above; the scan is not
                cache[kind] += mamba_scan_flops(s, model.mamba_d_inner, model.mamba_state_dim)
        if not model.has_attention(layer):
            total += cache[kind]
            continue
        span = model.attention_span(layer)
        if span is None:
            total += cache[kind] + attn
        else:
            total += cache[kind] + 2.0 * model.num_attention_heads * (d_qk + d_v) * attention_pairs(s, span, causal)
    total += 2.0 * s * model.hidden_size * model.vocab_size
    return total


def model_flops_per_iteration(model: ModelConfig, parallel: ParallelConfig, causal: bool = False) -> float:
    """3 x forward FLOPs x sequences per iteration (global batch), without recompute.

    ``causal=False`` is the Megatron paper's convention (full s^2 attention); pass True to
    count only the causal half.
    """
    return 3.0 * parallel.global_batch * forward_flops_per_sequence(model, parallel.seq_length, causal)


def narayanan_flops(batch: int, seq: int, layers: int, hidden: int, vocab: int, recompute: bool) -> float:
    """Narayanan et al. 2021's FLOPs per iteration of a GPT model: ``24*passes*B*s*l*h^2 *
    (1 + s/(6h) + V/(4*passes*l*h))`` with passes = 3 (forward, and a backward of twice its
    cost) or 4 with full activation recomputation (the layers' forward once more; the
    logits are not recomputed, so their ``6*B*s*h*V`` is the same in both). recompute=True
    is the paper's eq. 3 (96 and V/(16*l*h)), which its reported TFLOP/s use; False its MFU
    count (72 and V/(12*l*h))."""
    passes = 4 if recompute else 3
    return (24 * passes * batch * seq * layers * hidden**2
            * (1 + seq / (6 * hidden) + vocab / (4 * passes * layers * hidden)))
