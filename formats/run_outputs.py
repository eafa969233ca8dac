"""A run's headline files: summary.json and layers.csv (both atomic, both state units).

summary.json keys (docs/analytical.md lists them with meanings):
``iteration_time_s, tokens_per_s, tflops_per_gpu, mfu, model_flops_per_iteration,
breakdown_s{compute, exposed_<group>..., bubble, optimizer, other}, stage_breakdowns_s,
peak_memory_bytes[stage], reserved_memory_bytes[stage], memory_breakdown_bytes[stage],
compute_coverage, backend, accounting, units, config{model, parallel, system}``.

The headline figures (throughput, TFLOP/s, MFU) come from workload_gen.core.metrics, their one
home, shared with the sweep table and search.
"""
from __future__ import annotations

import dataclasses
import io
import json
from collections.abc import Sequence
from typing import Any

from workload_gen.core.metrics import headline
from workload_gen.core.records import ComputeOp
from workload_gen.core.run_result import Interval, RunResult

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
                 "compute_per_microbatch_s", "exposed_comm_per_microbatch_s", "waited_comm_s")
"""layers.csv's columns. Per (stage, layer, phase) on the stage's representative rank, summed
over the iteration (seconds, bytes):

- ``compute_s``: busy time of the compute stream (optimizer kernels included);
- ``comm_s``: wire time of the row's collectives (start to end on their streams);
- ``exposed_comm_s``: the part of ``comm_s`` during which the compute stream waited for
  those collectives; a wait that began while earlier collectives of the same stream were
  still on the wire is counted on them, and a pipeline transfer waited for by both its
  sender and its receiver counts once; so ``exposed_comm_s <= comm_s`` on every row;
- ``waited_comm_s``: the waits the engine charged to the row's collectives, as in the
  breakdown (the one ending last takes a wait on several; a pipeline transfer carries the
  waits of its sender and its receiver). Summed over every row of the run it equals the sum
  over stages of ``stage_breakdowns_s``' exposed communication; it may exceed ``comm_s``.
- ``microbatches``: distinct (micro-batch, chunk) instances of the row.
"""


# --------------------------------------------------------------------------- layer sums
class LayerSum:
    """One (stage, layer, phase) row's totals over the iteration (seconds, bytes).

    ``waited_s`` is what the engine charged to the row's collectives (the breakdown's
    exposed communication: a wait on several collectives goes to the one that ended last,
    and a pipeline transfer carries the waits of both its sender and its receiver), so its
    sums over rows equal the run's totals. ``exposed_comm_s`` is the same time placed on
    the collectives that were on the wire while the compute stream waited (a wait that
    covers earlier collectives queued on the same stream is moved onto them), each capped
    at its own wire time, so ``exposed_comm_s <= comm_s`` for every row."""

    __slots__ = ("comm_bytes", "comm_s", "compute_s", "exposed_comm_s", "instances", "waited_s")

    def __init__(self) -> None:
        self.compute_s = self.comm_s = self.exposed_comm_s = self.waited_s = 0.0
        self.comm_bytes = 0
        self.instances: set[tuple[int, int]] = set()
        """(micro-batch, chunk) pairs that ran some op of the row."""


def spread_waits(spans: list[tuple[float, float, float]]) -> list[float]:
    """Exposed time per collective of one stream (in issue order: (start, end, charged wait)),
    placed on the collectives that were on the wire during each wait and capped at each one's
    wire time.

    A wait charged to collective C ends at C's end; when it began before C started, the
    stream was busy with C's predecessors (FIFO: C was issued before the wait began), so that
    part is moved onto them, newest first. What finds no collective on the wire is dropped
    (it stays in ``waited_s``)."""
    out = [0.0] * len(spans)
    for i, (s, e, x) in enumerate(spans):
        if x <= 0.0:
            continue
        w = e - s
        if x <= w:
            out[i] += x
            continue
        out[i] += w
        lo, hi = e - x, s
        j = i - 1
        while j >= 0 and hi > lo:
            sj, ej, _ = spans[j]
            if ej <= lo:
                break
            ov = min(ej, hi) - max(sj, lo)
            if ov > 0:
                out[j] += ov
            hi = min(hi, sj)
            j -= 1
    return [min(v, e - s) if v > 0.0 else 0.0 for v, (s, e, _) in zip(out, spans)]


def profile_layer_sums(profile: Any) -> dict[tuple[int, str], tuple[float, float, float, float, int]]:
    """(layer, phase) -> (compute_s, comm_s, exposed_comm_s, waited_s, comm_bytes) of one
    instance of a memoised pass (:func:`layer_sums` calls it once per distinct profile)."""
    sums: dict[tuple[int, str], list] = {}
    by_stream: dict[str, list[int]] = {}
    recs = profile.records
    for k, (stream, op, s, e, x) in enumerate(recs):
        if stream != "compute":
            by_stream.setdefault(stream, []).append(k)
    exposed = [0.0] * len(recs)
    # No "pp" stream here: a pass profile holds no pipeline transfer (engine.program._split_pass takes them out).
    for idx in by_stream.values():
        spread = spread_waits([(recs[k][2], recs[k][3], recs[k][4]) for k in idx])
        for k, v in zip(idx, spread):
            exposed[k] = v
    for k, (stream, op, s, e, x) in enumerate(recs):
        key = (op.layer, op.phase._value_)
        acc = sums.get(key)
        if acc is None:
            acc = sums[key] = [0.0, 0.0, 0.0, 0.0, 0]
        if stream == "compute":
            acc[0] += e - s
        else:
            acc[1] += e - s
            acc[2] += exposed[k]
            acc[3] += x
            acc[4] += op.bytes
    return {key: tuple(v) for key, v in sums.items()}  # type: ignore[misc]


def layer_sums(parts: Sequence[Any]) -> dict[tuple[int, int, str], LayerSum]:
    """Per (stage, layer, phase) totals of a timeline's compact form (engine.timeline.Block:
    one memoised pass instance, and Interval parts): each memoised pass is summed once (:func:`profile_layer_sums`) and
    multiplied by its instance count, so the cost follows the number of distinct passes
    plus the op-level intervals, not the micro-batches. Layer sums of the representative
    rank of each stage only (the lowest rank of the stage in the timeline)."""
    first_rank: dict[int, int] = {}
    blocks: dict[tuple[int, int], tuple[Any, int, list[tuple[int, int]]]] = {}
    loose: list[Interval] = []
    for p in parts:
        stage = p.stage
        r = first_rank.setdefault(stage, p.rank)
        if p.rank != r:
            continue
        if type(p) is not Interval:  # an engine.timeline.Block
            key = (stage, id(p.profile))
            b = blocks.get(key)
            if b is None:
                b = blocks[key] = (p.profile, stage, [])
            b[2].append((p.microbatch, p.chunk))
        else:
            loose.append(p)
    out: dict[tuple[int, int, str], LayerSum] = {}

    def row(key: tuple[int, int, str]) -> LayerSum:
        r = out.get(key)
        if r is None:
            r = out[key] = LayerSum()
        return r

    shared: dict[tuple[int, int, str], list[set[tuple[int, int]]]] = {}
    for prof, stage, inst in blocks.values():
        n = len(inst)
        inst_set = set(inst)
        for (layer, phase), (comp, comm, exp, waited, nbytes) in profile_layer_sums(prof).items():
            key = (stage, layer, phase)
            r = row(key)
            r.compute_s += comp * n
            r.comm_s += comm * n
            r.exposed_comm_s += exp * n
            r.waited_s += waited * n
            r.comm_bytes += nbytes * n
            shared.setdefault(key, []).append(inst_set)
    for key, sets in shared.items():  # most rows belong to one pass: share its set
        r = out[key]
        if len(sets) == 1 and not r.instances:
            r.instances = sets[0]
        else:
            r.instances = set(r.instances).union(*sets)
    # op-level intervals: exposure spread per (rank, stream), in issue order
    streams: dict[tuple[int, str], list[Interval]] = {}
    copied: set[tuple[int, int, str]] = set()
    for iv in loose:
        key = (iv.stage, iv.layer, iv.phase)
        r = row(key)
        if key not in copied:  # never add to a set shared with another row
            r.instances = set(r.instances)
            copied.add(key)
        r.instances.add((iv.microbatch, iv.chunk))
        if iv.stream == "compute":
            r.compute_s += iv.end - iv.start
        else:
            r.comm_s += iv.end - iv.start
            r.waited_s += iv.exposed_s
            r.comm_bytes += iv.bytes
            streams.setdefault((iv.rank, iv.stream), []).append(iv)
    for (_, stream), ivs in streams.items():
        if stream == "pp":
            spread = [min(iv.exposed_s, iv.end - iv.start) for iv in ivs]
        else:
            spread = spread_waits([(iv.start, iv.end, iv.exposed_s) for iv in ivs])
        for iv, v in zip(ivs, spread):
            out[(iv.stage, iv.layer, iv.phase)].exposed_comm_s += v
    return out


def layer_rows(result: RunResult) -> list[dict[str, Any]]:
    """Per (stage, layer, phase) totals over the iteration on the stage's representative rank
    (:data:`LAYER_COLUMNS`).

    From the timeline when there is one: from pass profiles x their instance counts
    (engine.timeline.layer_sums), never materialising the intervals; else from the workload's
    compute times only (communication columns left empty, they need the simulation).
    """
    rows = []
    if result.intervals:
        iv = result.intervals
        sums = iv.layer_sums() if hasattr(iv, "layer_sums") else layer_sums(list(iv))
        for key in sorted(sums):
            s = sums[key]
            n = max(len(s.instances), 1)
            rows.append({"stage": key[0], "layer": key[1], "phase": key[2], "microbatches": n,
                         "compute_s": s.compute_s, "comm_s": s.comm_s, "exposed_comm_s": s.exposed_comm_s,
                         "comm_bytes": s.comm_bytes, "compute_per_microbatch_s": s.compute_s / n,
                         "exposed_comm_per_microbatch_s": s.exposed_comm_s / n, "waited_comm_s": s.waited_s})
        return rows
    acc: dict[tuple[int, int, str], dict[str, Any]] = {}
    m = result.workload.parallel.num_microbatches
    for stage, chunk, op in result.workload.ops():
        if isinstance(op, ComputeOp):
            key = (stage, op.layer, op.phase.value)
            r = acc.get(key)
            if r is None:
                r = acc[key] = {"stage": stage, "layer": op.layer, "phase": op.phase.value, "mbs": set(),
                                "compute_s": 0.0, "comm_s": "", "exposed_comm_s": "", "comm_bytes": "",
                                "waited_comm_s": ""}
            mult = 1 if chunk < 0 else m
            r["mbs"].update((i, chunk) for i in range(mult))
            r["compute_s"] += (op.time_s or 0.0) * mult
    for key in sorted(acc):
        r = acc[key]
        n = max(len(r.pop("mbs")), 1)
        r["microbatches"] = n
        r["compute_per_microbatch_s"] = r["compute_s"] / n
        r["exposed_comm_per_microbatch_s"] = ""
        rows.append({c: r[c] for c in LAYER_COLUMNS})
    return rows


def layers_csv(result: RunResult, rows: list[dict[str, Any]] | None = None) -> str:
    """layers.csv; ``rows``: :func:`layer_rows` of ``result`` when the caller has them already."""
    import csv  # only runs that write files need it (start-up cost, docs/simai.md)

    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(LAYER_COLUMNS)
    for r in layer_rows(result) if rows is None else rows:
        w.writerow([f"{v:.9g}" if isinstance(v, float) else v for v in (r[c] for c in LAYER_COLUMNS)])
    return buf.getvalue()


def endtoend_layer_rows(result: RunResult, rows: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """EndToEnd.csv's per-layer rows for an event-mode run: layers.csv's rows (``rows``, or
    :func:`layer_rows` of ``result``) of the critical stage in SimAI's columns
    (formats.endtoend_csv.event_layer_rows)."""
    from formats.endtoend_csv import event_layer_rows

    return event_layer_rows(layer_rows(result) if rows is None else rows, int(result.extras.get("critical_stage", 0)))
