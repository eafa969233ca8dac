"""trace.json written from the compact timeline: the same events as the plain way, streamed,
optionally gzipped; per-rank tracks where a stage has several ranks; pipeline flow arrows."""
from __future__ import annotations

import gzip
import json
from collections import Counter

import pytest

from engine import simulate
from engine.pipeline import attach_compute, run_analytical
from formats.chrome_trace import STREAMS, read_chrome_trace, trace_dict, trace_json, write_chrome_trace
from workload_gen import build
from workload_gen.config_loading import configs_from_dict
from workload_gen.core.system import load_system


@pytest.fixture(scope="module")
def pipelined():
    model, par = configs_from_dict({"model": "gpt3-125m", "parallel": {
        "tp": 2, "pp": 2, "world_size": 8, "global_batch": 32, "seq_length": 512, "sp": True}})
    return run_analytical(model, par, "h100")  # 16 micro-batches: the default trace leaves 8 out


def _x_events_the_plain_way(result, keep):
    out = []
    for iv in result.intervals:
        if keep is not None and not keep(iv.microbatch):
            continue
        ts = round(iv.start * 1e6, 3)
        out.append({"ph": "X", "pid": iv.stage, "tid": STREAMS.index(iv.stream), "name": iv.name,
                    "cat": iv.category, "ts": ts, "dur": round(round(iv.end * 1e6, 3) - ts, 3),
                    "args": {"layer": iv.layer, "phase": iv.phase, "microbatch": iv.microbatch, "chunk": iv.chunk,
                             "bytes": int(iv.bytes), "exposed_s": float(iv.exposed_s), "rank": iv.rank}})
    return out


@pytest.mark.parametrize("shown", [8, None])
def test_stamped_events_equal_the_plain_formatting(pipelined, shown):
    doc = json.loads(trace_json(pipelined, shown))
    keep = None if shown is None else (lambda mb: mb < 4 or mb >= 12)
    x = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    assert x == _x_events_the_plain_way(pipelined, keep)
    assert doc == json.loads(json.dumps(trace_dict(pipelined, shown)))


def test_pipeline_flow_arrows_join_sender_and_receiver(pipelined):
    doc = json.loads(trace_json(pipelined, None))
    starts = {e["id"]: e for e in doc["traceEvents"] if e["ph"] == "s"}
    ends = {e["id"]: e for e in doc["traceEvents"] if e["ph"] == "f"}
    sends = [e for e in doc["traceEvents"] if e["ph"] == "X" and e["tid"] == STREAMS.index("pp")]
    assert sends and set(starts) == set(ends) and len(starts) == len(sends)
    for i, s in starts.items():
        f = ends[i]
        assert f["pid"] != s["pid"] and f["ts"] >= s["ts"] and f["tid"] == STREAMS.index("compute")
        assert f["bp"] == "e"


def test_gzip_trace_streams_the_same_text(pipelined, tmp_path):
    write_chrome_trace(pipelined, tmp_path / "trace.json.gz", 8)
    write_chrome_trace(pipelined, tmp_path / "trace.json", 8)
    with gzip.open(tmp_path / "trace.json.gz", "rt") as fh:
        zipped = fh.read()
    assert zipped == (tmp_path / "trace.json").read_text() == trace_json(pipelined, 8)


def test_ranks_that_differ_get_their_own_tracks(tmp_path):
    """All ranks simulated (as packet backends do): each rank of a stage its own threads."""
    model, par = configs_from_dict({"model": "gpt3-125m", "parallel": {
        "tp": 2, "pp": 2, "world_size": 8, "global_batch": 4, "seq_length": 256, "sp": True}})
    system = load_system("h100")
    workload, _ = attach_compute(build(model, par), system.gpu, None)
    res = simulate(workload, system, "analytical", all_ranks=True)
    doc = json.loads(trace_json(res, None))
    x = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    tracks = {(e["pid"], e["tid"]): set() for e in x}
    for e in x:
        tracks[(e["pid"], e["tid"])].add(e["args"]["rank"])
    assert all(len(r) == 1 for r in tracks.values())  # one rank per track
    ranks_per_stage = Counter(pid for pid, _ in {(e["pid"], e["args"]["rank"]) for e in x})
    assert ranks_per_stage == {0: 4, 1: 4}
    names = {(e["pid"], e["tid"]): e["args"]["name"] for e in doc["traceEvents"]
             if e["ph"] == "M" and e["name"] == "thread_name"}
    assert all((e["pid"], e["tid"]) in names for e in x)
    path = tmp_path / "trace.json"
    path.write_text(json.dumps(doc))
    back = read_chrome_trace(path)
    assert [(iv.stage, iv.rank, iv.stream, iv.name) for iv in back] == \
        [(iv.stage, iv.rank, iv.stream, iv.name) for iv in res.intervals]


def test_memory_counter_track_peaks_at_the_memory_estimate(pipelined):
    """Activations held from a chunk's forward to its backward on top of the static parts:
    the counter's peak is the stage's allocated peak of engine.memory."""
    doc = json.loads(trace_json(pipelined, None))
    counters = [e for e in doc["traceEvents"] if e["ph"] == "C"]
    assert {e["pid"] for e in counters} == {0, 1}
    for m in pipelined.memory:
        peak = max(e["args"]["GiB"] for e in counters if e["pid"] == m.stage)
        assert peak == pytest.approx(m.allocated_peak / 2**30, abs=2e-4)
    shown = json.loads(trace_json(pipelined, 8))
    assert 0 < sum(e["ph"] == "C" for e in shown["traceEvents"]) < len(counters)
