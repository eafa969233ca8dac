"""trace.json: a run's timeline in Chrome/Perfetto's JSON object format, and its reader.

Schema (notes/TRACE_SCHEMA.md, mirrored in docs/analytical.md): one process per pipeline
stage (pid = stage), one thread per stream (tid = index in :data:`STREAMS`), one
complete event ("ph": "X") per :class:`engine.result.Interval`. ts/dur are microseconds
(Chrome's convention) rounded to 1e-3 us, so reading back gives the intervals to 1e-9 s.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from engine.result import Interval, RunResult
from formats.atomic import atomic_write
from workload_gen.errors import FormatError

STREAMS: tuple[str, ...] = ("compute", "tp", "cp", "ep", "etp", "dp", "edp", "pp", "emb")
_TID = {s: i for i, s in enumerate(STREAMS)}
UNITS = "ts and dur in microseconds (Chrome trace convention)"


def _us(t: float) -> float:
    return round(t * 1e6, 3)


def trace_dict(result: RunResult) -> dict[str, Any]:
    """The trace as a JSON-ready dict (events in interval order after the metadata)."""
    wl = result.workload
    par = wl.parallel
    stage_rank: dict[int, int] = {}
    streams_used: dict[int, set[str]] = {}
    for iv in result.intervals:
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
    for iv in result.intervals:
        if iv.stream not in _TID:
            raise ValueError(f"interval stream {iv.stream!r} is not one of {STREAMS}")
        ts = _us(iv.start)
        events.append({
            "ph": "X", "pid": iv.stage, "tid": _TID[iv.stream], "name": iv.name, "cat": iv.category,
            "ts": ts, "dur": round(_us(iv.end) - ts, 3),
            "args": {"layer": iv.layer, "phase": iv.phase, "microbatch": iv.microbatch, "chunk": iv.chunk,
                     "bytes": iv.bytes, "exposed_s": iv.exposed_s, "rank": iv.rank},
        })
    return {
        "traceEvents": events,
        "displayTimeUnit": "ms",
        "otherData": {
            "units": UNITS, "producer": "trainsim", "iteration_time_s": result.iteration_time_s,
            "backend": result.backend, "model": wl.model.name, "system": result.system.name,
            "parallel": par.to_dict(),
        },
    }


def write_chrome_trace(result: RunResult, path: str | Path) -> None:
    with atomic_write(path) as fh:
        json.dump(trace_dict(result), fh, separators=(",", ":"))
        fh.write("\n")


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
