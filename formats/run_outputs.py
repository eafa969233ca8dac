"""A run's headline files: summary.json and layers.csv (both atomic, both state units).

summary.json keys (docs/analytical.md lists them with meanings):
``iteration_time_s, tokens_per_s, tflops_per_gpu, mfu, model_flops_per_iteration,
breakdown_s{compute, exposed_<group>..., bubble, optimizer, other}, stage_breakdowns_s,
peak_memory_bytes[stage], reserved_memory_bytes[stage], memory_breakdown_bytes[stage],
compute_coverage, backend, accounting, units, config{model, parallel, system}``.

The headline figures (throughput, TFLOP/s, MFU) come from workload_gen.metrics, their one
home, shared with the sweep table and search.
"""
from __future__ import annotations

import csv
import dataclasses
import io
import json
from typing import Any

from workload_gen.metrics import headline
from workload_gen.records import ComputeOp
from workload_gen.run_result import RunResult

UNITS = {
    "time": "s", "memory": "bytes", "tokens_per_s": "tokens/s",
    "tflops_per_gpu": "TFLOP/s per GPU (model FLOPs, no recompute)", "mfu": "fraction of dense peak",
    "model_flops_per_iteration": "FLOP", "hardware_tflops_per_gpu": "TFLOP/s per GPU (executed, recompute included)",
    "hardware_flops_per_iteration": "FLOP", "busbw": "bytes/s",
    "compute_coverage": "measured/scaled/estimated/imported: fractions of compute time; *_s: seconds",
}


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
    h = headline(result)
    cov = coverage if coverage is not None else result.extras.get("compute_coverage")
    return {
        "units": UNITS,
        "iteration_time_s": h.iteration_time_s,
        "tokens_per_s": h.tokens_per_s,
        # None when the workload has no model (a SimAI import: the architecture is unknown)
        "tflops_per_gpu": h.tflops_per_gpu,
        "mfu": h.mfu,
        "model_flops_per_iteration": h.model_flops_per_iteration,
        "hardware_tflops_per_gpu": h.hardware_tflops_per_gpu,
        "hardware_flops_per_iteration": h.hardware_flops_per_iteration,
        "breakdown_s": result.breakdown.as_dict(),
        "stage_breakdowns_s": [b.as_dict() for b in result.stage_breakdowns],
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
        # one pass, plain locals: a run's timeline has 10^5+ intervals
        sums: dict[tuple[int, int, str], list] = {}
        for iv in result.intervals:
            key = (iv.stage, iv.layer, iv.phase)
            s = sums.get(key)
            if s is None:
                s = sums[key] = [0.0, 0.0, 0.0, 0, set()]
            s[4].add((iv.microbatch, iv.chunk))
            if iv.stream == "compute":
                s[0] += iv.end - iv.start
            else:
                s[1] += iv.end - iv.start
                s[2] += iv.exposed_s
                s[3] += iv.bytes
        for (stage, layer, phase), (comp, comm, exposed, nbytes, mbs) in sums.items():
            r = row(stage, layer, phase)
            r.update(compute_s=comp, comm_s=comm, exposed_comm_s=exposed, comm_bytes=nbytes, mbs=mbs)
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


