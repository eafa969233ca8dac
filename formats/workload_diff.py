"""Structural diff of two workloads (trainsim native or SimAI/AICB text), with explanations.

WHY: when trainsim and SimAI disagree on a run, the first question is whether they were
fed the same work. This compares, per iteration of one rank of pipeline stage 0: the
collectives by (phase, group, type) with their counts and sizes, and (between two native
files) op counts and FLOPs per layer. Every difference is located (which records or ops)
and, where it is one of AICB's documented deviations (shared/data/aicb/README.md,
shared/SIMAI_NOTES.md), explained; anything else is flagged ``unexplained``.

Normalisation so that the two formats are comparable:
- phases: fwd; bwd (input-grad, weight-grad, recompute); iter (once per iteration);
- counts are per iteration: a native file's micro-batch ops count ``num_microbatches``
  times, a SimAI file is already unrolled;
- groups: SimAI cannot name expert-TP or the tied-embedding group, so against a SimAI file
  a native ``etp`` collective counts as ``tp`` (when etp = tp) and SimAI's DP_EP as ``edp``.
Units: bytes (NCCL convention), FLOPs.
"""
from __future__ import annotations

import csv
import io
import json
from collections import Counter, defaultdict
from dataclasses import field, replace
from pathlib import Path

from formats.atomic import write_text_atomic
from workload_gen.core.errors import FormatError
from workload_gen.core.record import record

PHASE = {"fwd": "fwd", "bwd-input": "bwd", "bwd-weight": "bwd", "recompute": "bwd", "iter": "iter"}
_SIMAI_GROUP = {"tp": "tp", "ep": "ep", "dp": "dp", "dp_ep": "edp", "none": "?"}


@record
class Coll:
    phase: str
    group: str
    kind: str
    bytes: int
    count: int
    names: tuple[str, ...]


@record
class WorkloadSummary:
    source: str
    fmt: str
    """``native`` or ``simai``."""
    sizes: dict[str, int]
    """tp, pp, ep, dp, ga, world."""
    sp: bool
    default_mode: bool
    """SimAI file written by AICB's default mode (every compute time 1 ns)."""
    colls: tuple[Coll, ...]
    layer_flops: dict[int, float] = field(default_factory=dict)
    layer_ops: dict[int, Counter] = field(default_factory=dict)
    params: int | None = None
    """Parameters of one rank of stage 0 (native files)."""
    config: dict = field(default_factory=dict)
    """Model and parallel fields (native files; SimAI files do not carry them)."""


def load_summary(path: str | Path) -> WorkloadSummary:
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(2, "No such file", str(p))
    from formats.simai_reader import is_simai_file

    return _simai_summary(p) if is_simai_file(p) else _native_summary(p)


def _native_summary(p: Path) -> WorkloadSummary:
    from formats.native import read_native
    from workload_gen.core.records import CollectiveOp, ComputeOp

    wl = read_native(p)
    par = wl.parallel
    nmb = par.num_microbatches
    agg: dict[tuple, list] = defaultdict(lambda: [0, {}])  # count, names in first-seen order (a dict: O(1) membership)
    flops: dict[int, float] = defaultdict(float)
    ops: dict[int, Counter] = defaultdict(Counter)
    for stage, chunk, op in wl.ops():
        if stage != 0:
            continue
        weight = 1 if chunk < 0 else nmb
        if isinstance(op, CollectiveOp):
            group = op.group.value
            a = agg[(PHASE[op.phase.value], group, op.kind.value, op.bytes)]
            a[0] += weight
            a[1][op.name] = None
        elif isinstance(op, ComputeOp):
            flops[op.layer] += op.flops * weight
            ops[op.layer][op.kind.value] += weight
    colls = tuple(Coll(ph, g, k, b, n, tuple(names)) for (ph, g, k, b), (n, names) in sorted(agg.items()))
    sizes = {"tp": par.tp, "pp": par.pp, "ep": par.ep, "dp": par.dp, "ga": nmb, "world": par.world_size,
             "etp": par.expert_tp}
    config = {**{f"model.{k}": v for k, v in wl.model.to_dict().items()},
              **{f"parallel.{k}": v for k, v in par.to_dict().items()}}
    return WorkloadSummary(str(p), "native", sizes, par.sp, False, colls, dict(flops), dict(ops),
                           wl.stages[0].params, config)


def _simai_summary(p: Path) -> WorkloadSummary:
    from formats.simai_convert import find_microbatch_block
    from formats.simai_reader import read_simai

    sw = read_simai(p)
    h = sw.header
    ga = h.ga or 1
    try:
        start, length = find_microbatch_block(sw.records, ga)
    except ValueError:
        raise FormatError(str(p), None, f"ga: {ga} but no {ga} repeated micro-batch blocks") from None
    agg: dict[tuple, list] = defaultdict(lambda: [0, {}])  # count, names in first-seen order
    sp = False
    for i, rec in enumerate(sw.records):
        in_mb = start <= i < start + length * ga
        for col in ("fwd", "ig", "wg"):
            comm = rec.comm(col)
            kind = comm.kind
            if kind is None:
                continue
            group = _SIMAI_GROUP[rec.group(col).value]
            phase = ("fwd" if col == "fwd" else "bwd") if in_mb else "iter"
            if in_mb and col == "fwd" and group == "tp" and kind.value in ("allgather", "reducescatter"):
                sp = True
            a = agg[(phase, group, kind.value, comm.bytes)]
            a[0] += 1
            a[1][rec.name] = None
    colls = tuple(Coll(ph, g, k, b, n, tuple(names)) for (ph, g, k, b), (n, names) in sorted(agg.items()))
    default = all(r.fwd_compute_ns <= 1 and r.ig_compute_ns <= 1 and r.wg_compute_ns <= 1 for r in sw.records)
    world = h.all_gpus or 0
    tp, pp = h.tp or 1, h.pp or 1
    sizes = {"tp": tp, "pp": pp, "ep": h.ep or 1, "dp": world // (tp * pp) if world else 0, "ga": ga,
             "world": world, "etp": tp}
    return WorkloadSummary(str(p), "simai", sizes, sp, default, colls)


# --- comparing ---------------------------------------------------------------------
@record
class CollDiff:
    """One (phase, group, type) of both workloads: their collectives by size."""

    phase: str
    group: str
    kind: str
    a: tuple[Coll, ...]
    b: tuple[Coll, ...]
    explanations: tuple[str, ...] = ()
    unexplained: tuple[int, ...] = ()
    """Sizes (bytes) whose difference no known cause explains."""

    @property
    def a_count(self) -> int:
        return sum(c.count for c in self.a)

    @property
    def b_count(self) -> int:
        return sum(c.count for c in self.b)

    @property
    def a_bytes(self) -> int:
        return sum(c.count * c.bytes for c in self.a)

    @property
    def b_bytes(self) -> int:
        return sum(c.count * c.bytes for c in self.b)

    @property
    def same(self) -> bool:
        return sorted((c.bytes, c.count) for c in self.a) == sorted((c.bytes, c.count) for c in self.b)

    @property
    def key(self) -> str:
        return f"{self.phase}/{self.group}/{self.kind}"

    def sizes(self) -> list[tuple[int, int, int, tuple[str, ...], tuple[str, ...]]]:
        """(bytes, A calls, B calls, A names, B names) for every size on either side
        (one pass over each side: files with thousands of distinct sizes stay linear)."""
        by: dict[int, list] = {}
        for side, colls in ((0, self.a), (1, self.b)):
            for c in colls:
                e = by.setdefault(c.bytes, [0, 0, [], []])
                e[side] += c.count
                e[2 + side].extend(c.names)
        return [(nbytes, e[0], e[1], tuple(e[2]), tuple(e[3])) for nbytes, e in sorted(by.items())]


@record
class LayerDiff:
    layer: int
    a_flops: float
    b_flops: float
    a_ops: dict
    b_ops: dict


@record
class WorkloadDiff:
    a: WorkloadSummary
    b: WorkloadSummary
    colls: tuple[CollDiff, ...]
    layers: tuple[LayerDiff, ...]
    notes: tuple[str, ...]

    @property
    def differences(self) -> tuple[CollDiff, ...]:
        return tuple(c for c in self.colls if not c.same)

    @property
    def unexplained(self) -> tuple[CollDiff, ...]:
        return tuple(c for c in self.differences if c.unexplained)


def _fold_groups(s: WorkloadSummary, other: WorkloadSummary) -> tuple[Coll, ...]:
    """Against a SimAI file, a native etp (= tp) or emb collective is what SimAI calls TP."""
    if s.fmt != "native" or other.fmt != "simai":
        return s.colls
    out = []
    for c in s.colls:
        g = c.group
        if g == "etp" and s.sizes.get("etp") == s.sizes.get("tp"):
            g = "tp"
        out.append(Coll(c.phase, g, c.kind, c.bytes, c.count, c.names))
    return tuple(out)


def diff_workloads(a: WorkloadSummary, b: WorkloadSummary) -> WorkloadDiff:
    ca, cb = _fold_groups(a, b), _fold_groups(b, a)

    def group(cs: tuple[Coll, ...]) -> dict[tuple, list[Coll]]:
        d: dict[tuple, list[Coll]] = defaultdict(list)
        for c in cs:
            d[(c.phase, c.group, c.kind)].append(c)
        return d

    ga, gb = group(ca), group(cb)
    rows = [CollDiff(*key, tuple(ga.get(key, [])), tuple(gb.get(key, [])))
            for key in sorted(set(ga) | set(gb), key=lambda k: ({"fwd": 0, "bwd": 1, "iter": 2}[k[0]], k[1], k[2]))]
    from formats.aicb_known import explain  # the table of known causes, AICB's deviations first

    rows = [r if r.same else replace(r, **explain(r, a, b, rows)) for r in rows]
    notes = []
    layers: tuple[LayerDiff, ...] = ()
    if a.layer_flops and b.layer_flops:
        layers = tuple(LayerDiff(lay, a.layer_flops.get(lay, 0.0), b.layer_flops.get(lay, 0.0),
                                 dict(a.layer_ops.get(lay, {})), dict(b.layer_ops.get(lay, {})))
                       for lay in sorted(set(a.layer_flops) | set(b.layer_flops)))
    else:
        notes.append("FLOPs and op counts per layer compared only between two native files "
                     "(a SimAI file has compute times, not FLOPs or ops)")
    if a.sizes != b.sizes:
        diffs = [f"{k} {a.sizes.get(k)} vs {b.sizes.get(k)}" for k in sorted(set(a.sizes) | set(b.sizes))
                 if a.sizes.get(k) != b.sizes.get(k)]
        notes.append("parallel sizes differ: " + ", ".join(diffs))
    return WorkloadDiff(a, b, tuple(rows), layers, tuple(notes))


# --- output ----------------------------------------------------------------------------
def _names(names: tuple[str, ...]) -> str:
    names = tuple(dict.fromkeys(names))
    shown = ", ".join(names[:3])
    return shown + (f", +{len(names) - 3} more" if len(names) > 3 else "")


def render_workload_diff(d: WorkloadDiff) -> str:
    lines = [f"A: {d.a.source} ({d.a.fmt})", f"B: {d.b.source} ({d.b.fmt})", "",
             "collectives per iteration, one rank of stage 0 (calls; total bytes; calls x bytes each)",
             f"  {'phase/group/type':<26} {'A calls':>8} {'A bytes':>16} {'B calls':>8} {'B bytes':>16}  same"]
    for r in d.colls:
        lines.append(f"  {r.key:<26} {r.a_count:>8} {r.a_bytes:>16} {r.b_count:>8} {r.b_bytes:>16}  "
                     f"{'yes' if r.same else 'NO'}")
    diffs = d.differences
    lines += ["", f"{len(diffs)} difference(s); {len(d.unexplained)} unexplained"]
    for i, r in enumerate(diffs, 1):
        lines.append(f"[{i}] {r.key}")
        for nbytes, na, nb, names_a, names_b in r.sizes():
            if na != nb:
                lines.append(f"    {nbytes} B: A {na} call(s) ({_names(names_a) or '-'}), "
                             f"B {nb} ({_names(names_b) or '-'})")
        for e in r.explanations:
            lines.append(f"    - {e}")
        for nbytes in r.unexplained:
            lines.append(f"    - UNEXPLAINED: the {nbytes}-byte calls; no known cause matches")
    if d.layers:
        changed = [x for x in d.layers if abs(x.a_flops - x.b_flops) > 1e-9 * max(x.a_flops, x.b_flops, 1)
                   or x.a_ops != x.b_ops]
        lines += ["", f"FLOPs per layer per iteration: {len(d.layers) - len(changed)} of {len(d.layers)} "
                      "layers identical"]
        for x in changed[:20]:
            lines.append(f"  layer {x.layer}: A {x.a_flops:.6g} B {x.b_flops:.6g} FLOPs; "
                         f"ops A {dict(sorted(x.a_ops.items()))} B {dict(sorted(x.b_ops.items()))}")
    lines += [f"note: {n}" for n in d.notes]
    return "\n".join(lines) + "\n"


def to_json(d: WorkloadDiff) -> dict:
    return {
        "units": "bytes (NCCL convention), FLOPs; counts per iteration of one rank of stage 0",
        "a": d.a.source, "b": d.b.source,
        "collectives": [{"phase": r.phase, "group": r.group, "type": r.kind, "a_calls": r.a_count,
                         "a_bytes": r.a_bytes, "b_calls": r.b_count, "b_bytes": r.b_bytes, "same": r.same,
                         "sizes": [{"bytes": nb, "a_calls": na, "b_calls": nbb, "a_names": list(dict.fromkeys(xa)),
                                    "b_names": list(dict.fromkeys(xb))} for nb, na, nbb, xa, xb in r.sizes()],
                         "explanations": list(r.explanations), "unexplained_sizes": list(r.unexplained)}
                        for r in d.colls],
        "layers": [{"layer": x.layer, "a_flops": x.a_flops, "b_flops": x.b_flops, "a_ops": x.a_ops,
                    "b_ops": x.b_ops} for x in d.layers],
        "notes": list(d.notes),
    }


def write_workload_diff(d: WorkloadDiff, out: str | Path) -> list[Path]:
    out = Path(out)
    paths = [out / "workload_diff.json", out / "workload_diff.csv"]
    write_text_atomic(paths[0], json.dumps(to_json(d), indent=1) + "\n")
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["phase", "group", "type", "a_calls", "a_bytes", "b_calls", "b_bytes", "same", "explanation"])
    for r in d.colls:
        w.writerow([r.phase, r.group, r.kind, r.a_count, r.a_bytes, r.b_count, r.b_bytes, int(r.same),
                    " | ".join(r.explanations)])
    write_text_atomic(paths[1], buf.getvalue())
    return paths
