"""One iteration of one rank, from either side of a diff, in one shape.

WHY: ``diff-trace`` compares a simulated timeline (our ``trace.json``: engine Intervals)
with a measured one (a Kineto trace: classified TraceOps). Both are turned into a
:class:`Timeline` of :class:`~formats.kineto_records.TraceOp` with times relative to the start of
the iteration, so every figure of the diff is computed by the same code for both sides.

Also: interval-union arithmetic (busy time, exposed communication, idle), which must not
double-count overlapping kernels or streams.
"""
from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from formats.kernel_classes import COMM
from formats.kineto import load_json, read_kineto
from formats.kineto_records import KinetoTrace, TraceOp
from workload_gen.core.errors import FormatError
from workload_gen.core.record import record


@record
class Timeline:
    source: str
    side: str
    """``predicted`` or ``measured``."""
    iteration_s: float
    ops: tuple[TraceOp, ...]
    """Times relative to the iteration start (seconds)."""
    num_layers: int | None
    parallel: dict
    """Parallel sizes when known (from the simulated trace's header), else {}."""
    device: str = ""
    whole_trace: bool = False
    """A Kineto trace without ProfilerStep#N markers, taken whole as one iteration."""

    def compute(self) -> list[TraceOp]:
        return [o for o in self.ops if o.category != COMM]

    def comm(self) -> list[TraceOp]:
        return [o for o in self.ops if o.category == COMM]


def union_length(spans: list[tuple[float, float]]) -> float:
    """Total length covered by a set of intervals (overlaps counted once)."""
    total, cur_s, cur_e = 0.0, None, None
    for s, e in sorted(spans):
        if cur_e is None or s > cur_e:
            if cur_e is not None:
                total += cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    if cur_e is not None:
        total += cur_e - cur_s
    return total


def exposed_comm(tl: Timeline) -> float:
    """Time when some collective runs and no compute does: |comm U compute| - |compute|."""
    comp = [(o.start, o.end) for o in tl.compute()]
    allspans = comp + [(o.start, o.end) for o in tl.comm()]
    return union_length(allspans) - union_length(comp)


def idle(tl: Timeline) -> float:
    """Iteration time covered by no op at all (pipeline bubble, waiting, framework overhead)."""
    return max(0.0, tl.iteration_s - union_length([(o.start, o.end) for o in tl.ops]))


# --- the simulated side -------------------------------------------------------------
_COLL_WORDS = (("allreduce", ("allreduce", "all_reduce", "all-reduce", "_ar")),
               ("allgather", ("allgather", "all_gather", "all-gather", "_ag")),
               ("reducescatter", ("reducescatter", "reduce_scatter", "reduce-scatter", "_rs")),
               ("alltoall", ("alltoall", "all_to_all", "all-to-all", "dispatch", "combine")),
               ("sendrecv", ("send", "recv", "p2p")),
               ("broadcast", ("broadcast", "bcast")))


def coll_from_name(name: str) -> str:
    n = name.lower()
    for kind, words in _COLL_WORDS:
        if any(w in n for w in words):
            return kind
    return ""


def _read_sim_intervals(path: Path) -> tuple[list, dict]:
    """Intervals of our trace.json through E2's reader, and the run's header figures.

    The header (iteration time, parallel sizes) comes from summary.json beside the trace
    when there is one, so a large trace is parsed once; else from the trace's otherData.
    """
    from formats.chrome_trace import read_chrome_trace  # E2's reader: the schema's owner

    summary = path.with_name("summary.json")
    other: dict = {}
    if summary.exists():
        try:
            data = json.loads(summary.read_text())
            config = data.get("config") if isinstance(data.get("config"), dict) else {}
            other = {"iteration_time_s": data.get("iteration_time_s"), "parallel": config.get("parallel") or {}}
        except (OSError, json.JSONDecodeError):
            other = {}
    if not isinstance(other.get("iteration_time_s"), (int, float)):
        other = load_json(path).get("otherData") or {}
    return list(read_chrome_trace(path)), other


def load_simulated(path: str | Path, stage: int | None = None) -> Timeline:
    """A run-analytical output directory or its trace.json, one stage's representative rank."""
    p = Path(path)
    trace = p / "trace.json" if p.is_dir() else p
    if not trace.exists():
        raise FileNotFoundError(2, "No such file or directory (expected a run directory with trace.json)", str(trace))
    intervals, other = _read_sim_intervals(trace)
    if not intervals:
        raise FormatError(str(trace), None, "trace.json holds no intervals; run with the timeline on")
    stages = sorted({iv.stage for iv in intervals})
    if stage is None:
        stage = stages[0]
    elif stage not in stages:
        raise FormatError(str(trace), None, f"stage {stage} not in trace; stages: {', '.join(map(str, stages))}")
    mine = [iv for iv in intervals if iv.stage == stage]
    rank = min(iv.rank for iv in mine)
    mine = [iv for iv in mine if iv.rank == rank]
    iteration = other.get("iteration_time_s")
    if not isinstance(iteration, (int, float)):
        iteration = max(iv.end for iv in intervals) - min(iv.start for iv in intervals)
    ops = []
    for iv in mine:
        is_comm = iv.stream != "compute"
        ops.append(TraceOp(
            rank=iv.rank, name=iv.name, category=COMM if is_comm else iv.category,
            coll=coll_from_name(iv.name) if is_comm else "", group=iv.category if is_comm else "",
            layer=iv.layer, phase=iv.phase, step=0, start=iv.start, end=iv.end,
            stream=iv.stream, bytes=iv.bytes))
    ops.sort(key=lambda o: (o.start, o.end, o.stream, o.name))
    # Layer -1 is the embedding and layer L the head (final norm, output, loss), so the
    # largest index over all stages is the layer count when the last stage has a head.
    layers = max(iv.layer for iv in intervals) if any(iv.layer >= 0 for iv in intervals) else None
    par = other.get("parallel") if isinstance(other.get("parallel"), dict) else {}
    return Timeline(str(trace), "predicted", float(iteration), tuple(ops), layers, par, "simulated")


# --- the measured side ----------------------------------------------------------------
def _group_sizes(par: dict) -> dict[str, int]:
    """Group sizes of the simulated run's layout (placement.group_size), {} if unreadable."""
    from workload_gen.core.errors import ConfigError
    from workload_gen.core.parallel_config import ParallelConfig
    from workload_gen.core.placement import group_size
    from workload_gen.core.records import Group

    try:
        layout = ParallelConfig(**par)
    except (TypeError, ConfigError):
        return {}
    return {g.value: group_size(layout, g) for g in (Group.TP, Group.CP, Group.PP, Group.DP, Group.EP)}


def measured_timeline(trace: KinetoTrace, rank: int | None = None, step: int | Sequence[int] | None = None,
                      parallel: dict | None = None) -> Timeline:
    """One step of one rank of a Kineto trace (default: rank 0's median step). ``step`` is one
    ProfilerStep number, or several: then the median-length step among them.

    ``parallel`` (the simulated run's sizes) names the group of a collective whose trace
    records only its group size, when exactly one group has that size.
    """
    rt = trace.rank(rank) if rank is not None else trace.ranks[0]
    st = rt.median_of((step,) if isinstance(step, int) else step)
    sizes = _group_sizes(parallel or {})
    ops = []
    for o in rt.step_ops(st.number):
        if o.category == COMM and not o.group and o.group_size:
            cands = [g for g, n in sizes.items() if n == o.group_size]
            if len(cands) == 1:
                o = replace(o, group=cands[0])
        ops.append(replace(o, start=o.start - st.start, end=o.end - st.start))
    return Timeline(rt.path, "measured", st.dur, tuple(ops), rt.num_layers, dict(parallel or {}), rt.device,
                    whole_trace=bool(rt.meta.get("whole_trace")))


def load_measured(path: str | Path | list, rank: int | None = None, step: int | Sequence[int] | None = None,
                  parallel: dict | None = None, stage: int | None = None) -> Timeline:
    """A Kineto trace (file, per-rank files, directory), or another trainsim trace.json
    (then ``stage`` picks its pipeline stage, as for the simulated side)."""
    return load_any(path, rank, step, parallel, stage, side="measured")


def load_any(path: str | Path | list, rank: int | None = None, step: int | Sequence[int] | None = None,
             parallel: dict | None = None, stage: int | None = None, side: str = "measured") -> Timeline:
    """Either kind of trace on either side of a diff: a trainsim run or trace.json (``.json`` or
    ``.json.gz``; ``stage`` picks the stage) or a Kineto trace (``rank`` and ``step`` pick the
    rank and the ProfilerStep; one without markers is one iteration), labelled ``side``."""
    paths = path if isinstance(path, list) else [path]
    first = Path(paths[0])
    if len(paths) == 1 and _is_trainsim(first):
        return replace(load_simulated(first, stage), side=side)
    return replace(measured_timeline(read_kineto(path), rank, step, parallel), side=side)



def _is_trainsim(p: Path) -> bool:
    """A run directory, or a trace.json whose tail names trainsim as its producer (the
    writer puts otherData last; reading the tail avoids parsing a large file twice)."""
    if p.is_dir():  # a run directory: its trace.json says whether trainsim wrote it
        return (p / "trace.json").is_file() and _is_trainsim(p / "trace.json")
    if p.name.endswith(".json.gz"):
        import gzip
        import zlib

        try:  # a gzip stream has no seekable tail: read it (gzipped traces are the small ones)
            with gzip.open(p, "rb") as fh:
                tail = fh.read()[-4096:].decode("utf-8", errors="replace")
        except (OSError, EOFError, zlib.error):
            return False
        return '"producer":"trainsim"' in tail.replace(" ", "")
    if not p.name.endswith(".json"):
        return False
    with p.open("rb") as fh:
        fh.seek(0, 2)
        fh.seek(max(0, fh.tell() - 4096))
        tail = fh.read().decode("utf-8", errors="replace")
    return '"producer":"trainsim"' in tail.replace(" ", "")

