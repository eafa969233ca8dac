"""Torch implementations of every compute op kind, for measuring on the local device.

Each builder allocates the op's tensors once and returns a :class:`Bench`: ``step`` is the
timed call, ``prepare`` (optional) runs untimed before each step. Backward phases of
non-GEMM ops run the forward in ``prepare`` and time ``autograd.backward`` in ``step``, so
forward and backward are timed separately, as the workload lists them.

GEMMs use the layouts Megatron's linear layers run (weights stored [out, in]):

- fwd        Y[m,n]  = X[m,k] @ W[n,k]^T         (NT)
- bwd-input  dX[m,n] = dY[m,k] @ W[k,n]          (NN)
- bwd-weight dW[m,n] = X[k,m]^T @ dY[k,n]         (TN)

with (m, n, k) the op's own shape (the workload already lists dgrad and wgrad GEMMs with
their shapes). An experts' grouped GEMM runs as Transformer Engine's GroupedLinear does, one
GEMM per expert over TE's four compute streams (equal tokens per expert, as the workload
assumes; :func:`expert_gemm_bench`); other grouped GEMMs as one ``torch.bmm``. FP8 GEMMs of the
per-tensor recipes run through ``torch._scaled_mm`` in cuBLASLt's TN layout, per expert the
same way (:func:`fp8_gemm_bench`).

torch is imported by the caller (compute_profile.measure) and passed in, so importing this
module costs nothing on the analytical path.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from workload_gen.core.errors import ConfigError
from workload_gen.core.records import EXPERT_OP_PREFIX, OpKind, Phase, attention_mask

TORCH_DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}
DROPOUT_P = 0.1
"""Megatron's default hidden dropout for the bias-dropout-add and embedding dropout."""
WINDOW_PROXY_TILE = 128
"""Query rows per tile of the sliding-window proxy benchmark (FlashAttention's 128-row tiles)."""


@dataclass(slots=True)
class Bench:
    step: Callable[[], Any]
    prepare: Callable[[], Any] | None = None
    note: str = ""
    leaves: tuple[Any, ...] = ()
    """Tensors whose gradients a backward step computes (for inspection)."""


def torch_dtype(torch: Any, dtype: str) -> Any:
    try:
        return getattr(torch, TORCH_DTYPES[dtype])
    except KeyError:
        raise ConfigError("dtype", dtype, f"measurable dtypes: {', '.join(TORCH_DTYPES)}") from None


def _autograd(torch: Any, forward: Callable[[], Any], leaves: list[Any]) -> Bench:
    """Time only the backward of ``forward()``: the forward runs untimed in prepare."""
    state: dict[str, Any] = {}

    def prepare() -> None:
        for t in leaves:
            t.grad = None
        out = forward()
        state["out"] = out
        state["grad"] = torch.ones_like(out) if "grad" not in state or state["grad"].shape != out.shape else state["grad"]

    def step() -> None:
        state["out"].backward(state["grad"])

    return Bench(step, prepare, leaves=tuple(leaves))


def _fwd_or_bwd(torch: Any, phase: Phase, forward: Callable[[], Any], leaves: list[Any]) -> Bench:
    if phase is Phase.FWD:
        def step() -> None:
            with torch.no_grad():
                forward()
        return Bench(step)
    return _autograd(torch, forward, leaves)


def gemm_bench(torch: Any, m: int, n: int, k: int, phase: Phase, dt: Any, dev: Any, groups: int = 0) -> Bench:
    """One GEMM (groups=0) or a batch of ``groups`` equal GEMMs, in the phase's layout."""
    lead = (groups,) if groups else ()
    mm = torch.bmm if groups else torch.matmul
    tr = (lambda t: t.transpose(-1, -2))
    if phase is Phase.FWD:
        a = torch.randn(*lead, m, k, dtype=dt, device=dev)
        b = torch.randn(*lead, n, k, dtype=dt, device=dev)
        return Bench(lambda: mm(a, tr(b)), note="NT", leaves=(a, b))
    if phase is Phase.BWD_INPUT:
        a = torch.randn(*lead, m, k, dtype=dt, device=dev)
        b = torch.randn(*lead, k, n, dtype=dt, device=dev)
        return Bench(lambda: mm(a, b), note="NN", leaves=(a, b))
    a = torch.randn(*lead, k, m, dtype=dt, device=dev)
    b = torch.randn(*lead, k, n, dtype=dt, device=dev)
    return Bench(lambda: mm(tr(a), b), note="TN", leaves=(a, b))


TE_COMPUTE_STREAMS = 4
"""Transformer Engine runs an experts' grouped GEMM as one cuBLAS GEMM per expert, expert i on
compute stream i % 4, after the calling stream and before it continues
(transformer_engine/common/util/multi_stream.cpp ``num_compute_streams = 4``;
gemm/cublaslt_gemm.cu ``multi_stream_cublas_gemm``, TE 2.14)."""


def per_expert_calls(torch: Any, dev: Any, calls: list[Callable[[], Any]]) -> Callable[[], Any]:
    """One timed step that runs ``calls`` as Transformer Engine's grouped GEMM does: on a CUDA
    device each on compute stream i % :data:`TE_COMPUTE_STREAMS` behind the current stream, the
    current stream then waiting for all of them (so CUDA events on it time the whole group);
    elsewhere in turn. Returns the last call's result."""
    if getattr(dev, "type", "") != "cuda":
        def step() -> Any:
            out = None
            for call in calls:
                out = call()
            return out
        return step
    streams = [torch.cuda.Stream(device=dev) for _ in range(min(TE_COMPUTE_STREAMS, len(calls)))]

    def step_cuda() -> Any:
        current = torch.cuda.current_stream(dev)
        for s in streams:
            s.wait_stream(current)
        out = None
        for i, call in enumerate(calls):
            with torch.cuda.stream(streams[i % len(streams)]):
                out = call()
        for s in streams:
            current.wait_stream(s)
        return out
    return step_cuda


def _per_expert_note(count: int, dev: Any) -> str:
    """What :func:`per_expert_calls` ran, for a row's note."""
    streams = f", {TE_COMPUTE_STREAMS} streams" if getattr(dev, "type", "") == "cuda" else ""
    return f"{count} calls (one per expert{streams})"


def expert_gemm_bench(torch: Any, m: int, n: int, k: int, phase: Phase, dt: Any, dev: Any, groups: int) -> Bench:
    """An experts' grouped GEMM as Transformer Engine's GroupedLinear runs it: ``groups`` GEMMs of
    m x n x k, one call per expert (:func:`per_expert_calls`), in the phase's layout; per-call
    costs are in the time, as in a training step (a batched ``bmm`` would hide them)."""
    benches = [gemm_bench(torch, m, n, k, phase, dt, dev) for _ in range(max(1, groups))]
    step = per_expert_calls(torch, dev, [b.step for b in benches])
    return Bench(step, note=f"{benches[0].note}, {_per_expert_note(len(benches), dev)}",
                 leaves=tuple(t for b in benches for t in b.leaves))


FP8_ALIGN = 16
"""cuBLASLt's FP8 GEMMs need K and N in multiples of 16 (torch._scaled_mm checks it on CUDA);
Transformer Engine pads each expert's rows to 16 for the same reason (its Fp8Padding)."""


def _aligned(x: int) -> int:
    return -(-x // FP8_ALIGN) * FP8_ALIGN


def fp8_gemm_bench(torch: Any, m: int, n: int, k: int, phase: Phase, dev: Any, groups: int = 0) -> Bench:
    """A per-tensor-scaled FP8 GEMM (or ``groups`` of them, one call per expert), as Transformer
    Engine runs the delayed and current scaling recipes: one cuBLASLt FP8 GEMM with a scalar
    scale per operand (``torch._scaled_mm``), bf16 output.

    Why TN in every phase: Hopper's FP8 tensor cores take only the TN layout, so TE quantizes
    a transposed copy of each operand the dgrad and wgrad GEMMs read (the workload prices those
    copies in its quantize ops) and every FP8 GEMM is Y[m,n] = A[m,k] @ B[n,k]^T. Formats are
    Megatron's ``--fp8-format hybrid`` (NVIDIA's recipes): E4M3 in the forward, the gradient
    operand in E5M2 in the backward (dgrad: dY x W; wgrad: X^T x dY^T); the workload does not
    record the format, and ``e4m3`` runs E4M3 there on the same tensor-core path. A grouped GEMM runs
    one GEMM per expert over TE's compute streams, as TE's grouped GEMM does on Hopper
    (:func:`per_expert_calls`), so per-call costs are in the time. Block-scaled recipes (MXFP8, blockwise) are
    other kernels and are not measured here (compute_profile.measure)."""
    e4m3, e5m2 = torch.float8_e4m3fn, torch.float8_e5m2
    fmt_a, fmt_b = {Phase.FWD: (e4m3, e4m3), Phase.BWD_INPUT: (e5m2, e4m3)}.get(phase, (e4m3, e5m2))
    kp, np_ = _aligned(k), _aligned(n)
    count = max(1, groups)
    a = [torch.randn(m, kp, device=dev).to(fmt_a) for _ in range(count)]
    b = [torch.randn(np_, kp, device=dev).to(fmt_b) for _ in range(count)]
    one = torch.ones((), device=dev)

    def call(x: Any, w: Any) -> Callable[[], Any]:
        return lambda: torch._scaled_mm(x, w.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16)

    step = per_expert_calls(torch, dev, [call(x, w) for x, w in zip(a, b)])
    pad = f", K/N padded to {kp}/{np_}" if (kp, np_) != (k, n) else ""
    formats = "e4m3 x e4m3" if fmt_a is fmt_b else ("e5m2 x e4m3" if fmt_a is e5m2 else "e4m3 x e5m2")
    loop = f", {_per_expert_note(count, dev)}" if groups else ""
    return Bench(step, note=f"fp8 per-tensor _scaled_mm TN {formats}{loop}{pad}", leaves=tuple(a + b))


def build_bench(torch: Any, kind: OpKind, phase: Phase, shape: tuple[int, ...], dtype: str, name: str,
                dev: Any, *, normalization: str = "layernorm", topk: int = 2) -> Bench:
    """The benchmark of one op key on device ``dev``."""
    F = torch.nn.functional
    if dtype == "fp8" and kind in (OpKind.GEMM, OpKind.GROUPED_GEMM):
        g, (m, n, k) = (shape[0], shape[1:4]) if kind is OpKind.GROUPED_GEMM else (0, shape[:3])
        return fp8_gemm_bench(torch, m, n, k, phase, dev, groups=g)
    dt = torch_dtype(torch, dtype)

    def leaf(*size: int, dtype: Any = dt) -> Any:
        return torch.randn(*size, dtype=dtype, device=dev, requires_grad=phase is not Phase.FWD)

    if kind is OpKind.GEMM:
        m, n, k = shape[:3]
        return gemm_bench(torch, m, n, k, phase, dt, dev)
    if kind is OpKind.GROUPED_GEMM:
        g, m, n, k = shape[:4]
        if name.startswith(EXPERT_OP_PREFIX):
            return expert_gemm_bench(torch, m, n, k, phase, dt, dev, g)
        b = gemm_bench(torch, m, n, k, phase, dt, dev, groups=g)
        b.note = f"bmm {b.note}"
        return b
    if kind is OpKind.ATTENTION:
        bsz, heads, sq, skv, hd = shape[:5]
        causal, window = attention_mask(shape)
        if window > 0:
            # torch's SDPA has no sliding window on its flash path (a band mask falls back to
            # a kernel that scores every pair), so a proxy with the same work: each 128-row
            # query tile against the w + 128 keys its tiles cover, non-causal, as a batch.
            tiles = -(-sq // WINDOW_PROXY_TILE)
            keys = min(window + WINDOW_PROXY_TILE, skv)
            q = leaf(bsz * heads * tiles, 1, WINDOW_PROXY_TILE, hd)
            kk, v = leaf(bsz * heads * tiles, 1, keys, hd), leaf(bsz * heads * tiles, 1, keys, hd)
            b = _fwd_or_bwd(torch, phase, lambda: F.scaled_dot_product_attention(q, kk, v), [q, kk, v])
            b.note = "sdpa window proxy"
            return b
        q, kk, v = leaf(bsz, heads, sq, hd), leaf(bsz, heads, skv, hd), leaf(bsz, heads, skv, hd)
        is_causal = causal and sq == skv
        b = _fwd_or_bwd(torch, phase, lambda: F.scaled_dot_product_attention(q, kk, v, is_causal=is_causal), [q, kk, v])
        b.note = "sdpa" + (" causal" if is_causal else "")
        return b
    if kind is OpKind.NORM:
        rows, width = shape[:2]
        x = leaf(rows, width)
        w = leaf(width)
        rms = normalization == "rmsnorm" or name in ("kv_norm", "q_norm", "k_norm")
        if rms:
            fwd = lambda: F.rms_norm(x, (width,), w, 1e-5)  # noqa: E731
        else:
            bias = leaf(width)
            fwd = lambda: F.layer_norm(x, (width,), w, bias, 1e-5)  # noqa: E731
        b = _fwd_or_bwd(torch, phase, fwd, [x, w])
        b.note = "rms_norm" if rms else "layer_norm"
        return b
    if kind is OpKind.ELEMENTWISE:
        rows, width = shape[:2]
        if name.endswith(("dbias", "sink_grad")):
            # a parameter gradient by column sum (layer_ops: bias gradient, attention sink
            # gradient): the same reduction in every phase, not the autograd of a forward
            x = torch.randn(rows, width, dtype=torch.float32 if name.endswith("sink_grad") else dt, device=dev)
            return Bench(lambda: x.sum(dim=0), note="column sum")
        if name.endswith("swiglu"):
            x = leaf(rows, 2 * width)
            fwd = lambda: (lambda a, c: F.silu(a) * c)(*x.chunk(2, dim=-1))  # noqa: E731
            note = "swiglu"
        elif name.endswith("squared_relu"):
            x = leaf(rows, width)
            fwd = lambda: F.relu(x).square()  # noqa: E731
            note = "squared_relu"
        elif name.endswith("gelu"):
            x = leaf(rows, width)
            fwd = lambda: F.gelu(x, approximate="tanh")  # noqa: E731
            note = "gelu"
        elif "residual" in name:
            x, res = leaf(rows, width), leaf(rows, width)
            fwd = lambda: res + F.dropout(x, DROPOUT_P, training=True)  # noqa: E731
            note = "dropout-add"
        elif "dropout" in name:
            x = leaf(rows, width)
            fwd = lambda: F.dropout(x, DROPOUT_P, training=True)  # noqa: E731
            note = "dropout"
        else:
            x, y = leaf(rows, width), leaf(rows, width)
            fwd = lambda: x + y  # noqa: E731
            note = "add (generic elementwise)"
        b = _fwd_or_bwd(torch, phase, fwd, [x])
        b.note = note
        return b
    if kind is OpKind.ROPE and len(shape) == 3:
        # Megatron-Core's eager RoPE (rope_utils._apply_rotary_pos_emb_bshd; costs.rope_unfused):
        # q and k as one [tokens, heads, d] tensor (d = 64 where it divides the width), the
        # angles per token; cos/sin scaled by YaRN's factor and cast, x*cos + rotate_half(x)*sin,
        # then the concatenation with the (empty) unrotated part
        rows, width = shape[:2]
        hd = 64 if width % 64 == 0 else width
        x = leaf(rows, width // hd, hd)
        freqs = torch.rand(rows, 1, hd, device=dev, dtype=torch.float32)
        scale = 1.3466  # GPT-OSS's cos/sin scale (ModelConfig.rope_cos_sin_scale); any value runs the same kernels

        def fwd() -> Any:
            cos, sin = (torch.cos(freqs) * scale).to(dt), (torch.sin(freqs) * scale).to(dt)
            t, t_pass = x[..., :hd], x[..., hd:]
            x1, x2 = torch.chunk(t, 2, dim=-1)
            return torch.cat((t * cos + torch.cat((-x2, x1), dim=-1) * sin, t_pass), dim=-1)
        b = _fwd_or_bwd(torch, phase, fwd, [x])
        b.note = "eager rope (Megatron unfused)"
        return b
    if kind is OpKind.ROPE:
        rows, width = shape[:2]
        half = width // 2
        x = leaf(rows, 2 * half)
        ang = torch.rand(rows, half, device=dev, dtype=torch.float32)
        cos, sin = ang.cos().to(dt), ang.sin().to(dt)

        def fwd() -> Any:
            x1, x2 = x[:, :half], x[:, half:]
            return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)
        b = _fwd_or_bwd(torch, phase, fwd, [x])
        b.note = "rotate-half"
        return b
    if kind is OpKind.EMBEDDING:
        tokens, hidden, vocab = shape[:3]
        ids = torch.randint(0, vocab, (tokens,), device=dev)
        w = leaf(vocab, hidden)
        b = _fwd_or_bwd(torch, Phase.FWD if phase is Phase.FWD else Phase.BWD_WEIGHT, lambda: F.embedding(ids, w), [w])
        b.note = "embedding"
        return b
    if kind is OpKind.LOSS:
        tokens, vocab = shape[:2]
        logits = leaf(tokens, vocab)
        target = torch.randint(0, vocab, (tokens,), device=dev)
        b = _fwd_or_bwd(torch, phase, lambda: F.cross_entropy(logits, target), [logits])
        b.note = "cross_entropy"
        return b
    if kind is OpKind.ROUTER:
        tokens, hidden, experts = shape[:3]
        if phase is Phase.FWD:
            x = torch.randn(tokens, hidden, dtype=dt, device=dev)
            w = torch.randn(experts, hidden, dtype=dt, device=dev)
            k_ = min(topk, experts)
            return Bench(lambda: torch.topk(torch.softmax(F.linear(x, w).float(), dim=-1), k_, dim=-1),
                         note="linear+softmax+topk")
        if phase is Phase.BWD_INPUT:  # dX[t,h] = dlogits[t,E] @ W[E,h]
            return gemm_bench(torch, tokens, hidden, experts, Phase.BWD_INPUT, dt, dev)
        return gemm_bench(torch, experts, hidden, tokens, Phase.BWD_WEIGHT, dt, dev)  # dW[E,h] = dl^T @ X
    if kind is OpKind.PERMUTE:
        rows, hidden = shape[:2]
        x = leaf(rows, hidden)
        idx = torch.randperm(rows, device=dev)
        if name == "unpermute":
            probs = torch.rand(rows, 1, dtype=dt, device=dev)
            fwd = lambda: (x * probs).index_select(0, idx)  # noqa: E731
        else:
            fwd = lambda: x.index_select(0, idx)  # noqa: E731
        b = _fwd_or_bwd(torch, phase, fwd, [x])
        b.note = "index_select"
        return b
    raise ConfigError("kind", kind.value, "no torch benchmark for this kind (optimizer is measured separately)")


def adam_bench(torch: Any, params: int, dev: Any) -> Bench:
    """One Adam step over a flat fp32 shard of ``params`` elements (fused where torch has it)."""
    p = torch.nn.Parameter(torch.randn(params, dtype=torch.float32, device=dev))
    p.grad = torch.randn_like(p)
    opt = None
    for kwargs in ({"fused": True}, {"foreach": True}, {}):
        try:
            opt = torch.optim.Adam([p], lr=1e-4, weight_decay=0.1, **kwargs)
            opt.step()  # fails here if the variant is unsupported on this device
            variant = next(iter(kwargs), "single-tensor")
            break
        except (RuntimeError, TypeError, ValueError):
            opt = None
    if opt is None:  # pragma: no cover - torch always has the plain variant
        raise RuntimeError("torch.optim.Adam unavailable")
    return Bench(opt.step, note=f"Adam {variant}")
