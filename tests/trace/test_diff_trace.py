"""diff-trace on a constructed pair whose differences are known by hand.

Simulated (our trace.json, stage 0), ms: fwd gemm [0,1], fwd attention [1,1.5],
bwd-input gemm [2,3], bwd-weight gemm [3,4], tp all-reduce [4,5] (nothing overlaps it),
optimizer [5,6]; iteration 6 ms.
Measured (a GPU-style Kineto trace: CPU ops launch kernels via correlation ids), ms from the
step's first kernel: gemm [0,1.5], flash attention [1.5,2], two backward gemms [2,3] [3,4],
NCCL all-reduce on another stream [3.5,5.5] (0.5 ms under compute), Adam kernel [5.5,6.5];
iteration 6.5 ms.
"""
from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from kineto_sample import kineto_events

from engine.commands.diff import diff_trace_main
from formats.diff import diff_timelines
from formats.timeline import load_measured, load_simulated

MS = 1e3  # us per ms


def sim_trace(path: Path, with_attention: bool = True) -> Path:
    ev = [{"ph": "M", "name": "process_name", "pid": 0, "tid": 0, "args": {"name": "stage 0 (rank 0)"}},
          {"ph": "M", "name": "thread_name", "pid": 0, "tid": 0, "args": {"name": "compute"}},
          {"ph": "M", "name": "thread_name", "pid": 0, "tid": 1, "args": {"name": "tp"}}]

    def x(tid, name, cat, t0, t1, layer, phase):
        ev.append({"ph": "X", "pid": 0, "tid": tid, "name": name, "cat": cat, "ts": t0 * MS, "dur": (t1 - t0) * MS,
                   "args": {"layer": layer, "phase": phase, "microbatch": 0, "chunk": 0, "bytes": 0,
                            "exposed_s": 0.0, "rank": 0}})
    x(0, "qkv", "gemm", 0, 1, 0, "fwd")
    if with_attention:
        x(0, "core_attn", "attention", 1, 1.5, 0, "fwd")
    x(0, "qkv", "gemm", 2, 3, 0, "bwd-input")
    x(0, "qkv", "gemm", 3, 4, 0, "bwd-weight")
    x(1, "tp_allreduce", "tp", 4, 5, -1, "iter")
    x(0, "adam", "optimizer", 5, 6, -1, "iter")
    path.write_text(json.dumps({"traceEvents": ev, "otherData": {
        "producer": "trainsim", "iteration_time_s": 0.006, "parallel": {"tp": 2, "pp": 1, "cp": 1, "world_size": 2}}}))
    return path


def kineto_trace(path: Path, rank: int = 0) -> Path:
    data = kineto_events(rank)
    if path.name.endswith(".gz"):
        with gzip.open(path, "wt") as fh:
            json.dump(data, fh)
    else:
        path.write_text(json.dumps(data))
    return path


@pytest.fixture()
def pair(tmp_path):
    return sim_trace(tmp_path / "trace.json"), kineto_trace(tmp_path / "real.json.gz")


def test_gpu_trace_reader_attributes_kernels(pair):
    _, real = pair
    meas = load_measured(real)
    assert meas.device == "gpu"
    assert meas.iteration_s == pytest.approx(6.5e-3)
    cats = sorted((o.category, o.layer, o.phase) for o in meas.ops)
    assert cats == sorted([("gemm", 0, "fwd"), ("attention", 0, "fwd"), ("gemm", 0, "bwd-input"),
                           ("gemm", 0, "bwd-weight"), ("comm", None, "iter"), ("optimizer", None, "iter")])
    comm = [o for o in meas.ops if o.category == "comm"][0]
    assert (comm.coll, comm.group, comm.group_size, comm.bytes) == ("allreduce", "tp", 2, 2 * 1048576)
    gemm = [o for o in meas.ops if o.category == "gemm" and o.phase == "fwd"][0]
    assert gemm.cpu_op == "aten::linear" and gemm.input_dims[1] == (768, 256)


def test_diff_numbers(pair):
    sim, real = pair
    pred = load_simulated(sim)
    d = diff_timelines(pred, load_measured(real, parallel=pred.parallel))
    assert d.iteration.predicted_s == pytest.approx(6e-3) and d.iteration.measured_s == pytest.approx(6.5e-3)
    assert d.iteration_error == pytest.approx(-0.5 / 6.5)
    rows = {r.key: r for r in d.categories}
    expect = {  # (predicted ms, measured ms)
        "compute:gemm": (3.0, 3.5), "compute:attention": (0.5, 0.5), "compute:optimizer": (1.0, 1.0),
        "comm:tp": (1.0, 2.0), "comm:tp:allreduce": (1.0, 2.0),
        "exposed_comm": (1.0, 1.5),  # the measured all-reduce hides 0.5 ms under the last gemm
        "idle": (0.5, 0.0),          # predicted gap [1.5, 2] ms; the measured stream is never empty
    }
    for key, (p, m) in expect.items():
        assert rows[key].predicted_s == pytest.approx(p * 1e-3, abs=1e-9), key
        assert rows[key].measured_s == pytest.approx(m * 1e-3, abs=1e-9), key
    assert set(rows) == set(expect)
    assert d.unmatched_categories == ()
    layers = {(lay, ph): r for lay, ph, r in d.layers}
    assert layers[(0, "fwd")].predicted_s == pytest.approx(1.5e-3)
    assert layers[(0, "fwd")].measured_s == pytest.approx(2.0e-3)
    assert layers[(0, "bwd")].diff_s == pytest.approx(0.0, abs=1e-12)
    top = d.mismatches[0]
    assert top.kind == "comm:tp" and top.diff_s == pytest.approx(-1e-3)
    second = d.mismatches[1]
    assert (second.layer, second.phase, second.kind) == (0, "fwd", "gemm")
    assert second.diff_s == pytest.approx(-0.5e-3)
    assert {(m.phase, m.diff_s) for m in d.mismatches if m.kind == "gemm" and m.phase != "fwd"} == \
           {("bwd-input", 0.0), ("bwd-weight", 0.0)}


def test_gpu_trace_calibration_keys(pair):
    """GPU kernels become profile rows under the workload's GEMM keys (T=512, in=256, out=768)."""
    from compute_profile.trace_import import rows_from_trace

    _, real = pair
    rows = {(r.kind, r.shape_key, r.phase): r for r in rows_from_trace(real, "h200")}
    assert rows[("gemm", "512x768x256", "fwd")].time_s == pytest.approx(1.5e-3)
    assert rows[("gemm", "512x256x768", "bwd-input")].time_s == pytest.approx(1e-3)
    assert rows[("gemm", "256x768x512", "bwd-weight")].time_s == pytest.approx(1e-3)
    assert rows[("attention", "2x4x128x128x64x0", "fwd")].time_s == pytest.approx(0.5e-3)


def test_missing_category_is_reported(tmp_path):
    sim = sim_trace(tmp_path / "trace.json", with_attention=False)
    real = kineto_trace(tmp_path / "real.json")
    d = diff_timelines(load_simulated(sim), load_measured(real))
    assert d.unmatched_categories == ("compute:attention",)


def test_cli_writes_outputs_and_gates(pair, tmp_path, capsys):
    sim, real = pair
    out = tmp_path / "out"
    assert diff_trace_main([str(sim), str(real), "--out", str(out), "--fail-above", "10"]) == 0
    text = capsys.readouterr().out
    assert "iteration" in text and "-7.7%" in text
    for name in ("diff.json", "diff.csv", "diff_layers.csv", "diff_mismatches.csv", "timeline.png"):
        assert (out / name).stat().st_size > 0
    assert (out / "timeline.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    data = json.loads((out / "diff.json").read_text())
    assert data["iteration"]["error"] == pytest.approx(-0.5 / 6.5)
    assert diff_trace_main([str(sim), str(real), "--fail-above", "5"]) == 1
    # Run directory input, and a simulated-vs-simulated diff (e.g. ns-3 against analytical).
    assert diff_trace_main([str(sim.parent), str(sim)]) == 0
    assert "+0.0%" in capsys.readouterr().out


def test_cli_bad_input_is_one_line_exit_2(tmp_path, capsys):
    sim = sim_trace(tmp_path / "trace.json")
    (tmp_path / "junk.json").write_text("[1, 2")
    assert diff_trace_main([str(sim), str(tmp_path / "junk.json"), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    errors = [line for line in err if not line.startswith("reading ")]  # progress lines aside
    assert len(errors) == 1 and errors[0].startswith("error:") and "junk.json" in errors[0]
    assert "Traceback" not in "\n".join(err)
    assert not (tmp_path / "o").exists()
    assert diff_trace_main([str(tmp_path / "nope"), str(sim)]) == 2


def test_multi_rank_directory_and_rank_choice(tmp_path, capsys):
    sim = sim_trace(tmp_path / "trace.json")
    ranks = tmp_path / "ranks"
    ranks.mkdir()
    kineto_trace(ranks / "r0.json.gz", rank=0)
    kineto_trace(ranks / "r1.json", rank=1)
    assert diff_trace_main([str(sim), str(ranks), "--rank", "1", "--out", str(tmp_path / "o")]) == 0
    data = json.loads((tmp_path / "o" / "diff.json").read_text())
    assert data["measured"].endswith("r1.json")
    assert data["iteration"]["measured_s"] == pytest.approx(6.5e-3)
    assert diff_trace_main([str(sim), str(ranks), "--rank", "5"]) == 2
    assert "rank 5 not in trace" in capsys.readouterr().err
