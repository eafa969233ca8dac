"""trace.json: a run's timeline in Chrome/Perfetto's JSON object format, and its reader.

Schema (notes/TRACE_SCHEMA.md, mirrored in docs/analytical.md): one process per pipeline
stage (pid = stage), one thread per stream (tid = index in :data:`STREAMS`), one
complete event ("ph": "X") per :class:`workload_gen.run_result.Interval`. ts/dur are microseconds
(Chrome's convention) rounded to 1e-3 us, so reading back gives the intervals to 1e-9 s.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from formats.atomic import atomic_write
from workload_gen.errors import FormatError
from workload_gen.run_result import Interval, RunResult

STREAMS: tuple[str, ...] = ("compute", "tp", "cp", "ep", "etp", "dp", "edp", "pp", "emb")
_TID = {s: i for i, s in enumerate(STREAMS)}
UNITS = "ts and dur in microseconds (Chrome trace convention)"


def _us(t: float) -> float:
    return round(t * 1e6, 3)


DEFAULT_MICROBATCHES = 8
"""Micro-batches a trace shows by default: the first and last half of this many, which hold
the pipeline's warm-up and cool-down; the steady state between repeats them. A person reads
a trace, and at 96+ micro-batches the full one is tens of MB that no viewer opens quickly;
``run-analytical --trace-microbatches all`` writes every one."""


def shown_intervals(result: RunResult, microbatches: int | None = DEFAULT_MICROBATCHES) -> tuple[list[Interval], tuple[int, int] | None]:
    """The intervals a trace shows, and the (first, last) micro-batch left out (None: all shown).
    Once-per-iteration work (micro-batch -1) is always shown."""
    m = result.workload.parallel.num_microbatches
    if microbatches is None or m <= microbatches:
        return list(result.intervals), None
    head = (microbatches + 1) // 2
    tail_from = m - microbatches // 2
    keep = [iv for iv in result.intervals if iv.microbatch < head or iv.microbatch >= tail_from]
    return keep, (head, tail_from - 1)


def _metadata(result: RunResult, intervals: list[Interval] | None = None) -> list[dict[str, Any]]:
    """Process (stage) and thread (stream) names, for the streams each stage uses."""
    par = result.workload.parallel
    stage_rank: dict[int, int] = {}
    streams_used: dict[int, set[str]] = {}
    for iv in (result.intervals if intervals is None else intervals):
        stage_rank.setdefault(iv.stage, iv.rank)
        streams_used.setdefault(iv.stage, set()).add(iv.stream)
    stage_size = par.world_size // par.pp
    events: list[dict[str, Any]] = []
    for stage in range(par.pp):
        rank = stage_rank.get(stage, stage * stage_size)
        events.append({"ph": "M", "name": "process_name", "pid": stage, "tid": 0,
                       "args": {"name": f"stage {stage} (rank {rank})"}})
        events.append({"ph": "M", "name": "process_sort_index", "pid": stage, "tid": 0, "args": {"sort_index": stage}})
        for stream in STREAMS:
            if stream == "compute" or stream in streams_used.get(stage, ()):
                events.append({"ph": "M", "name": "thread_name", "pid": stage, "tid": _TID[stream],
                               "args": {"name": stream}})
    return events


def _other(result: RunResult) -> dict[str, Any]:
    return {"units": UNITS, "producer": "trainsim", "iteration_time_s": result.iteration_time_s,
            "backend": result.backend, "model": result.workload.model.name, "system": result.system.name,
            "parallel": result.workload.parallel.to_dict()}


def _tid(stream: str) -> int:
    tid = _TID.get(stream)
    if tid is None:
        raise ValueError(f"interval stream {stream!r} is not one of {STREAMS}")
    return tid


def trace_dict(result: RunResult) -> dict[str, Any]:
    """The trace as a JSON-ready dict (events in interval order after the metadata)."""
    events = _metadata(result)
    for iv in result.intervals:
        ts = _us(iv.start)
        events.append({
            "ph": "X", "pid": iv.stage, "tid": _tid(iv.stream), "name": iv.name, "cat": iv.category,
            "ts": ts, "dur": round(_us(iv.end) - ts, 3),
            "args": {"layer": iv.layer, "phase": iv.phase, "microbatch": iv.microbatch, "chunk": iv.chunk,
                     "bytes": int(iv.bytes), "exposed_s": float(iv.exposed_s), "rank": iv.rank},
        })
    return {"traceEvents": events, "displayTimeUnit": "ms", "otherData": _other(result)}


def trace_json(result: RunResult, microbatches: int | None = None) -> str:
    """The trace as JSON text, one event per line (the same content as :func:`trace_dict`);
    ``microbatches``: show only the first and last of them (:func:`shown_intervals`; the
    omitted range is named in otherData), None for all.

    Events are formatted directly rather than through dicts and ``json.dumps``: a run's
    timeline has 10^4-10^5 intervals and this is the hot part of writing the outputs.
    """
    esc: dict[str, str] = {}

    def q(text: str) -> str:
        out = esc.get(text)
        if out is None:
            out = esc[text] = json.dumps(text)
        return out

    intervals, omitted = shown_intervals(result, microbatches)
    lines = [json.dumps(e, separators=(",", ":")) for e in _metadata(result, intervals)]
    for iv in intervals:
        ts = _us(iv.start)
        lines.append(
            f'{{"ph":"X","pid":{iv.stage},"tid":{_tid(iv.stream)},"name":{q(iv.name)},"cat":{q(iv.category)},'
            f'"ts":{ts!r},"dur":{round(_us(iv.end) - ts, 3)!r},"args":{{"layer":{iv.layer},'
            f'"phase":{q(iv.phase)},"microbatch":{iv.microbatch},"chunk":{iv.chunk},"bytes":{int(iv.bytes)},'
            f'"exposed_s":{float(iv.exposed_s)!r},"rank":{iv.rank}}}}}')
    other_data = _other(result)
    if omitted is not None:
        other_data["omitted_microbatches"] = list(omitted)
        other_data["note"] = (f"micro-batches {omitted[0]}-{omitted[1]} (the pipeline's steady state) are left out; "
                              "--trace-microbatches all writes them")
    other = json.dumps(other_data, separators=(",", ":"))
    return '{"traceEvents":[\n' + ",\n".join(lines) + '\n],"displayTimeUnit":"ms","otherData":' + other + "}\n"


def write_chrome_trace(result: RunResult, path: str | Path) -> None:
    with atomic_write(path) as fh:
        fh.write(trace_json(result))


def read_chrome_trace(path: str | Path) -> list[Interval]:
    """The intervals of a trace.json written by :func:`write_chrome_trace` (or compatible)."""
    p = str(path)
    try:
        data = json.loads(Path(path).read_text())
    except json.JSONDecodeError as exc:
        raise FormatError(p, exc.lineno, f"not valid JSON: {exc.msg}") from None
    events = data.get("traceEvents") if isinstance(data, dict) else data
    if not isinstance(events, list):
        raise FormatError(p, None, "expected a JSON object with a 'traceEvents' list (Chrome trace format)")
    names: dict[tuple[int, int], str] = {}
    for ev in events:
        if isinstance(ev, dict) and ev.get("ph") == "M" and ev.get("name") == "thread_name":
            names[(ev.get("pid"), ev.get("tid"))] = ev.get("args", {}).get("name", "")
    out: list[Interval] = []
    for i, ev in enumerate(events):
        if not isinstance(ev, dict) or ev.get("ph") != "X":
            continue
        try:
            pid, tid = int(ev["pid"]), int(ev["tid"])
            args = ev.get("args", {})
            stream = names.get((pid, tid)) or (STREAMS[tid] if 0 <= tid < len(STREAMS) else str(tid))
            start = float(ev["ts"]) * 1e-6
            end = (float(ev["ts"]) + float(ev["dur"])) * 1e-6
            out.append(Interval(
                stage=pid, rank=int(args.get("rank", -1)), stream=stream, name=str(ev["name"]),
                layer=int(args.get("layer", -1)), phase=str(args.get("phase", "")),
                microbatch=int(args.get("microbatch", -1)), chunk=int(args.get("chunk", 0)),
                start=start, end=end, category=str(ev.get("cat", "")),
                bytes=int(args.get("bytes", 0)), exposed_s=float(args.get("exposed_s", 0.0)),
            ))
        except (KeyError, TypeError, ValueError) as exc:
            raise FormatError(p, None, f"traceEvents[{i}]: bad complete event ({exc!r}); needs pid, tid, name, ts, dur") from None
    return out
