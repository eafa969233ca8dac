"""Tables of measured kernel times: one kernel shape per row, its measured seconds.

A kernel table is public kernel-level evidence (what a GEMM or an attention kernel of a
given shape takes on one machine), the kind of data the compute model's priors come from.
Its rows become :class:`~workload_gen.core.records.ComputeOp` with the FLOPs and bytes the
workload generator would give the same op, so the estimator can be checked against it
(compute_profile.kernel_check).

CSV columns (units: seconds; sizes in elements; ``grad_bytes`` in bytes):

``kind``        gemm, grouped_gemm or attention
``phase``       fwd, bwd-input (dgrad) or bwd-weight (wgrad)
``groups``      grouped GEMMs (MoE experts, one GEMM each): the number of experts in the
                call (else empty)
``m, n, k``     GEMMs: output rows and columns and the reduction length, in the workload
                generator's orientation (forward: tokens x out x in; dgrad: tokens x in x
                out; wgrad: in x out x tokens)
``grad_bytes``  wgrad: bytes per element of the gradient it accumulates into (4 = fp32)
``batch, heads, kv_heads, seq, d_qk, d_v``
                attention (self-attention over ``seq`` tokens)
``time_s``      the measured kernel time
``causal``      attention, optional: 1 (the default when absent or empty) for a causal
                mask, 0 for none
``window``      attention, optional: a causal sliding window of this many keys (0 or empty:
                none), as the workload generator's ``--window-size``

:func:`from_simumax_system` reads the per-shape efficiency tables of a SimuMax system
file (``accelerator.op.<name>.accurate_efficient_factor``: efficiency = SimuMax's FLOP
count / (time x ``tflops``)) and turns each entry back into seconds, so the table carries
no FLOP convention of its own.
"""
from __future__ import annotations

import csv
import json
import math
import os
from pathlib import Path

from formats.atomic import atomic_write
from workload_gen import costs
from workload_gen.core.errors import FormatError
from workload_gen.core.record import record
from workload_gen.core.records import EXPERT_OP_PREFIX, ComputeOp, OpKind, Phase

COLUMNS = ("kind", "phase", "groups", "m", "n", "k", "grad_bytes", "batch", "heads", "kv_heads", "seq",
           "d_qk", "d_v", "time_s")
OPTIONAL_COLUMNS = ("causal", "window")
"""Attention mask columns a table may leave out (older tables: causal, no window)."""
_KINDS = {"gemm": OpKind.GEMM, "grouped_gemm": OpKind.GROUPED_GEMM, "attention": OpKind.ATTENTION}
_PHASES = {"fwd": Phase.FWD, "bwd-input": Phase.BWD_INPUT, "bwd-weight": Phase.BWD_WEIGHT}
_ACT_BYTES = 2
"""The tables hold bf16 kernels: 2-byte inputs and outputs."""


@record
class MeasuredKernel:
    """One row: the op as the workload generator would build it, and its measured time."""

    op: ComputeOp
    time_s: float
    grad_bytes: int = 0
    """Weight gradients: bytes per element of the gradient accumulated into; else 0."""


def _int(path: str, line: int, row: dict[str, str], col: str) -> int:
    raw = (row.get(col) or "").strip()
    try:
        v = int(raw)
    except ValueError:
        raise FormatError(path, line, f"column '{col}' is '{raw}', expected a positive integer") from None
    if v <= 0:
        raise FormatError(path, line, f"column '{col}' is {v}, expected a positive integer")
    return v


def _mask(path: str, line: int, row: dict[str, str]) -> tuple[bool, int]:
    """An attention row's (causal, window): causal unless ``causal`` is 0; no window unless
    ``window`` is a positive key count, which needs the causal mask (the workload's own rule)."""
    raw_c = (row.get("causal") or "").strip()
    if raw_c not in ("", "0", "1"):
        raise FormatError(path, line, f"column 'causal' is '{raw_c}', expected 1 (causal), 0 (no mask) or empty")
    causal = raw_c != "0"
    raw_w = (row.get("window") or "").strip()
    if raw_w in ("", "0"):
        return causal, 0
    window = _int(path, line, row, "window")
    if not causal:
        raise FormatError(path, line, f"column 'window' is {window} with causal 0; a sliding window is causal here")
    return causal, window


def _op(path: str, line: int, row: dict[str, str]) -> tuple[ComputeOp, int]:
    """The row's op as the workload generator builds it, and its gradient width (wgrad only, else 0)."""
    kind, phase = _KINDS.get(row.get("kind", "")), _PHASES.get(row.get("phase", ""))
    if kind is None:
        raise FormatError(path, line, f"column 'kind' is '{row.get('kind')}', expected one of {', '.join(_KINDS)}")
    if phase is None:
        raise FormatError(path, line, f"column 'phase' is '{row.get('phase')}', expected one of {', '.join(_PHASES)}")
    B = _ACT_BYTES
    if kind is OpKind.ATTENTION:
        b, h, g, s, dq, dv = (_int(path, line, row, c) for c in ("batch", "heads", "kv_heads", "seq", "d_qk", "d_v"))
        if phase is Phase.BWD_WEIGHT:
            raise FormatError(path, line, "attention has no 'bwd-weight' phase (its backward is 'bwd-input')")
        causal, window = _mask(path, line, row)
        fb = costs.attention_fwd if phase is Phase.FWD else costs.attention_bwd
        span = ("window", window) if window else None
        shape = (b, h, s, s, dq, int(causal)) + ((window,) if window else ())
        return ComputeOp("attention", 0, phase, kind, shape, "bf16", *fb(b, h, g, s, s, dq, dv, causal, B, span)), 0
    m, n, k = (_int(path, line, row, c) for c in ("m", "n", "k"))
    wgrad = phase is Phase.BWD_WEIGHT
    gb = _int(path, line, row, "grad_bytes") if wgrad else 0
    if kind is OpKind.GEMM:
        fb = costs.wgrad_gemm(m, n, k, B, gb) if wgrad else costs.gemm(m, n, k, B, B)
        return ComputeOp("gemm", 0, phase, kind, (m, n, k), "bf16", *fb), gb
    groups = _int(path, line, row, "groups")
    fb = costs.grouped_wgrad(groups, m, n, k, B, gb) if wgrad else costs.grouped_gemm(groups, m, n, k, B, B)
    # named as the workload generator names MoE experts: their grouped GEMM issues per expert
    return ComputeOp(f"{EXPERT_OP_PREFIX}gemm", 0, phase, kind, (groups, m, n, k), "bf16", *fb), gb


def read_kernel_table(path: str | os.PathLike[str]) -> list[MeasuredKernel]:
    """The rows of a kernel-table CSV; a malformed row raises FormatError naming its line."""
    p = str(path)
    try:
        with open(p, newline="") as fh:
            reader = csv.DictReader(fh)
            missing = [c for c in COLUMNS if c not in (reader.fieldnames or [])]
            if missing:
                raise FormatError(p, 1, f"missing column(s) {', '.join(missing)}; a kernel table has {', '.join(COLUMNS)}")
            out = []
            for line, row in enumerate(reader, start=2):
                raw = (row.get("time_s") or "").strip()
                try:
                    t = float(raw)
                except ValueError:
                    t = math.nan
                if not math.isfinite(t) or t <= 0:
                    raise FormatError(p, line, f"column 'time_s' is '{raw}', expected seconds above 0")
                op, gb = _op(p, line, row)
                out.append(MeasuredKernel(op, t, gb))
    except OSError as e:
        raise FormatError(p, None, f"cannot read the kernel table: {e.strerror}") from None
    if not out:
        raise FormatError(p, None, "the kernel table has no rows")
    return out


def _fields(key: str, path: str, where: str) -> dict[str, str]:
    """SimuMax's shape keys are 'a=1, b=x, ...'."""
    out = {}
    for part in key.split(","):
        name, sep, value = part.partition("=")
        if not sep:
            raise FormatError(path, None, f"{where}: shape key '{key}' is not 'name=value, ...'")
        out[name.strip()] = value.strip()
    return out


def _ints(fields: dict[str, str], names: tuple[str, ...], path: str, where: str) -> tuple[int, ...]:
    """The named integer fields of a SimuMax shape key."""
    try:
        return tuple(int(fields[n]) for n in names)
    except (KeyError, ValueError):
        raise FormatError(path, None, f"{where}: needs integer fields {', '.join(names)}") from None


def _seconds(flops: float, efficiency: object, tflops: float, path: str, where: str) -> float:
    if isinstance(efficiency, bool) or not isinstance(efficiency, (int, float)) or not efficiency > 0:
        raise FormatError(path, None, f"{where}: efficiency {efficiency!r} is not a number above 0")
    return flops / (float(efficiency) * tflops * 1e12)


def from_simumax_system(path: str | os.PathLike[str]) -> list[dict[str, object]]:
    """Rows (dicts with :data:`COLUMNS`) from a SimuMax system file's per-shape tables:
    ``matmul`` (layout TN = forward, NN = dgrad, NT = wgrad, its dW^T output turned to
    the workload's dW), ``group_matmul`` (stage
    fwd / bwd_grad_act / bwd_grad_w) and ``sdp_fwd`` / ``sdp_bwd`` (causal; SimuMax counts
    the full ``seq^2`` score matrix, 2 (forward) or 5 (backward) x batch x seq^2 x
    max(heads, kv_heads) x (d_qk + d_v) FLOPs). Attention entries with non-contiguous
    q/k/v and batched GEMMs (b > 1) are left out."""
    p = str(path)
    try:
        data = json.loads(Path(p).read_text())
        ops = data["accelerator"]["op"]
    except OSError as e:
        raise FormatError(p, None, f"cannot read the SimuMax system file: {e.strerror}") from None
    except (ValueError, KeyError, TypeError):
        raise FormatError(p, None, "not a SimuMax system file (needs accelerator.op.<name>.accurate_efficient_factor)") from None
    rows: list[dict[str, object]] = []

    def table(name: str) -> tuple[float, dict[str, object]]:
        entry = ops.get(name) or {}
        return float(entry.get("tflops", 0.0)), entry.get("accurate_efficient_factor") or {}

    tflops, effs = table("matmul")
    for key, eff in effs.items():
        f = _fields(key, p, "matmul")
        b, m, n, k = _ints(f, ("b", "m", "n", "k"), p, f"matmul '{key}'")
        if b != 1:
            continue
        phase = {"TN": "fwd", "NN": "bwd-input", "NT": "bwd-weight"}.get(f.get("layout", ""))
        if phase is None:
            raise FormatError(p, None, f"matmul: layout '{f.get('layout')}' in '{key}' is not TN, NN or NT")
        gb = 4 if f.get("out_dtype") == "fp32" else 2
        if phase == "bwd-weight":
            # NT computes dW^T[out, in] = dY^T X; the workload generator's wgrad op is
            # dW[in, out] (layer_ops: shape (k_in, n_out, tokens)), the same kernel's FLOPs
            m, n = n, m
        rows.append({"kind": "gemm", "phase": phase, "m": m, "n": n, "k": k,
                     "grad_bytes": gb if phase == "bwd-weight" else "",
                     "time_s": _seconds(2.0 * m * n * k, eff, tflops, p, f"matmul '{key}'")})
    tflops, effs = table("group_matmul")
    for key, eff in effs.items():
        f = _fields(key, p, "group_matmul")
        g, M, N, K = _ints(f, ("ng", "M", "N", "K"), p, f"group_matmul '{key}'")
        stage = f.get("stage", "")
        shape = {"fwd": ("fwd", M, N, K), "bwd_grad_act": ("bwd-input", M, K, N),
                 "bwd_grad_w": ("bwd-weight", K, N, M)}.get(stage)
        if shape is None:
            raise FormatError(p, None, f"group_matmul: stage '{stage}' in '{key}' is not fwd, bwd_grad_act or bwd_grad_w")
        phase, m, n, k = shape
        gb = 4 if f.get("main_grad_dtype") == "fp32" else 2
        rows.append({"kind": "grouped_gemm", "phase": phase, "groups": g, "m": m, "n": n, "k": k,
                     "grad_bytes": gb if phase == "bwd-weight" else "",
                     "time_s": _seconds(2.0 * g * M * N * K, eff, tflops, p, f"group_matmul '{key}'")})
    for name, phase, mult in (("sdp_fwd", "fwd", 2.0), ("sdp_bwd", "bwd-input", 5.0)):
        tflops, effs = table(name)
        for key, eff in effs.items():
            f = _fields(key, p, name)
            if f.get("qkv_contiguous", "True") != "True":
                continue
            b, s, h, g, dq, dv = _ints(f, ("batch", "seq_len", "head_num", "kv_head_num", "qk_head_dim",
                                           "v_head_dim"), p, f"{name} '{key}'")
            flops = mult * b * s * s * max(h, g) * (dq + dv)
            rows.append({"kind": "attention", "phase": phase, "batch": b, "heads": h, "kv_heads": g, "seq": s,
                         "d_qk": dq, "d_v": dv, "time_s": _seconds(flops, eff, tflops, p, f"{name} '{key}'")})
    if not rows:
        raise FormatError(p, None, "the SimuMax system file has no per-shape efficiency entries")
    return rows


CUDNN_MASKS = {"top_left": 1, "no_mask": 0}
"""cuDNN frontend's SDPA benchmark masks: top_left is the causal mask of self-attention."""


def from_cudnn_frontend_sdpa(path: str | os.PathLike[str]) -> list[dict[str, object]]:
    """Rows (dicts with :data:`COLUMNS` and the mask columns) from a results CSV of cuDNN
    frontend's SDPA training benchmark (NVIDIA/cudnn-frontend benchmark/sdpa_benchmark_training):
    the cuDNN backend's bf16 self-attention kernels that ran, forward and non-deterministic
    backward (what Transformer Engine runs unless told to be deterministic). Either layout
    the benchmark writes: one pass per row (``profile_pass`` fwd / bwd, ``time_ms``) or both
    per row (``fwd_time_ms``, ``bwd_time_ms``). ``sliding_window_size`` is the keys looked back
    from the diagonal, the workload's window. Other backends (FlashAttention-4), FP8 kernels
    and failed runs are left out."""
    p = str(path)
    rows: list[dict[str, object]] = []
    try:
        with open(p, newline="") as fh:
            for n, r in enumerate(csv.DictReader(fh), start=2):
                if (r.get("backend"), r.get("data_type"), r.get("success")) != ("cudnn", "bfloat16", "True"):
                    continue
                if r.get("deterministic_bwd") != "False" or r.get("attn_mask") not in CUDNN_MASKS:
                    continue
                try:
                    b, h, g = int(r["batch_size"]), int(r["num_q_heads"]), int(r["num_kv_heads"])
                    sq, skv, dq, dv = int(r["q_seqlen"]), int(r["kv_seqlen"]), int(r["head_dim_qk"]), int(r["head_dim_vo"])
                    window = int(float(r.get("sliding_window_size") or 0))
                    passes = ((("fwd", "fwd_time_ms"), ("bwd-input", "bwd_time_ms")) if r.get("profile_pass") == "both"
                              else ((("fwd" if r.get("profile_pass") == "fwd" else "bwd-input"), "time_ms"),))
                    times = [(phase, float(r[col]) * 1e-3) for phase, col in passes]
                except (KeyError, TypeError, ValueError):
                    raise FormatError(p, n, "not a cuDNN frontend SDPA benchmark row (needs batch_size, q_seqlen, "
                                            "num_q_heads, head_dim_qk, profile_pass, time_ms ...)") from None
                if sq != skv:
                    continue
                for phase, t in times:
                    if not (math.isfinite(t) and t > 0):
                        continue
                    rows.append({"kind": "attention", "phase": phase, "batch": b, "heads": h, "kv_heads": g, "seq": sq,
                                 "d_qk": dq, "d_v": dv, "time_s": t, "causal": CUDNN_MASKS[r["attn_mask"]],
                                 "window": window or ""})
    except OSError as e:
        raise FormatError(p, None, f"cannot read the cuDNN frontend results: {e.strerror}") from None
    if not rows:
        raise FormatError(p, None, "no cuDNN bf16 kernel that ran in the cuDNN frontend results")
    return rows


def write_kernel_table(rows: list[dict[str, object]], path: str | os.PathLike[str]) -> None:
    """Write rows as a kernel-table CSV (times to 4 significant digits: the sources give
    efficiencies to more digits than their timing noise), replacing ``path`` only whole."""
    with atomic_write(path, "w", field="--out") as fh:
        cols = COLUMNS + tuple(c for c in OPTIONAL_COLUMNS if any(c in r for r in rows))
        w = csv.DictWriter(fh, fieldnames=cols, lineterminator="\n")
        w.writeheader()
        for r in rows:
            w.writerow({c: (f"{r[c]:.4g}" if c == "time_s" else r.get(c, "")) for c in cols})
