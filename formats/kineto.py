"""Read PyTorch profiler (Kineto) traces into classified, layer-attributed ops.

WHY our own parser rather than HolisticTraceAnalysis (evaluated, see docs/diff.md): HTA
drops the autograd ``Sequence number`` that links a backward op to its forward op (our
only way to put backward work on a layer), classifies kernels only as
compute/communication/memory (we need gemm/attention/norm/...), fails on CPU-only
traces, and pulls in jupyterlab, plotly and pydot. Kineto's Chrome JSON is simple enough
to read with the standard library.

What comes out, per rank (:class:`RankTrace`): the profiler steps (``ProfilerStep#N``) and
one :class:`TraceOp` per unit of work:
- GPU traces: every kernel. Its category comes from the CPU op that launched it (found by
  the ``correlation`` id) when that op is classifiable (``aten::scaled_dot_product_attention``
  makes its kernels ``attention``), else from the kernel name; NCCL kernels are
  collectives, with size and group from the ``record_param_comms`` / kernel args. A
  backward GEMM kernel takes the role (bwd-input / bwd-weight) of the ``mm`` that launched it.
- CPU-only traces: the outermost aten op (or autograd node) that does the work; its
  children are not counted again. Everything under an ``Optimizer.step`` range or a range
  named ``optimizer`` is one ``optimizer`` op.
Layers and phases: a ``record_function`` range whose name holds ``layer.N`` /
``layers.N`` / ``layer_N`` puts forward work on layer N; ``embedding`` ranges give layer
-1, ``head``/``output``/``loss`` ranges give layer ``num_layers`` (the workload's head
index, known once the largest layer index is). Backward work runs under
``autograd::engine::evaluate_function: XBackward0`` and gets the layer of the forward op
with the same autograd sequence number. A backward GEMM node's two ``mm`` children are
split into bwd-input and bwd-weight by their shapes.

Units: seconds (relative to the start of the rank's first profiled step), bytes.

This module reads the files and assembles each rank (:func:`parse_rank`); the pieces are
modules of their own so that each does one job: the records (:mod:`formats.kineto_records`),
the events as call trees with their labels (:mod:`formats.kineto_events`), and the work in
them as classified, layer-attributed ops (:mod:`formats.kineto_ops`).
"""
from __future__ import annotations

import gzip
import json
import re
import zlib
from dataclasses import replace
from operator import attrgetter
from pathlib import Path

from formats.gc_pause import no_cyclic_gc
from formats.kineto_events import (HEAD_LAYER, US, Forest, RankEvents, build_forest, release_forests, split_events,
                                   visit_all, walk_forests)
from formats.kineto_ops import UNLAUNCHED, CpuOpCollector, ForwardIndex, LaunchIndex, kernel_op
from formats.kineto_records import KinetoTrace, RankTrace, Step, TraceOp
from workload_gen.core.errors import FormatError


def load_json(path: str | Path) -> dict:
    """Load a (possibly gzipped) Chrome-trace JSON file; FormatError if it is not one."""
    p = Path(path)
    try:
        with p.open("rb") as fh:
            head = fh.read(2)
        opener = gzip.open if head == b"\x1f\x8b" else open
        with opener(p, "rb") as fh:
            raw = fh.read()  # bytes at once: json.load on a gzip text stream took twice as long
        data = json.loads(raw.decode("utf-8"))
    except (OSError, EOFError, UnicodeDecodeError, json.JSONDecodeError, zlib.error, RecursionError) as exc:
        if isinstance(exc, FileNotFoundError):
            raise
        why = "nested too deeply" if isinstance(exc, RecursionError) else str(exc)
        raise FormatError(str(p), getattr(exc, "lineno", None), f"not a JSON trace ({why})") from None
    if isinstance(data, list):
        data = {"traceEvents": data}
    if not isinstance(data, dict) or not isinstance(data.get("traceEvents"), list):
        raise FormatError(str(p), None, "no traceEvents list (not a Chrome/Kineto trace)")
    return data


def trace_files(paths: str | Path | list[str | Path]) -> list[Path]:
    """Expand a file, a directory of per-rank traces, or a list of either."""
    items = paths if isinstance(paths, (list, tuple)) else [paths]
    out: list[Path] = []
    for item in items:
        p = Path(item)
        if p.is_dir():
            found = sorted(q for q in p.iterdir() if q.name.endswith((".json", ".json.gz", ".pt.trace.json")))
            if not found:
                raise FormatError(str(p), None, "directory holds no *.json or *.json.gz trace")
            out.extend(found)
        else:
            if not p.exists():
                raise FileNotFoundError(2, "No such file or directory", str(p))
            out.append(p)
    return out


def read_kineto(paths: str | Path | list[str | Path]) -> KinetoTrace:
    """Read one trace file, a list of per-rank files, or a directory of them."""
    with no_cyclic_gc():  # the parse builds millions of objects (formats/gc_pause.py)
        return _read_kineto(paths)


def _read_kineto(paths: str | Path | list[str | Path]) -> KinetoTrace:
    files = trace_files(paths)
    ranks: list[RankTrace] = []
    for i, f in enumerate(files):
        data = load_json(f)
        if not data["traceEvents"]:
            raise FormatError(str(f), None, "traceEvents is empty: no ops and no ProfilerStep#N ranges (profile with "
                                            "torch.profiler.schedule and call prof.step() once per iteration)")
        rank = _rank_of(data, f, i if len(files) > 1 else 0)
        rt = parse_rank(data, rank, str(f))
        if not rt.steps:
            if not rt.ops:
                raise FormatError(str(f), None, "no ProfilerStep#N ranges and no ops to take as one iteration "
                                                "(profile with torch.profiler and call prof.step() per iteration)")
            rt = whole_trace_step(rt)
        ranks.append(rt)
    seen: set[int] = set()
    for rt in ranks:
        if rt.rank in seen:
            raise FormatError(rt.path, None, f"rank {rt.rank} appears twice among the trace files")
        seen.add(rt.rank)
    return KinetoTrace(tuple(sorted(ranks, key=lambda r: r.rank)))


WHOLE_TRACE_STEP = 0
"""The step number given to a trace without ProfilerStep#N markers (one iteration)."""


def whole_trace_step(rt: RankTrace) -> RankTrace:
    """A trace profiled with a plain ``with profile():`` has no ProfilerStep#N ranges: its
    whole span, from the first op's start to the last op's end, is taken as one iteration
    (``meta["whole_trace"]`` says so, and diff-trace prints it in one line)."""
    start = min(o.start for o in rt.ops)
    end = max(o.end for o in rt.ops)
    ops = tuple(replace(o, step=WHOLE_TRACE_STEP, start=o.start - start, end=o.end - start) for o in rt.ops)
    return replace(rt, steps=(Step(WHOLE_TRACE_STEP, 0.0, end - start),), ops=ops,
                   meta={**rt.meta, "whole_trace": True})


def _rank_of(data: dict, path: Path, default: int) -> int:
    info = data.get("distributedInfo")
    if isinstance(info, dict) and isinstance(info.get("rank"), int):
        return info["rank"]
    m = re.search(r"rank[_-]?(\d+)", path.name, re.I)
    return int(m.group(1)) if m else default


# --- one rank -------------------------------------------------------------------------
# parse_rank reads a rank in five steps:
#   split_events       CPU events per thread (to nest) and GPU kernels (to tie to launches);
#   build_forest       each thread's call trees, every node with the labels that hold at it
#                      (formats.kineto_events);
#   ForwardIndex       pass 1 over the CPU trees: steps, and per autograd sequence number the
#                      layer and inputs of the forward ops (backward work needs them);
#   pass 2             CPU-only trace: CpuOpCollector emits the ops;
#                      GPU trace: LaunchIndex remembers each launch's context, then
#                      kernel_op turns every kernel into an op (formats.kineto_ops);
#   _finish            head layer index, time origin, order.
def parse_rank(data: dict, rank: int, path: str = "<trace>") -> RankTrace:
    """Classify and attribute the work of one rank's trace (see the module docstring)."""
    events = split_events(data["traceEvents"], path)
    forests = [build_forest(v) for v in events.cpu_by_thread.values()]
    try:
        return _attribute(data, rank, path, events, forests)
    finally:
        release_forests(forests)  # no parent/child cycles left for the collector (kineto_events)


def _attribute(data: dict, rank: int, path: str, events: RankEvents, forests: list[Forest]) -> RankTrace:
    """Pass 1 and 2 of :func:`parse_rank` over the trees (module comment above)."""
    fwd = ForwardIndex()
    visit_all(forests, fwd.visit)
    steps = fwd.steps
    if events.kernels:
        # On a GPU the kernels are the work; the CPU ops only launched them.
        launches = LaunchIndex()
        visit_all(forests, launches.visit)
        ops = [kernel_op(rank, k, launches.by_corr.get((k.get("args") or {}).get("correlation"), UNLAUNCHED), fwd)
               for k in events.kernels]
        steps = _gpu_step_windows(steps, ops)
    else:
        collector = CpuOpCollector(rank, fwd)
        walk_forests(forests, collector.visit)
        ops = collector.ops
    return _finish(data, rank, path, "gpu" if events.kernels else "cpu", steps, ops)


def _finish(data: dict, rank: int, path: str, device: str, steps: dict[int, tuple[float, float]],
            ops: list[TraceOp]) -> RankTrace:
    """Give head work its layer index, move time zero to the first step, order the ops."""
    labelled = [o.layer for o in ops if o.layer is not None and 0 <= o.layer < HEAD_LAYER]
    num_layers = max(labelled) + 1 if labelled else None
    if any(o.layer == HEAD_LAYER for o in ops):
        # The head's index is the layer count; without numbered layers it is unknown.
        ops = [replace(o, layer=num_layers) if o.layer == HEAD_LAYER else o for o in ops]
    step_list = tuple(Step(n, s * US, e * US) for n, (s, e) in sorted(steps.items()))
    origin = step_list[0].start if step_list else min((o.start for o in ops), default=0.0)
    step_list = tuple(Step(s.number, s.start - origin, s.end - origin) for s in step_list)
    ops = sorted([o.moved(origin) for o in ops], key=attrgetter("start", "end", "stream", "name"))
    meta = {k: v for k, v in data.items() if k != "traceEvents" and isinstance(v, (str, int, float))}
    return RankTrace(rank, path, device, step_list, tuple(ops), num_layers, meta)


def _gpu_step_windows(cpu_steps: dict[int, tuple[float, float]], ops: list[TraceOp]) -> dict[int, tuple[float, float]]:
    """A step on the GPU runs from its first kernel's start to its last kernel's end (us)."""
    win: dict[int, list[float]] = {}
    for o in ops:
        if o.step < 0:
            continue
        w = win.setdefault(o.step, [o.start / US, o.end / US])
        w[0] = min(w[0], o.start / US)
        w[1] = max(w[1], o.end / US)
    out = {}
    numbers = sorted(cpu_steps)
    for i, n in enumerate(numbers):
        if n not in win:
            out[n] = cpu_steps[n]
            continue
        start = win[n][0]
        # Up to the next step's first kernel, so that idle gaps between steps are counted.
        nxt = win.get(numbers[i + 1]) if i + 1 < len(numbers) else None
        out[n] = (start, nxt[0] if nxt else win[n][1])
    return out
