"""Compare a predicted iteration with a measured one, figure by figure.

WHY these figures: a user lines up a simulation with a run they know by asking, in order,
"is the step time right?", "which kind of work is off?", "which layer?", "which op?".
So the diff reports the iteration time and its error, totals per category (compute by
kind, collectives by group and type, exposed communication, idle), per-layer compute by
phase, and the largest single-op mismatches.

Definitions (the same for both sides, so that they are comparable):
- a category total is the sum of its ops' durations (overlapping ops both count);
- exposed communication = |comm U compute| - |compute| (collective time with no compute
  running), idle = iteration - |all ops| (bubble, waiting, framework overhead);
- ops are paired by (layer, phase, kind, n-th occurrence); GEMMs keep bwd-input and
  bwd-weight apart when the measured side separates them, other kinds compare fwd and bwd;
  collectives pair by (phase, group, n-th occurrence), since traces rarely say their layer;
  when the two sides have different op counts for one key, their sums are compared
  (index -1 in the mismatch list).
Errors are (predicted - measured) / measured.

Units: seconds.
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import field

from formats.kernel_classes import COMM, OTHER
from formats.kineto_records import TraceOp
from formats.timeline import Timeline, exposed_comm, idle
from workload_gen.core.record import record

COARSE = {"fwd": "fwd", "recompute": "bwd", "bwd-input": "bwd", "bwd-weight": "bwd", "bwd": "bwd", "iter": "iter"}


@record
class Row:
    key: str
    predicted_s: float
    measured_s: float

    @property
    def diff_s(self) -> float:
        return self.predicted_s - self.measured_s

    @property
    def error(self) -> float | None:
        """Relative error (predicted - measured) / measured; None when nothing was measured."""
        return self.diff_s / self.measured_s if self.measured_s > 0 else None


@record
class Mismatch:
    layer: int | None
    phase: str
    kind: str
    index: int
    predicted_name: str
    measured_name: str
    predicted_s: float
    measured_s: float

    @property
    def diff_s(self) -> float:
        return self.predicted_s - self.measured_s


@record
class TraceDiff:
    predicted_source: str
    measured_source: str
    iteration: Row
    categories: tuple[Row, ...]
    layers: tuple[tuple[int, str, Row], ...]
    """(layer, fwd|bwd, compute row) where both sides have layers."""
    mismatches: tuple[Mismatch, ...]
    unmatched_categories: tuple[str, ...]
    """Measured categories with no predicted counterpart (a modelling gap)."""
    notes: tuple[str, ...] = field(default=())

    @property
    def iteration_error(self) -> float:
        return self.iteration.error if self.iteration.error is not None else 0.0


def category_totals(tl: Timeline) -> dict[str, float]:
    """Seconds per diff category: ``compute:<kind>``, ``comm:<group>``, ``comm:<group>:<type>``,
    ``exposed_comm``, ``idle`` and ``other`` (measured work no rule classifies)."""
    out: dict[str, float] = defaultdict(float)
    for o in tl.ops:
        if o.category == COMM:
            g = o.group or "?"
            out[f"comm:{g}"] += o.dur
            if o.coll:
                out[f"comm:{g}:{o.coll}"] += o.dur
        elif o.category == OTHER:
            out["other"] += o.dur
        else:
            out[f"compute:{o.category}"] += o.dur
    out["exposed_comm"] = exposed_comm(tl)
    out["idle"] = idle(tl)
    return dict(out)


def _order(key: str) -> tuple[int, str]:
    head = key.split(":", 1)[0]
    rank = {"compute": 0, "comm": 1, "exposed_comm": 2, "other": 3, "idle": 4}.get(head, 5)
    return rank, key


def _unmatched(pred: dict[str, float], meas: dict[str, float]) -> list[str]:
    missing = []
    pred_groups = {k.split(":")[1] for k, v in pred.items() if k.startswith("comm:") and v > 0}
    pred_types = {k.split(":")[2] for k, v in pred.items() if k.count(":") == 2 and v > 0}
    for key, value in meas.items():
        if value <= 0 or key in ("exposed_comm", "idle", "other"):
            continue
        if key.startswith("comm:"):
            parts = key.split(":")
            group = parts[1]
            if group == "?":
                # The trace did not name the group: any predicted collective of the same type
                # (or, without a type, any predicted collective at all) stands for it.
                ok = (parts[2] in pred_types or not pred_types and pred_groups) if len(parts) == 3 else bool(pred_groups)
            elif len(parts) == 3:
                ok = pred.get(key, 0.0) > 0 or (pred.get(f"comm:{group}", 0.0) > 0 and
                                               not any(k.startswith(f"comm:{group}:") for k in pred))
            else:
                ok = pred.get(key, 0.0) > 0
            if not ok:
                missing.append(key)
        elif pred.get(key, 0.0) <= 0:
            missing.append(key)
    return sorted(missing, key=_order)


def _per_layer(tl: Timeline) -> dict[tuple[int, str], float]:
    out: dict[tuple[int, str], float] = defaultdict(float)
    for o in tl.compute():
        if o.layer is None or o.category == OTHER or COARSE.get(o.phase) == "iter":
            continue
        out[(o.layer, COARSE.get(o.phase, o.phase))] += o.dur
    return dict(out)


def _pairing(pred: Timeline, meas: Timeline) -> list[Mismatch]:
    fine_gemm = any(o.category == "gemm" and o.phase in ("bwd-input", "bwd-weight") for o in meas.ops)

    def key(o: TraceOp) -> tuple:
        phase = o.phase if (fine_gemm and o.category == "gemm" and o.phase in ("bwd-input", "bwd-weight")) \
            else COARSE.get(o.phase, o.phase)
        if o.category == COMM:  # collectives pair by order within their group and phase
            return (None, COARSE.get(o.phase, o.phase), f"comm:{o.group or '?'}")
        return (None if phase == "iter" else o.layer, phase, o.category)  # iteration work has no layer

    def bucket(tl: Timeline) -> dict[tuple, list[TraceOp]]:
        b: dict[tuple, list[TraceOp]] = defaultdict(list)
        for o in tl.ops:
            if o.category != OTHER:
                b[key(o)].append(o)
        return b

    bp, bm = bucket(pred), bucket(meas)
    out = []
    for k in set(bp) | set(bm):
        ps, ms = bp.get(k, []), bm.get(k, [])
        if ps and ms and len(ps) != len(ms):
            # The two sides split this work differently (one loss op predicted, NllLoss and
            # LogSoftmax backward measured): compare the sums, not a misaligned n-th op.
            out.append(Mismatch(k[0], k[1], k[2], -1, f"{len(ps)} ops", f"{len(ms)} ops",
                                sum(o.dur for o in ps), sum(o.dur for o in ms)))
            continue
        for i in range(max(len(ps), len(ms))):
            p = ps[i] if i < len(ps) else None
            m = ms[i] if i < len(ms) else None
            out.append(Mismatch(k[0], k[1], k[2], i, p.name if p else "", m.name if m else "",
                                p.dur if p else 0.0, m.dur if m else 0.0))
    return out


def diff_timelines(pred: Timeline, meas: Timeline, top: int = 10) -> TraceDiff:
    """Every figure of a diff (see the module docstring)."""
    pc, mc = category_totals(pred), category_totals(meas)
    keys = sorted(set(pc) | set(mc), key=_order)
    cats = tuple(Row(k, pc.get(k, 0.0), mc.get(k, 0.0)) for k in keys)
    layers: tuple = ()
    notes = []
    if pred.num_layers is not None and meas.num_layers is not None:
        pl, ml = _per_layer(pred), _per_layer(meas)
        layers = tuple((lay, ph, Row(f"layer {lay} {ph}", pl.get((lay, ph), 0.0), ml.get((lay, ph), 0.0)))
                       for lay, ph in sorted(set(pl) | set(ml), key=lambda x: (x[0], x[1] != "fwd", x[1])))
        if pred.num_layers != meas.num_layers:
            notes.append(f"layer counts differ: predicted {pred.num_layers}, measured {meas.num_layers}")
    else:
        notes.append("per-layer table skipped: the measured trace has no layer labels (record_function 'layer.N')")
    mism = sorted(_pairing(pred, meas), key=lambda m: (-abs(m.diff_s), str(m.layer), m.phase, m.kind, m.index))
    return TraceDiff(pred.source, meas.source, Row("iteration", pred.iteration_s, meas.iteration_s), cats, layers,
                     tuple(mism[:top]), tuple(_unmatched(pc, mc)), tuple(notes))
