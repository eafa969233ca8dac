"""trace.json round trip and summary/layers files on a hand-built run (no engine needed)."""
from __future__ import annotations

import csv
import json

import pytest

from formats.chrome_trace import STREAMS, read_chrome_trace, write_chrome_trace
from engine.accounting import layer_rows
from formats.run_outputs import layers_csv, summary_dict
from workload_gen.core.metrics import hardware_flops_per_iteration
from workload_gen.core.model_config import ModelConfig
from workload_gen.core.parallel_config import ParallelConfig
from workload_gen.core.records import (
    ChunkProgram,
    CollectiveOp,
    CollKind,
    ComputeOp,
    Group,
    OpKind,
    Phase,
    StageProgram,
    Workload,
)
from workload_gen.core.run_result import Breakdown, Interval, MemoryEstimate, RunResult
from workload_gen.core.system import get_system


def tiny_run() -> RunResult:
    model = ModelConfig(name="tiny", num_layers=2, hidden_size=64, num_attention_heads=4, vocab_size=128)
    par = ParallelConfig(world_size=8, tp=2, pp=2, global_batch=4, micro_batch=1)  # dp 2, 2 micro-batches
    stages = []
    for s in range(2):
        fwd = (ComputeOp("fc1", s, Phase.FWD, OpKind.GEMM, (8, 8, 8), "bf16", 1e9, 0, 1e-3),
               CollectiveOp("tp_ar", s, Phase.FWD, CollKind.ALL_REDUCE, Group.TP, 2, 4096))
        bwd = (ComputeOp("fc1", s, Phase.RECOMPUTE, OpKind.GEMM, (8, 8, 8), "bf16", 1e9, 0, 1e-3),
               ComputeOp("fc1_dgrad", s, Phase.BWD_INPUT, OpKind.GEMM, (8, 8, 8), "bf16", 1e9, 0, 1e-3),
               ComputeOp("fc1_wgrad", s, Phase.BWD_WEIGHT, OpKind.GEMM, (8, 8, 8), "bf16", 1e9, 0, 1e-3))
        stages.append(StageProgram(s, (ChunkProgram(s, 0, (s,), fwd, bwd),), (), 100, 100))
    wl = Workload(model, par, tuple(stages), 200, gpu="h100-sxm")
    ivs = (
        Interval(0, 0, "compute", "fc1", 0, "fwd", 0, 0, 0.0, 1e-3, "gemm"),
        Interval(0, 0, "tp", "tp_ar", 0, "fwd", 0, 0, 1e-3, 1.25e-3, "tp", 4096, 0.25e-3),
        Interval(1, 4, "compute", "fc1", 1, "fwd", 0, 0, 1.3e-3, 2.3e-3, "gemm"),
        Interval(1, 4, "pp", "send", 1, "fwd", 0, 0, 2.3e-3, 2.31e-3, "pp", 1234, 0.0),
        Interval(0, 0, "dp", "grad_rs", -1, "iter", -1, -1, 5.0e-3, 6.123456789e-3, "dp", 10**9, 1e-3),
    )
    bd = Breakdown(compute_s=4e-3, exposed_comm_s={"tp": 0.5e-3, "dp": 1e-3}, bubble_s=0.5e-3, optimizer_s=1e-4)
    mem = tuple(MemoryEstimate(s, 10, 20, 30, 40, 5) for s in range(2))
    return RunResult(wl, get_system("h100"), "analytical", 6.1e-3, bd, (bd, bd), mem, ivs,
                     extras={"compute_coverage": {"measured": 0.5, "scaled": 0.25, "estimated": 0.25}})


def test_trace_round_trip_and_schema(tmp_path):
    run = tiny_run()
    path = tmp_path / "trace.json"
    write_chrome_trace(run, path)
    data = json.loads(path.read_text())
    assert data["otherData"]["iteration_time_s"] == run.iteration_time_s
    assert data["otherData"]["backend"] == "analytical"
    assert "microseconds" in data["otherData"]["units"]
    procs = [e for e in data["traceEvents"] if e["ph"] == "M" and e["name"] == "process_name"]
    assert [p["args"]["name"] for p in procs] == ["stage 0 (rank 0)", "stage 1 (rank 4)"]
    threads = {(e["pid"], e["args"]["name"]): e["tid"] for e in data["traceEvents"] if e.get("name") == "thread_name"}
    assert threads[(0, "dp")] == STREAMS.index("dp") and threads[(1, "pp")] == STREAMS.index("pp")
    x = [e for e in data["traceEvents"] if e["ph"] == "X"]
    assert x[1]["ts"] == 1000.0 and x[1]["dur"] == 250.0  # microseconds
    back = read_chrome_trace(path)
    assert len(back) == len(run.intervals)
    for a, b in zip(run.intervals, back):
        assert (a.stage, a.rank, a.stream, a.name, a.layer, a.phase, a.microbatch, a.chunk, a.category, a.bytes) == \
               (b.stage, b.rank, b.stream, b.name, b.layer, b.phase, b.microbatch, b.chunk, b.category, b.bytes)
        assert b.start == pytest.approx(a.start, abs=1e-9) and b.end == pytest.approx(a.end, abs=1e-9)
        assert b.exposed_s == a.exposed_s


def test_summary_figures_follow_their_definitions():
    run = tiny_run()
    s = summary_dict(run)
    # hardware FLOPs: every compute op incl. recompute = 4e9 per micro-batch per rank,
    # 2 stages x 4 ranks each x 2 micro-batches
    assert hardware_flops_per_iteration(run.workload) == pytest.approx(4e9 * 2 * 4 * 2)
    assert s["hardware_tflops_per_gpu"] == pytest.approx(64e9 / (6.1e-3 * 8) / 1e12)
    # model FLOPs: Megatron's 72*B*s*l*h^2*(1 + s/(6h) + V/(12*l*h)) for this GPT
    B, sq, l_, h, V = 4, 2048, 2, 64, 128
    megatron = 72 * B * sq * l_ * h**2 * (1 + sq / (6 * h) + V / (12 * l_ * h))
    assert s["model_flops_per_iteration"] == pytest.approx(megatron, rel=1e-12)
    assert s["tflops_per_gpu"] == pytest.approx(megatron / (6.1e-3 * 8) / 1e12)
    assert s["mfu"] == pytest.approx(megatron / (6.1e-3 * 8) / 989.4e12)
    assert s["tokens_per_s"] == pytest.approx(4 * 2048 / 6.1e-3)
    assert s["breakdown_s"]["exposed_tp"] == 0.5e-3 and s["breakdown_s"]["exposed_cp"] == 0.0
    assert s["peak_memory_bytes"] == [105, 105]
    assert s["reserved_memory_bytes"] == [int(105 * 1.06)] * 2
    assert s["compute_coverage"]["measured"] == 0.5
    assert s["config"]["parallel"]["tp"] == 2 and s["config"]["system"]["name"] == "h100"
    assert s["units"]["time"] == "s"
    json.dumps(s)  # serialisable


def test_layers_csv_sums_the_timeline(tmp_path):
    run = tiny_run()
    path = tmp_path / "layers.csv"
    path.write_text(layers_csv(layer_rows(run)))
    rows = list(csv.DictReader(path.open()))
    assert list(rows[0])[:8] == ["stage", "layer", "phase", "microbatches", "compute_s", "comm_s", "exposed_comm_s",
                                 "comm_bytes"]
    r = {(x["stage"], x["layer"], x["phase"]): x for x in rows}
    assert float(r[("0", "0", "fwd")]["compute_s"]) == pytest.approx(1e-3)
    assert float(r[("0", "0", "fwd")]["exposed_comm_s"]) == pytest.approx(0.25e-3)
    assert float(r[("0", "-1", "iter")]["comm_s"]) == pytest.approx(1.123456789e-3, rel=1e-8)
    assert int(r[("1", "1", "fwd")]["comm_bytes"]) == 1234


def test_fast_trace_text_equals_the_dict_form():
    from formats.chrome_trace import trace_dict, trace_json

    run = tiny_run()
    assert json.loads(trace_json(run)) == json.loads(json.dumps(trace_dict(run)))


def test_trace_shows_warmup_and_cooldown_microbatches_by_default():
    """At many micro-batches trace.json keeps the first and last 4 (the steady state
    between them repeats) and says which it left out; all on request."""
    import json
    from dataclasses import replace as _replace

    from engine.pipeline import run_analytical
    from formats.chrome_trace import shown_intervals, trace_json
    from workload_gen.core.model_presets import get_preset
    from workload_gen.core.parallel_config import ParallelConfig

    m = _replace(get_preset("gpt3-125m"), num_layers=4)
    par = ParallelConfig(world_size=4, pp=2, global_batch=32, micro_batch=1, seq_length=256)
    res = run_analytical(m, par, "h100")
    assert par.num_microbatches == 16
    shown, omitted = shown_intervals(res, 8)
    assert omitted == (4, 11)
    assert {iv.microbatch for iv in shown} == {-1, 0, 1, 2, 3, 12, 13, 14, 15}
    doc = json.loads(trace_json(res, 8))
    assert doc["otherData"]["omitted_microbatches"] == [4, 11]
    full = json.loads(trace_json(res, None))
    assert "omitted_microbatches" not in full["otherData"]
    assert len(full["traceEvents"]) > len(doc["traceEvents"])
    assert sum(1 for e in full["traceEvents"] if e["ph"] == "X") == len(res.intervals)
