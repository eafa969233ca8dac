"""A run's headline files: summary.json and layers.csv (both atomic, both state units).

summary.json keys (docs/analytical.md lists them with meanings):
``iteration_time_s, tokens_per_s, tflops_per_gpu, mfu, model_flops_per_iteration,
breakdown_s{compute, exposed_<group>..., bubble, optimizer, other}, stage_breakdowns_s,
peak_memory_bytes[stage], reserved_memory_bytes[stage], memory_breakdown_bytes[stage],
compute_coverage, backend, accounting, units, config{model, parallel, system}``.

Model FLOPs (``tflops_per_gpu``, ``mfu``) are workload_gen.flops's count: Megatron's
72*B*s*l*h^2*(1 + s/(6h) + V/(12*l*h)) for GPT, generalised to GQA, SwiGLU, MLA and MoE,
without recompute (PaLM's MFU convention). MFU = that / (iteration time * dense peak * GPUs).
Hardware FLOPs (``hardware_tflops_per_gpu``) are summed from the workload's own ops,
recompute included: what the GPUs actually executed.
"""
from __future__ import annotations

import csv
import dataclasses
import io
import json
from pathlib import Path
from typing import Any

from formats.atomic import atomic_write, write_text_atomic
from workload_gen.records import ComputeOp, Group, Phase, Workload
from workload_gen.run_result import Breakdown, RunResult

GROUPS: tuple[str, ...] = tuple(g.value for g in Group)
_HW_PHASES = (Phase.FWD, Phase.BWD_INPUT, Phase.BWD_WEIGHT, Phase.RECOMPUTE)

UNITS = {
    "time": "s", "memory": "bytes", "tokens_per_s": "tokens/s",
    "tflops_per_gpu": "TFLOP/s per GPU (model FLOPs, no recompute)", "mfu": "fraction of dense peak",
    "model_flops_per_iteration": "FLOP", "hardware_tflops_per_gpu": "TFLOP/s per GPU (executed, recompute included)",
    "hardware_flops_per_iteration": "FLOP", "busbw": "bytes/s",
    "compute_coverage": "measured/scaled/estimated/imported: fractions of compute time; *_s: seconds",
}


def model_flops(workload: Workload) -> float | None:
    """Model FLOPs per iteration (workload_gen.flops); None for a workload without a model
    (a SimAI import: its architecture is unknown)."""
    if workload.params_total <= 0:
        return None
    from workload_gen.flops import model_flops_per_iteration as _mf

    return _mf(workload.model, workload.parallel)


def hardware_flops_per_iteration(workload: Workload) -> float:
    """All GPUs together, one iteration, summed from the ops (recompute included)."""
    par = workload.parallel
    ranks_per_stage = par.world_size // par.pp
    total = 0.0
    for st in workload.stages:
        per_mb = 0.0
        for ch in st.chunks:
            for op in ch.forward + ch.backward:
                if isinstance(op, ComputeOp) and op.phase in _HW_PHASES:
                    per_mb += op.flops
        total += per_mb * par.num_microbatches * ranks_per_stage
    return total


def breakdown_dict(b: Breakdown) -> dict[str, float]:
    out = {"compute": b.compute_s}
    for g in GROUPS:
        out[f"exposed_{g}"] = float(b.exposed_comm_s.get(g, 0.0))
    out.update(bubble=b.bubble_s, optimizer=b.optimizer_s, other=b.other_s)
    return out


def _jsonable(obj: Any) -> Any:
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: _jsonable(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if hasattr(obj, "to_dict"):
        return _jsonable(obj.to_dict())
    return str(obj)


def coverage_dict(cov: Any) -> dict[str, Any] | None:
    """compute_profile's Coverage as shares of compute time by source, plus its raw fields."""
    if cov is None:
        return None
    raw = _jsonable(cov)
    if not isinstance(raw, dict):
        return {"value": raw}
    total = raw.get("total_s")
    out: dict[str, Any] = {}
    if isinstance(total, (int, float)):
        for src in ("measured", "scaled", "estimated", "imported"):
            part = raw.get(f"{src}_s")
            if isinstance(part, (int, float)):
                out[src] = part / total if total > 0 else 0.0
    out.update(raw)
    return out


def summary_dict(result: RunResult, *, coverage: Any = None, accounting: str = "event") -> dict[str, Any]:
    wl = result.workload
    par = wl.parallel
    spec = result.system.gpu_spec
    t = result.iteration_time_s
    flops = model_flops(wl)
    hw = hardware_flops_per_iteration(wl)
    gpu_s = t * par.world_size
    per_gpu = flops / gpu_s if flops and gpu_s > 0 else None
    try:
        peak = spec.peak(par.dtype)
    except Exception:  # noqa: BLE001 - a dtype the GPU lacks: no MFU rather than no summary
        peak = 0.0
    cov = coverage if coverage is not None else result.extras.get("compute_coverage")
    return {
        "units": UNITS,
        "iteration_time_s": t,
        "tokens_per_s": result.tokens_per_s if t > 0 else 0.0,
        # None when the workload has no model (a SimAI import: the architecture is unknown)
        "tflops_per_gpu": per_gpu / 1e12 if per_gpu is not None else None,
        "mfu": per_gpu / peak if peak and per_gpu is not None else None,
        "model_flops_per_iteration": flops,
        "hardware_tflops_per_gpu": hw / gpu_s / 1e12 if gpu_s > 0 and hw > 0 else None,
        "hardware_flops_per_iteration": hw,
        "breakdown_s": breakdown_dict(result.breakdown),
        "stage_breakdowns_s": [breakdown_dict(b) for b in result.stage_breakdowns],
        "peak_memory_bytes": [m.allocated_peak for m in result.memory],
        "reserved_memory_bytes": [m.reserved_peak for m in result.memory],
        "memory_breakdown_bytes": [
            {"stage": m.stage, "weights": m.weights, "gradients": m.gradients,
             "optimizer_states": m.optimizer_states, "activations": m.activations, "temporary": m.temporary,
             "reserved_factor": m.reserved_factor}
            for m in result.memory
        ],
        "gpu_memory_bytes": spec.memory_bytes,
        "compute_coverage": coverage_dict(cov),
        "backend": result.backend,
        "accounting": accounting,
        "extras": _jsonable({k: v for k, v in result.extras.items() if k not in ("compute_coverage", "simai_layers")}),
        "config": {
            "model": _jsonable(wl.model.to_dict()),
            "parallel": _jsonable(par.to_dict()),
            "derived": {"dp": par.dp, "edp": par.edp, "num_microbatches": par.num_microbatches,
                        "params_total": wl.params_total, "gpu": wl.gpu or result.system.gpu},
            "system": _jsonable(result.system.to_dict()),
        },
    }


def summary_json(result: RunResult, **kw: Any) -> str:
    return json.dumps(summary_dict(result, **kw), indent=2, sort_keys=False) + "\n"


def write_summary(result: RunResult, path: str | Path, **kw: Any) -> None:
    write_text_atomic(path, summary_json(result, **kw))


LAYER_COLUMNS = ("stage", "layer", "phase", "microbatches", "compute_s", "comm_s", "exposed_comm_s", "comm_bytes",
                 "compute_per_microbatch_s", "exposed_comm_per_microbatch_s")


def layer_rows(result: RunResult) -> list[dict[str, Any]]:
    """Per (stage, layer, phase) totals over the iteration on the stage's representative rank.

    From the timeline when there is one; else from the workload's compute times only
    (communication columns left empty, they need the simulation).
    """
    acc: dict[tuple[int, int, str], dict[str, Any]] = {}

    def row(stage: int, layer: int, phase: str) -> dict[str, Any]:
        key = (stage, layer, phase)
        if key not in acc:
            acc[key] = {"stage": stage, "layer": layer, "phase": phase, "mbs": set(), "compute_s": 0.0,
                        "comm_s": 0.0, "exposed_comm_s": 0.0, "comm_bytes": 0}
        return acc[key]

    if result.intervals:
        for iv in result.intervals:
            r = row(iv.stage, iv.layer, iv.phase)
            r["mbs"].add((iv.microbatch, iv.chunk))
            if iv.stream == "compute":
                r["compute_s"] += iv.end - iv.start
            else:
                r["comm_s"] += iv.end - iv.start
                r["exposed_comm_s"] += iv.exposed_s
                r["comm_bytes"] += iv.bytes
    else:
        m = result.workload.parallel.num_microbatches
        for stage, chunk, op in result.workload.ops():
            if isinstance(op, ComputeOp):
                r = row(stage, op.layer, op.phase.value)
                mult = 1 if chunk < 0 else m
                r["mbs"].update((i, chunk) for i in range(mult))
                r["compute_s"] += (op.time_s or 0.0) * mult
                r["comm_s"] = r["exposed_comm_s"] = r["comm_bytes"] = ""
    rows = []
    for key in sorted(acc):
        r = acc[key]
        n = max(len(r.pop("mbs")), 1)
        r["microbatches"] = n
        r["compute_per_microbatch_s"] = r["compute_s"] / n
        r["exposed_comm_per_microbatch_s"] = r["exposed_comm_s"] / n if r["exposed_comm_s"] != "" else ""
        rows.append({c: r[c] for c in LAYER_COLUMNS})
    return rows


def layers_csv(result: RunResult) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(LAYER_COLUMNS)
    for r in layer_rows(result):
        w.writerow([f"{v:.9g}" if isinstance(v, float) else v for v in (r[c] for c in LAYER_COLUMNS)])
    return buf.getvalue()


def write_layers_csv(result: RunResult, path: str | Path) -> None:
    with atomic_write(path) as fh:
        fh.write(layers_csv(result))
