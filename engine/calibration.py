"""Calibration of the compute model's declared parameters on measured runs, reported honestly.

Only the parameters the parameter file declares as fitted (``{prior, bounds, source}``
entries of compute_profile/data/estimator_params.yaml) move; everything else stays at its
sourced value. The fit is maximum a posteriori: least squares on the log step-time errors
(sigma 3%), rows weighted so that each GPU counts as much as any other, plus a Gaussian
prior per parameter centred on its public kernel-level figure (sigma as the parameter
file declares it, else a quarter of its bounds' width), inside the bounds.

The inner loop uses a surrogate that is exact for the compute the parameters touch: per
run, the critical stage's tensor-core time (GEMMs and attention) is
sum(max(A_i / (g * f_i), M_i) + L_i) (A_i the op's compute time at tensor throughput 1,
g the GPU's fitted tensor throughput, f_i the FP8 speed-up for FP8 ops, M_i its memory
time, L_i its launches); the pipeline bubble scales with the per-micro-batch
compute; the optimizer step's fixed work adds once. Exposed communication is held at the
reference; the interference term adds (overlap slow-down) x (the critical stage's compute
that ran beside its collectives, measured in the reference run). After each fit the
references are re-simulated
in full (outer loop), and every figure reported comes from the FULL simulator.

Cross-validation leaves one model family out at a time (each A100 GPT size, each B200
model, each H100 model), refits every declared parameter on the rest and predicts the
left-out runs with the full simulator: the figures that say how the model does on a
model it was not fitted on. Memory has no fitted parameter, so its in-sample and
cross-validated errors are the same numbers.

Units: seconds, bytes.
"""
from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from compute_profile.estimator import (
    TENSOR_KINDS,
    DeclaredParameter,
    declared_parameters,
    explain,
    is_expert_gemm,
    load_params,
)
from formats.measured_runs import MeasuredRun
from workload_gen import build
from workload_gen.core.errors import ConfigError
from workload_gen.core.gpu_specs import get_gpu
from workload_gen.core.record import record
from workload_gen.core.records import ComputeOp, OpKind, Workload
from workload_gen.core.system import get_system

LOG_SIGMA = 0.03
"""Assumed spread of one measured step time around the model (log scale): run-to-run and
release-to-release variation in the public tables is 1-3%."""


Theta = dict[str, float]


@dataclass(slots=True)
class _Reference:
    """One run simulated at a reference theta, reduced to what the surrogate needs."""

    run: MeasuredRun
    gpu: str
    time_s: float
    theta: Theta
    bubble_ratio: float
    """Bubble / per-micro-batch compute of the critical stage (the bubble scales with it)."""
    tensor_a: np.ndarray = field(repr=False)
    tensor_m: np.ndarray = field(repr=False)
    """Memory time of each tensor-core op (the throughput does not move it)."""
    tensor_l: np.ndarray = field(repr=False)
    tensor_w: np.ndarray = field(repr=False)
    tensor_fp8: np.ndarray = field(repr=False)
    tensor_i: np.ndarray = field(repr=False)
    """Host issue floor of each op (expert grouped GEMMs; 0 for the others)."""
    tensor_x: np.ndarray = field(repr=False)
    """Exposed share of the shorter of math and memory (gemm.grouped_memory_exposure for
    expert grouped GEMMs; 0 for the others): the estimator's busy time, exactly."""
    step_ops: int = 0
    overlapped_s: float = 0.0
    """Critical stage's compute that ran beside its own collectives, at slow-down 0
    (the interference term adds overlap_slowdown x this)."""


def _overrides(theta: Theta) -> tuple[tuple[str, float], ...]:
    return tuple(sorted(theta.items()))


def _gpu_param(gpu: str) -> str:
    return f"gpus.{gpu}.tensor_throughput"


def _fp8_param(gpu: str, declared: Theta) -> str | None:
    """The declared FP8 speed-up that applies to ``gpu``: its own, else the default one,
    else None (fixed)."""
    for key in (f"gpus.{gpu}.gemm.fp8_speedup", "defaults.gemm.fp8_speedup"):
        if key in declared:
            return key
    return None


SLOWDOWN = "defaults.overlap_slowdown"
_PROBE_SLOWDOWN = 0.05
"""Slow-down at which a reference measures how much compute overlaps communication when
theta's own is (nearly) zero: the added seconds divided by it."""


def simulate_run(run: MeasuredRun, theta: Theta, timeline: bool = False) -> tuple[float, object]:
    """Full simulation of one run with the compute model at ``theta``: (step time, result)."""
    from compute_profile import attach
    from engine.pipeline import run_workload

    system = get_system(run.system)
    params = load_params(system.gpu, overrides=_overrides(theta))
    workload, cov = attach(build(run.model, run.parallel), system.gpu, None, params=params)
    result = run_workload(workload, system, timeline=timeline, attach=False)
    return result.iteration_time_s, result


def _reference(run: MeasuredRun, theta: Theta) -> _Reference:
    time_s, res = simulate_run(run, theta)
    wl: Workload = res.workload
    gpu = get_system(run.system).gpu
    spec = get_gpu(gpu)
    unit_theta = dict(theta)
    for key in (_gpu_param(gpu), _fp8_param(gpu, theta)):
        if key is not None and key in theta:  # else the A_i keep the GPU's fixed value
            unit_theta[key] = 1.0
    unit = load_params(gpu, overrides=_overrides(unit_theta))
    crit = int(res.extras.get("critical_stage", 0))
    stage = wl.stages[crit]
    nmb = wl.parallel.num_microbatches
    a, m, lat, w, f8, iss, x = [], [], [], [], [], [], []
    per_mb = 0.0
    for ch in stage.chunks:
        for op in (*ch.forward, *ch.backward):
            if not isinstance(op, ComputeOp):
                continue
            per_mb += op.time_s or 0.0
            if op.kind in TENSOR_KINDS:
                e1 = explain(op, spec, unit)
                a.append(e1.compute_s)
                m.append(e1.memory_s)  # with the issue floor, what the throughput does not move
                iss.append(e1.issue_s)
                x.append(unit.gemm.grouped_memory_exposure if is_expert_gemm(op) else 0.0)
                lat.append(e1.launch_s)
                w.append(nmb)
                f8.append(op.dtype == "fp8")
    step_ops = sum(1 for op in stage.iteration if isinstance(op, ComputeOp) and op.kind is OpKind.OPTIMIZER
                   and op.shape[:1] == (0,))
    bd = res.stage_breakdowns[crit] if crit < len(res.stage_breakdowns) else res.breakdown
    per_mb_total = per_mb * nmb
    ratio = bd.bubble_s / per_mb_total if per_mb_total > 0 else 0.0
    s_ref = theta.get(SLOWDOWN, 0.0)
    if s_ref >= 1e-3:
        overlapped = res.extras.get("overlap_slowdown_s", 0.0) / s_ref
    else:
        probe = simulate_run(run, {**theta, SLOWDOWN: _PROBE_SLOWDOWN})[1]
        overlapped = probe.extras.get("overlap_slowdown_s", 0.0) / _PROBE_SLOWDOWN
    return _Reference(run, gpu, time_s, dict(theta), ratio, np.array(a), np.array(m), np.array(lat),
                      np.array(w, dtype=float), np.array(f8, dtype=bool), np.array(iss), np.array(x),
                      step_ops, overlapped)


def _tensor_time(ref: _Reference, g: float, fp8: float) -> float:
    """compute_profile.estimator.explain's time of the tensor-core ops at throughput ``g``."""
    rate = np.where(ref.tensor_fp8, g * fp8, g)
    c = ref.tensor_a / rate
    busy = np.maximum(c, ref.tensor_m) + ref.tensor_x * np.minimum(c, ref.tensor_m)
    return float(np.sum(ref.tensor_w * (np.maximum(busy, ref.tensor_i) + ref.tensor_l)))


def _surrogate(ref: _Reference, theta: Theta, defaults: Theta) -> float:
    def val(key: str) -> float:
        return theta.get(key, defaults[key])

    def ref_val(key: str) -> float:
        return ref.theta.get(key, defaults[key])

    gk = _gpu_param(ref.gpu)
    g0 = ref.theta.get(gk, defaults.get(gk, math.nan))
    g1 = theta.get(gk, defaults.get(gk, math.nan))
    if math.isnan(g0):  # a GPU without a fitted throughput: its A_i already carry the fixed one
        g0 = g1 = 1.0
    f_key = _fp8_param(ref.gpu, defaults)
    f0, f1 = (ref_val(f_key), val(f_key)) if f_key else (1.0, 1.0)  # fixed: the A_i carry it
    d_tensor = _tensor_time(ref, g1, f1) - _tensor_time(ref, g0, f0)
    s_key = "defaults.step_overhead_s"
    d_step = ref.step_ops * (val(s_key) - ref_val(s_key))
    d_slow = ref.overlapped_s * (val(SLOWDOWN) - ref_val(SLOWDOWN)) if SLOWDOWN in defaults else 0.0
    return ref.time_s + (d_tensor + d_slow) * (1.0 + ref.bubble_ratio) + d_step


@record
class Fit:
    theta: Theta
    rows: int
    parameters: tuple[str, ...]


def _fit(refs: Sequence[_Reference], decl: Sequence[DeclaredParameter], start: Theta) -> Theta:
    try:
        from scipy.optimize import least_squares  # a well-kept bounded least-squares solver
    except ModuleNotFoundError:
        raise ConfigError("calibrate", "scipy", "is needed: pip install 'trainsim[calibrate]'") from None

    names = [d.path for d in decl]
    lo = np.array([d.lower for d in decl])
    hi = np.array([d.upper for d in decl])
    prior = np.array([d.prior for d in decl])
    psig = np.array([d.sigma for d in decl])
    measured = np.array([r.run.step_time_s for r in refs])
    gpus = [r.gpu for r in refs]
    counts = {g: gpus.count(g) for g in set(gpus)}
    weight = np.array([math.sqrt(len(refs) / (len(counts) * counts[g])) for g in gpus])
    defaults = {d.path: d.prior for d in decl}

    def residuals(x: np.ndarray) -> np.ndarray:
        theta = dict(zip(names, x.tolist()))
        pred = np.array([_surrogate(r, theta, defaults) for r in refs])
        pred = np.maximum(pred, 1e-9)
        return np.concatenate([weight * np.log(pred / measured) / LOG_SIGMA, (x - prior) / psig])

    x0 = np.clip(np.array([start.get(n, defaults[n]) for n in names]), lo, hi)
    sol = least_squares(residuals, x0, bounds=(lo, hi), x_scale=psig, method="trf")
    # A value the solver left within a millionth of the bounds' width of a bound is that
    # bound (e.g. a slow-down of 3e-26 is 0): the stored figure says what the data said.
    x = np.where(sol.x - lo < 1e-6 * (hi - lo), lo, np.where(hi - sol.x < 1e-6 * (hi - lo), hi, sol.x))
    return dict(zip(names, x.tolist()))


def calibrate(runs: Sequence[MeasuredRun], *, outer: int = 2, start: Theta | None = None,
              progress: Callable[[str], None] | None = None) -> tuple[Theta, list[_Reference]]:
    """Fit the declared parameters on ``runs``: surrogate fits with ``outer`` full
    re-simulations of the references. Returns theta and the final references."""
    decl = declared_parameters()
    theta: Theta = dict(start) if start else {d.path: d.prior for d in decl}
    refs = [_reference(r, theta) for r in runs]
    for i in range(outer):
        theta = _fit(refs, decl, theta)
        refs = [_reference(r, theta) for r in runs]
        if progress:
            progress(f"outer round {i + 1}/{outer}: refitted {len(decl)} parameters on {len(runs)} runs")
    return theta, refs


@record
class Prediction:
    run: MeasuredRun
    in_sample_s: float
    cross_validated_s: float
    prior_s: float
    memory_allocated: float | None
    memory_reserved: float | None


@record
class Check:
    """A measured run held out of the fit entirely: predicted by the fitted model (and at the
    priors), never used to fit anything, not even in a fold."""

    run: MeasuredRun
    predicted_s: float
    prior_s: float


@record
class CalibrationReport:
    parameters: tuple[DeclaredParameter, ...]
    fitted: Theta
    fold_values: dict[str, tuple[float, float]]
    """Parameter -> (min, max) over the cross-validation folds."""
    predictions: tuple[Prediction, ...]
    folds: int
    held_out: tuple[Check, ...] = ()
    """Runs predicted but never fitted (``cross_validate(holdout=...)``)."""

    @property
    def rows(self) -> int:
        return len(self.predictions)


def cross_validate(runs: Sequence[MeasuredRun], *, outer: int = 2,
                   progress: Callable[[str], None] | None = None,
                   fits_done: Callable[[int, int], None] | None = None,
                   holdout: Sequence[MeasuredRun] = ()) -> CalibrationReport:
    """Fit on all runs (in-sample) and leave each model family out in turn (cross-validated).

    ``holdout`` runs are only predicted, with the parameters fitted on ``runs``: the
    check on another source's measurements that no fold ever saw.
    ``progress`` gets a line of text per step; ``fits_done(done, total)`` the count of
    finished fits (the in-sample one, then one per left-out family) for a progress bar."""
    decl = declared_parameters()
    prior_theta = {d.path: d.prior for d in decl}
    if progress:
        progress(f"fitting {len(decl)} declared parameters on {len(runs)} measured runs")
    theta, refs = calibrate(runs, outer=outer, progress=progress)
    families = sorted({r.family for r in runs})
    if fits_done:
        fits_done(1, len(families) + 1)
    cv: dict[int, float] = {}
    values: dict[str, list[float]] = {d.path: [] for d in decl}
    for k, fam in enumerate(families, 1):
        train = [ref for ref in refs if ref.run.family != fam]
        held = [i for i, r in enumerate(runs) if r.family == fam]
        if not train:
            raise ConfigError("runs", fam, "cross-validation needs runs of more than one model family")
        fold = _fit(train, decl, theta)
        for name, v in fold.items():
            values[name].append(v)
        for i in held:
            cv[i] = simulate_run(runs[i], fold)[0]
        if progress:
            progress(f"fold {k}/{len(families)}: left out {fam} ({len(held)} runs)")
        if fits_done:
            fits_done(k + 1, len(families) + 1)
    preds = []
    for i, (run, ref) in enumerate(zip(runs, refs)):
        mem = simulate_run(run, theta)[1].memory if run.mem_allocated is not None else None
        preds.append(Prediction(
            run, ref.time_s, cv[i], simulate_run(run, prior_theta)[0],
            max(m.allocated_peak for m in mem) if mem else None,
            max(m.reserved_peak for m in mem) if mem else None))
    fold_values = {k: (min(v), max(v)) for k, v in values.items() if v}
    checks = tuple(Check(run, simulate_run(run, theta)[0], simulate_run(run, prior_theta)[0]) for run in holdout)
    return CalibrationReport(tuple(decl), theta, fold_values, tuple(preds), len(families), checks)


# --- reporting ----------------------------------------------------------------------------
def _err(pred: float, meas: float) -> float:
    return pred / meas - 1


def error_stats(errors: Sequence[float]) -> tuple[float, float, float]:
    """(median signed, median |e|, max |e|)."""
    if not errors:
        return (math.nan, math.nan, math.nan)
    return statistics.median(errors), statistics.median(abs(e) for e in errors), max(abs(e) for e in errors)


def groups(report: CalibrationReport) -> dict[str, list[Prediction]]:
    """The row subsets the report tabulates: all, per GPU, per precision, per model family."""
    out: dict[str, list[Prediction]] = {"all": list(report.predictions)}
    for p in report.predictions:
        r = p.run
        out.setdefault(f"gpu {r.system}", []).append(p)
        out.setdefault(f"precision {'fp8' if r.precision == 'fp8' else 'bf16/fp16'}", []).append(p)
        out.setdefault(f"family {r.family}", []).append(p)
    return out


def held_out_groups(report: CalibrationReport) -> dict[str, list[Check]]:
    """The held-out runs by source, GPU and precision: one source's runs on one GPU share a
    software stack, which a single median over every held-out run would hide."""
    out: dict[str, list[Check]] = {}
    for c in report.held_out:
        r = c.run
        precision = "fp8" if r.precision == "fp8" else "bf16/fp16"
        out.setdefault(f"{r.dataset} {r.system} {precision}", []).append(c)
    return dict(sorted(out.items()))


def speedups(report: CalibrationReport) -> list[tuple[str, float, float, float]]:
    """(pair, measured, in-sample, cross-validated) BF16 -> FP8 step-time ratios."""
    by_pair: dict[str, dict[str, Prediction]] = {}
    for p in report.predictions:
        by_pair.setdefault(p.run.pair, {})[p.run.precision] = p
    out = []
    for key, d in sorted(by_pair.items()):
        if "bf16" in d and "fp8" in d:
            b, f = d["bf16"], d["fp8"]
            out.append((key, b.run.step_time_s / f.run.step_time_s, b.in_sample_s / f.in_sample_s,
                        b.cross_validated_s / f.cross_validated_s))
    return out


def render_markdown(report: CalibrationReport) -> str:
    lines = [f"Fitted {len(report.parameters)} declared parameters on {report.rows} measured runs; "
             f"cross-validation leaves one model family out ({report.folds} folds). Every figure is the full "
             "simulator's. Errors are predicted / measured - 1.", "",
             "| parameter | prior (sigma) | bounds | fitted (all runs) | range over folds | source of the prior |",
             "|---|---|---|---|---|---|"]
    for d in report.parameters:
        lo, hi = report.fold_values.get(d.path, (math.nan, math.nan))
        lines.append(f"| `{d.path}` | {d.prior:g} ({d.sigma:.2g}) | [{d.lower:g}, {d.upper:g}] | {report.fitted[d.path]:.4g} | "
                     f"{lo:.4g} - {hi:.4g} | {d.source} |")
    lines += ["", "Step time, |error| median / max (signed median in brackets):", "",
              "| rows | n | priors only | in-sample | cross-validated (leave one model out) |", "|---|---|---|---|---|"]
    for name, preds in groups(report).items():
        cells = []
        for attr in ("prior_s", "in_sample_s", "cross_validated_s"):
            med, mabs, mx = error_stats([_err(getattr(p, attr), p.run.step_time_s) for p in preds])
            cells.append(f"{mabs:.1%} / {mx:.1%} ({med:+.1%})")
        lines.append(f"| {name} | {len(preds)} | " + " | ".join(cells) + " |")
    mem = [(p, p.memory_allocated, p.run.mem_allocated) for p in report.predictions if p.memory_allocated]
    mem += [(p, p.memory_reserved, p.run.mem_reserved) for p in report.predictions if p.memory_reserved]
    if mem:
        med, mabs, mx = error_stats([_err(a, b) for _, a, b in mem if b])
        lines += ["", f"Memory (allocated and reserved peaks, {len(mem)} figures; no fitted parameter, so in-sample = "
                  f"cross-validated): median |error| {mabs:.1%}, max {mx:.1%} (signed median {med:+.1%})."]
    sp = speedups(report)
    if sp:
        lines += ["", "BF16 -> FP8 speed-up (step-time ratio):", "",
                  "| pair | measured | in-sample | cross-validated | cv error |", "|---|---|---|---|---|"]
        for key, meas, ins, cvr in sp:
            lines.append(f"| {key} | {meas:.3f} | {ins:.3f} | {cvr:.3f} | {cvr / meas - 1:+.1%} |")
    if report.held_out:
        errs = [_err(c.predicted_s, c.run.step_time_s) for c in report.held_out]
        med, mabs, mx = error_stats(errs)
        sources = ", ".join(sorted({c.run.dataset for c in report.held_out}))
        lines += ["", f"Held out entirely ({len(errs)} runs from {sources}; never fitted, not even in a fold): "
                  f"|error| median {mabs:.1%}, max {mx:.1%} (signed median {med:+.1%}).", "",
                  "| held-out rows | n | priors only | fitted model |", "|---|---|---|---|"]
        for name, checks in held_out_groups(report).items():
            cells = []
            for attr in ("prior_s", "predicted_s"):
                g_med, g_mabs, g_mx = error_stats([_err(getattr(c, attr), c.run.step_time_s) for c in checks])
                cells.append(f"{g_mabs:.1%} / {g_mx:.1%} ({g_med:+.1%})")
            lines.append(f"| {name} | {len(checks)} | " + " | ".join(cells) + " |")
        lines += ["", "| held-out run | measured s | priors only | fitted model |", "|---|---|---|---|"]
        for c in report.held_out:
            m = c.run.step_time_s
            lines.append(f"| {c.run.label} | {m:.4g} | {_err(c.prior_s, m):+.1%} | {_err(c.predicted_s, m):+.1%} |")
    lines += ["", "| run | measured s | priors only | in-sample | cross-validated |", "|---|---|---|---|---|"]
    for p in report.predictions:
        m = p.run.step_time_s
        lines.append(f"| {p.run.label} | {m:.4g} | {_err(p.prior_s, m):+.1%} | {_err(p.in_sample_s, m):+.1%} | "
                     f"{_err(p.cross_validated_s, m):+.1%} |")
    return "\n".join(lines) + "\n"


def calibrated_yaml(report: CalibrationReport, data: str) -> str:
    """calibrated.yaml: the fitted values, with what they were fitted on and how well."""
    med_cv = error_stats([_err(p.cross_validated_s, p.run.step_time_s) for p in report.predictions])
    med_in = error_stats([_err(p.in_sample_s, p.run.step_time_s) for p in report.predictions])
    lines = [
        "# Written by `compute-profile calibrate --write`; do not edit by hand.",
        f"# Fitted on {report.rows} measured runs from {data} ({report.folds} model families).",
        f"# Step time |error| median/max: in-sample {med_in[1]:.1%}/{med_in[2]:.1%}, "
        f"leave-one-model-out {med_cv[1]:.1%}/{med_cv[2]:.1%} (docs/validation.md).",
        "parameters:",
    ]
    for d in report.parameters:
        lines.append(f"  {d.path}: {report.fitted[d.path]:.6g}")
    return "\n".join(lines) + "\n"
