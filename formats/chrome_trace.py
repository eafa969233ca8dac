"""trace.json: a run's timeline in Chrome/Perfetto's JSON object format, and its reader.

Schema (notes/TRACE_SCHEMA.md, mirrored in docs/analytical.md): one process per pipeline
stage (pid = stage), one thread per stream (tid = index in :data:`STREAMS`; a further rank
of the same stage, when the timeline holds several, gets tid + 16 k and threads named
"stream (rank R)"), one complete event ("ph": "X") per :class:`workload_gen.core.run_result.Interval`.
ts/dur are microseconds (Chrome's convention) rounded to 1e-3 us, so reading back gives the
intervals to 1e-9 s. After the complete events: a flow ("ph": "s" then "f", cat "pp_flow")
from each pipeline send to the receiving rank's compute track, and a counter track per stage
("ph": "C", "allocated memory", GiB). The reader takes the complete events.

Written from the timeline's compact form (engine.timeline: memoised passes as Blocks): the
cost of the events follows the micro-batches shown, not the run (:func:`iter_trace_json`);
the memory counter track is the exception: it walks every pass of the run once.
"""
from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from formats.atomic import atomic_write
from workload_gen.core.errors import FormatError
from workload_gen.core.run_result import Interval, RunResult

STREAMS: tuple[str, ...] = ("compute", "tp", "cp", "ep", "etp", "dp", "edp", "pp", "emb", "amax")
_TID = {s: i for i, s in enumerate(STREAMS)}
UNITS = "ts and dur in microseconds (Chrome trace convention)"


def _us(t: float) -> float:
    return round(t * 1e6, 3)


DEFAULT_MICROBATCHES = 8
"""Micro-batches a trace shows by default: the first and last half of this many, which hold
the pipeline's warm-up and cool-down; the steady state between repeats them. A person reads
a trace, and at 96+ micro-batches the full one is tens of MB that no viewer opens quickly;
``run-analytical --trace-microbatches all`` writes every one."""


def window_bounds(total: int, shown: int) -> tuple[int, int]:
    """(head_end, tail_start) of a trace showing ``shown`` of ``total`` micro-batches: it shows
    micro-batches ``mb < head_end`` and ``mb >= tail_start``, the first ceil(shown / 2) and the
    last floor(shown / 2). Why both ends: the first hold the pipeline's warm-up and the last
    its cool-down, while those between repeat the steady state. The one statement of the rule:
    the trace writer and engine.api / engine.steady_timeline (which build only this window of
    a long run) must agree on it. Meaningful when ``shown < total``."""
    return (shown + 1) // 2, total - shown // 2


def _window(result: RunResult, microbatches: int | None) -> tuple[Callable[[int], bool] | None, tuple[int, int] | None]:
    """The micro-batch filter of a trace (None: all shown) and the (first, last) left out."""
    m = result.workload.parallel.num_microbatches
    if microbatches is None or m <= microbatches:
        return None, None
    head, tail_from = window_bounds(m, microbatches)
    return (lambda mb: mb < head or mb >= tail_from), (head, tail_from - 1)


def _iter_shown(result: RunResult, keep: Callable[[int], bool] | None) -> Iterator[Interval]:
    ivs = result.intervals
    if hasattr(ivs, "iter_intervals"):  # engine.timeline.Timeline: stream, never materialise
        return ivs.iter_intervals(keep)
    return iter(ivs) if keep is None else (iv for iv in ivs if keep(iv.microbatch))


def shown_intervals(result: RunResult, microbatches: int | None = DEFAULT_MICROBATCHES) -> tuple[list[Interval], tuple[int, int] | None]:
    """The intervals a trace shows, and the (first, last) micro-batch left out (None: all shown).
    Once-per-iteration work (micro-batch -1) is always shown."""
    keep, omitted = _window(result, microbatches)
    return list(_iter_shown(result, keep)), omitted


def _parts(result: RunResult, keep: Callable[[int], bool] | None) -> Iterator[Any]:
    """The timeline's compact parts (Blocks and Intervals) that are shown; a plain sequence of
    intervals (a hand-built RunResult) yields its intervals."""
    ivs = result.intervals
    parts = ivs.parts() if hasattr(ivs, "parts") else ivs
    for p in parts:
        if keep is None or keep(p.microbatch):
            yield p


class _Tracks:
    """pid per stage; tid per (rank, stream). A stage's first rank keeps tid = stream index; when
    a timeline holds several ranks of a stage (all_ranks, packet backends), each further rank
    gets its own set of threads (tid + 16 k, named "stream (rank R)"), so ranks that differ do
    not pile into one track."""

    STRIDE = 16

    def __init__(self) -> None:
        self.rank_index: dict[int, dict[int, int]] = {}
        self.streams: dict[tuple[int, int], set[str]] = {}

    def see(self, stage: int, rank: int, stream: str) -> None:
        ranks = self.rank_index.setdefault(stage, {})
        if rank not in ranks:
            ranks[rank] = len(ranks)
        self.streams.setdefault((stage, rank), set()).add(stream)

    def tid(self, stage: int, rank: int, stream: str) -> int:
        return _tid(stream) + self.STRIDE * self.rank_index.get(stage, {}).get(rank, 0)

    def metadata(self, result: RunResult) -> list[dict[str, Any]]:
        """Process (stage) and thread (stream) names, for the streams each rank uses."""
        par = result.workload.parallel
        stage_size = par.world_size // par.pp
        events: list[dict[str, Any]] = []
        for stage in range(par.pp):
            ranks = self.rank_index.get(stage, {})
            first = next(iter(ranks), stage * stage_size)
            label = f"stage {stage} (rank {first})" if len(ranks) <= 1 else \
                f"stage {stage} (ranks {', '.join(map(str, ranks))})"
            events.append({"ph": "M", "name": "process_name", "pid": stage, "tid": 0, "args": {"name": label}})
            events.append({"ph": "M", "name": "process_sort_index", "pid": stage, "tid": 0,
                           "args": {"sort_index": stage}})
            for rank, k in (ranks.items() if ranks else [(first, 0)]):
                used = self.streams.get((stage, rank), ())
                for stream in STREAMS:
                    if stream == "compute" or stream in used:
                        name = stream if k == 0 else f"{stream} (rank {rank})"
                        events.append({"ph": "M", "name": "thread_name", "pid": stage,
                                       "tid": _tid(stream) + self.STRIDE * k, "args": {"name": name}})
        return events


def _scan(result: RunResult, keep: Callable[[int], bool] | None) -> _Tracks:
    tracks = _Tracks()
    seen_profiles: set[tuple[int, int, int]] = set()
    for p in _parts(result, keep):
        if type(p) is not Interval:  # an engine.timeline.Block
            key = (p.stage, p.rank, id(p.profile))
            if key in seen_profiles:
                continue
            seen_profiles.add(key)
            tracks.see(p.stage, p.rank, "compute")
            for rec in p.profile.records:
                tracks.see(p.stage, p.rank, rec[0])
        else:
            tracks.see(p.stage, p.rank, p.stream)
    return tracks


def _other(result: RunResult) -> dict[str, Any]:
    return {"units": UNITS, "producer": "trainsim", "iteration_time_s": result.iteration_time_s,
            "backend": result.backend, "model": result.workload.model.name, "system": result.system.name,
            "parallel": result.workload.parallel.to_dict()}


def _tid(stream: str) -> int:
    tid = _TID.get(stream)
    if tid is None:
        raise ValueError(f"interval stream {stream!r} is not one of {STREAMS}")
    return tid


def _flow(result: RunResult, tracks: _Tracks, iv: Interval, flow_id: int) -> list[dict[str, Any]] | None:
    """Flow arrow of a pipeline transfer (an interval on the pp stream, recorded by its sender):
    from the send to the receiving rank's compute track at the transfer's end, where the
    receiving pass can start."""
    par = result.workload.parallel
    pp, vpp = par.pp, par.vpp
    forward = not iv.phase.startswith("bwd")
    virtual = iv.chunk * pp + iv.stage
    dst_virtual = virtual + 1 if forward else virtual - 1
    if iv.chunk < 0 or dst_virtual < 0 or dst_virtual >= pp * vpp:
        return None
    dst_stage = dst_virtual % pp
    dst_rank = iv.rank + (dst_stage - iv.stage) * (par.world_size // pp)
    ts, te = _us(iv.start), _us(iv.end)
    return [{"ph": "s", "id": flow_id, "pid": iv.stage, "tid": tracks.tid(iv.stage, iv.rank, "pp"), "ts": ts,
             "name": iv.name, "cat": "pp_flow"},
            {"ph": "f", "bp": "e", "id": flow_id, "pid": dst_stage,
             "tid": tracks.tid(dst_stage, dst_rank, "compute"), "ts": te, "name": iv.name, "cat": "pp_flow"}]


def _memory_counters(result: RunResult, keep: Callable[[int], bool] | None) -> list[dict[str, Any]]:
    """A counter track per stage: allocated memory of its first rank over the iteration (GiB),
    from the timeline's ``memory_track`` (engine.timeline.Timeline: static parts plus the
    activations of the micro-batches in flight). Events only at the shown micro-batches'
    passes; the values count every micro-batch. Empty for a timeline without a memory track
    or a run without a memory estimate."""
    track = getattr(result.intervals, "memory_track", None)
    if track is None or not result.memory:
        return []
    return [{"ph": "C", "pid": stage, "name": "allocated memory", "ts": _us(t),
             "args": {"GiB": round(nbytes / 2**30, 4)}}
            for stage, t, nbytes, mb in track(result.workload, result.memory) if keep is None or keep(mb)]


def trace_dict(result: RunResult, microbatches: int | None = None) -> dict[str, Any]:
    """The trace as a JSON-ready dict (metadata, then one complete event per interval, then the
    pipeline flow arrows): the same content as :func:`trace_json`, built the plain way."""
    keep, omitted = _window(result, microbatches)
    shown = list(_iter_shown(result, keep))
    tracks = _Tracks()
    for iv in shown:
        tracks.see(iv.stage, iv.rank, iv.stream)
    events = tracks.metadata(result)
    flows: list[dict[str, Any]] = []
    for iv in shown:
        ts = _us(iv.start)
        events.append({
            "ph": "X", "pid": iv.stage, "tid": tracks.tid(iv.stage, iv.rank, iv.stream), "name": iv.name,
            "cat": iv.category, "ts": ts, "dur": round(_us(iv.end) - ts, 3),
            "args": {"layer": iv.layer, "phase": iv.phase, "microbatch": iv.microbatch, "chunk": iv.chunk,
                     "bytes": int(iv.bytes), "exposed_s": float(iv.exposed_s), "rank": iv.rank},
        })
        if iv.stream == "pp":
            f = _flow(result, tracks, iv, len(flows) // 2 + 1)
            if f:
                flows += f
    events += flows + _memory_counters(result, keep)
    return {"traceEvents": events, "displayTimeUnit": "ms", "otherData": _other_data(result, omitted)}


def _other_data(result: RunResult, omitted: tuple[int, int] | None) -> dict[str, Any]:
    other_data = _other(result)
    if omitted is not None:
        other_data["omitted_microbatches"] = list(omitted)
        other_data["note"] = (f"micro-batches {omitted[0]}-{omitted[1]} (the pipeline's steady state) are left out; "
                              "--trace-microbatches all writes them")
    return other_data


def _x_text(q: Callable[[str], str], tid: int, iv: Interval) -> tuple[str, str, str]:
    """A complete event's JSON text without its per-instance fields, as (pre, mid, post): the
    event is ``pre + ts + ',"dur":' + dur + mid + microbatch + ',"chunk":' + chunk + post``
    (the order of :func:`trace_dict`'s keys). ``q``: JSON-quotes a string."""
    return (f'{{"ph":"X","pid":{iv.stage},"tid":{tid},"name":{q(iv.name)},"cat":{q(iv.category)},"ts":',
            f',"args":{{"layer":{iv.layer},"phase":{q(iv.phase)},"microbatch":',
            f',"bytes":{int(iv.bytes)},"exposed_s":{float(iv.exposed_s)!r},"rank":{iv.rank}}}}}')


def iter_trace_json(result: RunResult, microbatches: int | None = None) -> Iterator[str]:
    """The trace as JSON text in pieces (one event per line; the same content as
    :func:`trace_dict`); ``microbatches``: show only the first and last of them (the omitted
    range is named in otherData), None for all.

    Cost follows what is shown, not the run: the timeline is read in its compact form
    (engine.timeline.Block: one memoised pass instance), the fixed part of each event of a
    pass (name, category, track, layer, phase, bytes, exposed time, rank) is formatted once per
    (pass profile, rank) and each instance only stamps its times, micro-batch and chunk."""
    esc: dict[str, str] = {}

    def q(text: str) -> str:
        out = esc.get(text)
        if out is None:
            out = esc[text] = json.dumps(text)
        return out

    keep, omitted = _window(result, microbatches)
    tracks = _scan(result, keep)
    meta = [json.dumps(e, separators=(",", ":")) for e in tracks.metadata(result)]
    yield '{"traceEvents":[\n' + ",\n".join(meta)
    templates: dict[tuple[int, int], tuple[Any, list[tuple[float, float, str, str, str]]]] = {}
    flows: list[str] = []
    chunk: list[str] = []
    sep = ",\n"
    for p in _parts(result, keep):
        if type(p) is not Interval:  # an engine.timeline.Block: one memoised pass instance
            prof, st, rk = p.profile, p.stage, p.rank
            tkey = (id(prof), rk)
            hit = templates.get(tkey)
            if hit is None or hit[0] is not prof:
                recs = [(iv.start, iv.end, *_x_text(q, tracks.tid(st, rk, iv.stream), iv))
                        for iv in p.relative_intervals()]
                hit = templates[tkey] = (prof, recs)
            off = p.offset
            mbch = f'{p.microbatch},"chunk":{p.chunk}'
            for s, e, pre, mid, post in hit[1]:
                ts = round((s + off) * 1e6, 3)
                chunk.append(f'{pre}{ts!r},"dur":{round(round((e + off) * 1e6, 3) - ts, 3)!r}{mid}{mbch}{post}')
        else:
            iv = p
            pre, mid, post = _x_text(q, tracks.tid(iv.stage, iv.rank, iv.stream), iv)
            ts = _us(iv.start)
            chunk.append(f'{pre}{ts!r},"dur":{round(_us(iv.end) - ts, 3)!r}{mid}{iv.microbatch},"chunk":{iv.chunk}{post}')
            if iv.stream == "pp":
                f = _flow(result, tracks, iv, len(flows) // 2 + 1)
                if f:
                    flows += [json.dumps(e, separators=(",", ":")) for e in f]
        if len(chunk) >= 4096:
            yield sep + sep.join(chunk)
            chunk = []
    if chunk:
        yield sep + sep.join(chunk)
    flows += [json.dumps(e, separators=(",", ":")) for e in _memory_counters(result, keep)]
    if flows:
        yield sep + sep.join(flows)
    other = json.dumps(_other_data(result, omitted), separators=(",", ":"))
    yield '\n],"displayTimeUnit":"ms","otherData":' + other + "}\n"


def trace_json(result: RunResult, microbatches: int | None = None) -> str:
    """The trace as JSON text (:func:`iter_trace_json` joined)."""
    return "".join(iter_trace_json(result, microbatches))


def write_chrome_trace(result: RunResult, path: str | Path, microbatches: int | None = None) -> None:
    """Stream the trace to ``path`` (atomically), gzip-compressed when the name ends in ``.gz``;
    memory stays proportional to one chunk of events, not to the trace."""
    if str(path).endswith(".gz"):
        import gzip

        with atomic_write(path, "wb") as fh, gzip.GzipFile(fileobj=fh, mode="wb", compresslevel=6, mtime=0) as gz:
            for piece in iter_trace_json(result, microbatches):
                gz.write(piece.encode())
        return
    with atomic_write(path) as fh:
        for piece in iter_trace_json(result, microbatches):
            fh.write(piece)


def read_chrome_trace(path: str | Path) -> list[Interval]:
    """The intervals of a trace.json written by :func:`write_chrome_trace` (or compatible)."""
    from formats.gc_pause import no_cyclic_gc

    with no_cyclic_gc():  # millions of event dicts, none of them garbage
        return _read_chrome_trace(path)


def _read_chrome_trace(path: str | Path) -> list[Interval]:
    p = str(path)
    try:
        raw = Path(path).read_bytes()
        if raw[:2] == b"\x1f\x8b":  # gzipped (trace.json.gz): Perfetto and Kineto write these too
            import gzip
            import zlib

            try:
                raw = gzip.decompress(raw)
            except (OSError, EOFError, zlib.error) as exc:
                raise FormatError(p, None, f"not a readable gzip file ({exc})") from None
        data = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise FormatError(p, None, f"not a JSON trace (not UTF-8 text: {exc.reason})") from None
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
            stream = names.get((pid, tid)) or (STREAMS[tid % _Tracks.STRIDE] if tid % _Tracks.STRIDE < len(STREAMS) else str(tid))
            if " (rank " in stream:  # a further rank's track ("tp (rank 3)")
                stream = stream.split(" (rank ", 1)[0]
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
