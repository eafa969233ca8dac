"""Calibration from a real run: measured op times of a Kineto trace -> profile-DB rows.

WHY: a real run is the best compute profile of the next prediction on the same
hardware. The trace records each op's input shapes (``record_shapes=True``); from them
this module derives the key the workload's ComputeOp would have (kind, shape, phase,
dtype; see compute_profile.keys and ``records.shape_doc``), so that ``attach`` finds the
measured time for the predicted op.

Shape derivation (the GEMM actually executed, ``C[m,n] = A[m,k] @ B[k,n]``):
- ``aten::linear(x[..., k], W[n, k])``: m = prod(leading dims of x);
- ``aten::addmm(bias, A[m,k], B[k,n])``, ``aten::mm(A[m,k], B[k,n])``;
- backward GEMMs are the two ``mm`` of a linear's backward node, split by the trace
  reader into bwd-input and bwd-weight;
- attention (``scaled_dot_product_attention`` and its backward): q[b,h,sq,d], k[b,h,skv,d],
  causal flag from the call's concrete inputs;
- norm: x[..., width] -> (tokens, width); loss (``cross_entropy_loss``/``log_softmax``):
  (tokens, vocab); embedding: weight[vocab, hidden], ids[...] -> (tokens, hidden, vocab);
  elementwise: (tokens, width) keyed with the op name (``gelu:256x1024``), as keys.py
  requires;
- optimizer: params = the summed size of the tensors Adam updates (one ``lerp_`` per
  parameter in torch's per-tensor Adam).
Several calls of one key (layers, micro-batches, steps) give one row: median time,
min/max spread, repeat count.

Units: seconds.
"""
from __future__ import annotations

import datetime as _dt
import math
from collections import defaultdict
from pathlib import Path

from compute_profile.db import ProfileRow
from formats.kineto import read_kineto
from formats.kineto_records import TraceOp
from workload_gen.core.errors import ConfigError
from workload_gen.core.records import OpKind

_DTYPES = {"float": "fp32", "c10::bfloat16": "bf16", "bfloat16": "bf16", "c10::half": "fp16", "half": "fp16",
           "float16": "fp16", "double": "fp64", "c10::float8_e4m3fn": "fp8"}

_ELEMENTWISE_NAMES: dict[str, tuple[str, ...]] = {
    # aten op -> the workload's elementwise op names (workload_gen.layer_ops) it measures.
    # An add inside a layer is one of the two residual adds: same kernel, same shape.
    "aten::gelu": ("gelu",), "GeluBackward0": ("gelu",), "aten::silu": ("swiglu",), "SiluBackward0": ("swiglu",),
    "aten::add": ("attn_residual", "mlp_residual"), "AddBackward0": ("attn_residual", "mlp_residual"),
    "aten::dropout": ("dropout",), "aten::native_dropout": ("dropout",), "NativeDropoutBackward0": ("dropout",),
}


def _prod(xs: tuple[int, ...]) -> int:
    return math.prod(xs) if xs else 0


def gemm_mnk(op: TraceOp) -> tuple[int, int, int] | None:
    """(m, n, k) of the GEMM an op ran, from its recorded input shapes."""
    d = [x for x in op.input_dims]
    base = op.cpu_op or op.name
    if base == "aten::linear" and len(d) >= 2 and len(d[0]) >= 2 and len(d[1]) == 2:
        return _prod(d[0][:-1]), d[1][0], d[0][-1]
    mats = [x for x in d if len(x) == 2]
    if base in ("aten::addmm", "aten::mm", "aten::_addmm_activation") and len(mats) >= 2:
        a, b = mats[-2], mats[-1]
        return a[0], b[1], a[1]
    if base in ("aten::matmul",) and len(d) >= 2 and len(d[0]) >= 2 and len(d[1]) == 2:
        return _prod(d[0][:-1]), d[1][1], d[0][-1]
    return None


def _causal(concrete: tuple[str, ...]) -> int:
    """is_causal is argument 5 of ``scaled_dot_product_attention`` (q, k, v, attn_mask,
    dropout_p, is_causal) and argument 4 of the ``_scaled_dot_product_*`` kernels (q, k, v,
    dropout_p, is_causal); the slot before it is a float, never "True"."""
    return 1 if "True" in concrete[4:6] else 0


def shape_of(op: TraceOp) -> tuple[int, ...] | None:
    """The ComputeOp shape (see records.shape_doc) an op corresponds to, or None.

    A backward op other than a GEMM is keyed by its forward op's shapes (a backward node
    records only its gradient), as the workload keys its backward ops.
    """
    kind = op.category
    if kind == OpKind.GEMM.value:
        return gemm_mnk(op)
    backward = op.phase != "fwd" and op.fwd_input_dims
    d = op.fwd_input_dims if backward else op.input_dims
    concrete = op.fwd_concrete if backward else op.concrete
    if kind == OpKind.ATTENTION.value and len(d) >= 2 and len(d[0]) == 4 and len(d[1]) == 4:
        b, h, sq, hd = d[0]
        return b, h, sq, d[1][2], hd, _causal(concrete)
    if kind in (OpKind.NORM.value, OpKind.ELEMENTWISE.value, OpKind.LOSS.value) and d and len(d[0]) >= 2:
        return _prod(d[0][:-1]), d[0][-1]
    if kind == OpKind.EMBEDDING.value and len(d) >= 2 and len(d[0]) == 2 and d[1]:
        return _prod(d[1]), d[0][1], d[0][0]
    return None


def rows_from_trace(path: str | Path | list, gpu: str, *, steps: list[int] | None = None) -> list[ProfileRow]:
    """Profile rows (source ``imported``) for every op of the trace whose shape is known.

    ``gpu`` names the device the trace ran on (a GPU spec name, or ``cpu``). Ops without
    recorded shapes (traces made without ``record_shapes=True``) are skipped; a trace
    that yields no row at all is an error, so that an import never silently does nothing.
    ``steps`` keeps only those ProfilerSteps (each must be in every rank's trace).
    """
    trace = read_kineto(path)
    samples: dict[tuple[str, str, str, str], list[float]] = defaultdict(list)
    notes: dict[tuple[str, str, str, str], str] = {}
    for rt in trace.ranks:
        chosen = {s.number for s in (rt.pick_steps(steps) if steps is not None else rt.steps)}
        ops = [o for o in rt.ops if o.step in chosen]
        for key, dur, note in _keys(ops):
            samples[key].append(dur)
            notes.setdefault(key, note)
    if not samples:
        raise ConfigError("trace", str(path), "holds no op with recorded shapes; profile with record_shapes=True "
                                              "inside ProfilerStep ranges (torch.profiler.schedule + prof.step())")
    date = _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat()
    device = str(trace.ranks[0].meta.get("host_name", ""))
    rows = []
    for (kind, shape_key, dtype, phase), times in sorted(samples.items()):
        times.sort()
        n = len(times)
        median = times[n // 2] if n % 2 else 0.5 * (times[n // 2 - 1] + times[n // 2])
        rows.append(ProfileRow(gpu=gpu, kind=kind, shape_key=shape_key, dtype=dtype, phase=phase, time_s=median,
                               source="imported", min_s=times[0], max_s=times[-1], repeats=n,
                               device_name=device, date=date,
                               note=f"{notes[(kind, shape_key, dtype, phase)]} from {Path(str(path)).name}"))
    return rows


def _keys(ops: list[TraceOp]):
    """(key, seconds, note) per measured op that maps onto a profile key."""
    by_step_opt: dict[int, list[TraceOp]] = defaultdict(list)
    loss_bwd: dict[tuple, list[TraceOp]] = defaultdict(list)
    for o in ops:
        if o.category == OpKind.LOSS.value and o.phase != "fwd":
            loss_bwd[(o.step, o.layer)].append(o)  # NllLossBackward + LogSoftmaxBackward = one loss op
            continue
        if o.category == OpKind.OPTIMIZER.value:
            by_step_opt[o.step].append(o)
            continue
        if o.category not in {k.value for k in OpKind}:
            continue
        shape = shape_of(o)
        if not shape or any(x <= 0 for x in shape[:-1]):
            continue
        dtype = _DTYPES.get(o.dtype.lower(), o.dtype.lower() or "fp32")
        phase = _profile_phase(o)
        if o.category == OpKind.GEMM.value and phase == "bwd-weight":
            # torch computes dW[out, in] = dY^T @ X; the workload keys the same GEMM as
            # (in, out, tokens), i.e. dW^T = X^T @ dY: swap m and n.
            shape = (shape[1], shape[0], shape[2])
        skey = "x".join(str(x) for x in shape)
        base = o.cpu_op or o.name
        if o.category == OpKind.ELEMENTWISE.value:
            if o.layer is not None and o.layer < 0:
                continue  # the embedding's add (token + position) is not a workload op
            for name in _ELEMENTWISE_NAMES.get(base, (base.removeprefix("aten::"),)):
                yield (o.category, f"{name}:{skey}", dtype, phase), o.dur, base
            continue
        yield (o.category, skey, dtype, phase), o.dur, base
    for group in loss_bwd.values():
        shapes = [sh for o in group if (sh := shape_of(o))]
        if shapes:
            dtype = _DTYPES.get(group[0].dtype.lower(), group[0].dtype.lower() or "fp32")
            yield ((OpKind.LOSS.value, "x".join(map(str, shapes[0])), dtype, "bwd-input"), sum(o.dur for o in group),
                   " + ".join(o.name for o in group))
    for step, opt_ops in by_step_opt.items():
        params = sum(_prod(x) for o in opt_ops for x in o.input_dims)
        if params <= 0:
            continue
        total = sum(o.dur for o in opt_ops)
        yield (OpKind.OPTIMIZER.value, str(params), "fp32", "iter"), total, "optimizer step"


def _profile_phase(o: TraceOp) -> str:
    if o.phase in ("fwd", "bwd-input", "bwd-weight", "iter"):
        return o.phase
    if o.category == OpKind.EMBEDDING.value:
        return "bwd-weight"  # an embedding's backward is its weight gradient (scatter-add)
    return "bwd-input"  # a fused backward (norm, attention, loss, activation) computes the input gradient
