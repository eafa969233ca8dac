"""A run's headline files: summary.json and layers.csv, rendered from records (both state units).

This module only writes: the figures come computed from the engine (a RunResult, the
per-layer rows of engine.accounting as :class:`LayerRow`, SimAI's report in our units from
engine.simai_report), and the text goes to the run directory in one atomic swap
(engine.commands.run.write_outputs).

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
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from workload_gen.core.record import record

if TYPE_CHECKING:  # a SimAI file's accounting run writes without loading our records (start-up, docs/simai.md)
    from formats.simai_text import SimaiHeader
    from workload_gen.core.run_result import RunResult
    from workload_gen.core.system import SystemConfig

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


def _fit_fields(memory: Any, capacity: int) -> dict[str, Any]:
    """summary.json's fit: ``fits`` (every stage within the GPU, workload_gen.core.memory_fit),
    ``memory_verdict`` (``fits``, ``edge`` within the memory model's error, ``does not fit``),
    the per-stage ``memory_margin_bytes`` (negative: short by that much) and what the rule adds
    outside the allocator; ``fits`` is null without a memory estimate."""
    from workload_gen.core.memory_fit import memory_fit

    if not memory:
        return {"fits": None}
    fit = memory_fit(memory, capacity)
    return {"fits": fit.fits, "memory_verdict": fit.verdict, "memory_margin_bytes": list(fit.margins),
            "memory_outside_allocator_bytes": fit.outside_allocator}


def summary_dict(result: RunResult, *, coverage: Any = None, accounting: str = "event") -> dict[str, Any]:
    from workload_gen.core.metrics import headline
    from workload_gen.core.unmodelled import unmodelled

    wl = result.workload
    par = wl.parallel
    spec = result.system.gpu_spec
    h = headline(result)
    cov = coverage if coverage is not None else result.extras.get("compute_coverage")
    blind = unmodelled(par)
    return {
        "units": UNITS,
        # recipe options simulated without their mechanism (workload_gen.core.unmodelled);
        # the key is present only when there are some, so other summaries stay as they were
        **({"unmodelled": list(blind)} if blind else {}),
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
        **_fit_fields(result.memory, spec.memory_bytes),
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


# --------------------------------------------------------------------------- layers.csv
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

The engine computes the rows (engine.accounting.layer_rows); this module only writes them.
"""


@record(kw_only=True)
class LayerRow:
    """One row of layers.csv (:data:`LAYER_COLUMNS`; seconds, bytes). The communication
    fields are None for a run without a timeline (they need the simulation) and are
    written as empty cells."""

    stage: int
    layer: int
    phase: str
    microbatches: int
    """Distinct (micro-batch, chunk) instances of the row, at least 1."""
    compute_s: float
    comm_s: float | None = None
    exposed_comm_s: float | None = None
    comm_bytes: int | None = None
    waited_comm_s: float | None = None

    @property
    def compute_per_microbatch_s(self) -> float:
        return self.compute_s / self.microbatches

    @property
    def exposed_comm_per_microbatch_s(self) -> float | None:
        return None if self.exposed_comm_s is None else self.exposed_comm_s / self.microbatches

    def as_dict(self) -> dict[str, Any]:
        """The row keyed by :data:`LAYER_COLUMNS`, in column order."""
        return {c: getattr(self, c) for c in LAYER_COLUMNS}


def _csv_text(header: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    import csv  # only runs that write files need it (start-up cost, docs/simai.md)

    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(header)
    for r in rows:
        w.writerow(["" if v is None else f"{v:.9g}" if isinstance(v, float) else v for v in r])
    return buf.getvalue()


def layers_csv(rows: Sequence[LayerRow]) -> str:
    """layers.csv's text: a header of :data:`LAYER_COLUMNS`, then one line per row (floats to
    nine significant digits, missing fields empty)."""
    return _csv_text(LAYER_COLUMNS, ([getattr(r, c) for c in LAYER_COLUMNS] for r in rows))


# --------------------------------------------------------------------------- SimAI accounting files
SIMAI_LAYER_COLUMNS = ("record", "name", "fwd_compute_s", "wg_compute_s", "ig_compute_s", "fwd_comm_s", "wg_comm_s",
                       "ig_comm_s", "exposed_comm_s")
"""layers.csv's columns in ``--accounting simai`` mode on a SimAI file: one line per record of
the file, SimAI's own per-layer figures in seconds (``exposed_comm_s``: its three exposed
columns together)."""


@record(kw_only=True)
class SimaiLayerLine:
    """One record's line of a SimAI-accounting layers.csv (:data:`SIMAI_LAYER_COLUMNS`, seconds)."""

    record: int
    """Position of the record in the file, from 0."""
    name: str
    fwd_compute_s: float
    wg_compute_s: float
    ig_compute_s: float
    fwd_comm_s: float
    wg_comm_s: float
    ig_comm_s: float
    exposed_comm_s: float


def simai_layers_csv(lines: Sequence[SimaiLayerLine]) -> str:
    """layers.csv of a SimAI-accounting run on a SimAI file (:data:`SIMAI_LAYER_COLUMNS`);
    names are written as the file has them."""
    out = [",".join(SIMAI_LAYER_COLUMNS)]
    for ln in lines:
        vals = (ln.fwd_compute_s, ln.wg_compute_s, ln.ig_compute_s, ln.fwd_comm_s, ln.wg_comm_s, ln.ig_comm_s,
                ln.exposed_comm_s)
        out.append(f"{ln.record},{ln.name}," + ",".join(f"{v:.9g}" for v in vals))
    return "\n".join(out) + "\n"


SIMAI_GROUPS = ("dp", "edp", "tp", "ep", "pp")
"""The exposed-communication categories of SimAI's report, in its order (summary.json's
``breakdown_s`` of a SimAI-accounting run on a SimAI file lists them so)."""


def simai_summary_dict(*, iteration_time_s: float, compute_s: float, exposed_comm_s: Mapping[str, float],
                       bubble_s: float, totals_us: Mapping[str, float], workload: str, header: SimaiHeader,
                       cluster: Any, system: SystemConfig) -> dict[str, Any]:
    """summary.json of ``--accounting simai`` on a SimAI file: SimAI's report in seconds
    (engine.simai_report.SimaiReport; ``exposed_comm_s`` by :data:`SIMAI_GROUPS`), its
    EndToEnd totals in us, and the inputs (``cluster``: SimAI_analytical's flags, a record)."""
    return {
        "units": {"time": "s", "endtoend_csv": "us"},
        "accounting": "simai",
        "backend": "simai-accounting",
        "iteration_time_s": iteration_time_s,
        "breakdown_s": {"compute": compute_s, **{f"exposed_{g}": exposed_comm_s[g] for g in SIMAI_GROUPS},
                        "bubble": bubble_s, "optimizer": 0.0},  # SimAI has no optimizer step
        "simai_totals_us": dict(totals_us),
        "config": {"workload": workload,
                   "simai_header": {f.name: getattr(header, f.name) for f in dataclasses.fields(header)
                                    if isinstance(getattr(header, f.name), (int, float, str, type(None)))},
                   "cluster": {f.name: getattr(cluster, f.name) for f in dataclasses.fields(cluster)},
                   "system": system.to_dict()},
    }
