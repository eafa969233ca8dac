"""End to end on real torch, on the CPU: train, profile, calibrate, simulate, diff.

1. A small GPT (scripts/make_cpu_trace.py: 2 layers, hidden 256, 4 heads, seq 128, vocab
   1024, batch 2, fp32, Adam) trains under torch.profiler twice: a calibration run and a
   separate measured run (fresh traces, so the test checks this machine, now).
2. The calibration trace becomes profile rows (compute_profile.trace_import), i.e. the
   compute profile measured on the same CPU.
3. trainsim builds the workload for the same config, attaches those times, simulates one
   iteration on a 1-rank "cpu" system (tests/data/cpu1_system.yaml) and writes trace.json.
4. diff-trace compares it with the measured run.

Bound on the step-time error: 35%. What the prediction does not contain: Python and
autograd-engine overhead between ops (the measured trace's idle time, ~5-8% of a step
here) and unclassified small ops (views, copies: <1%). What varies between the two runs:
CPU timing on a shared 2-core runner; we observed profiled step times from 63 to 87 ms
across runs of the same script (±15%), and the calibration and measured runs are
separate. 35% covers both with margin while still catching a modelling error of the
size that matters (a missing backward pass alone is ~60% of the step, a missing
optimizer ~15%, a layer ~30%).
"""
from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

from compute_profile.db import ProfileDB
from compute_profile.trace_import import rows_from_trace
from engine.pipeline import run_workload
from formats.chrome_trace import write_chrome_trace
from formats.diff_cli import diff_trace_main
from network.system import load_system
from workload_gen.builder import build
from workload_gen.model_config import ModelConfig
from workload_gen.parallel_config import ParallelConfig

ROOT = Path(__file__).resolve().parents[2]
BOUND = 0.35


def _make_cpu_trace():
    spec = importlib.util.spec_from_file_location("make_cpu_trace", ROOT / "scripts" / "make_cpu_trace.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up by name
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.slow
def test_cpu_gpt_predicted_step_matches_measured(tmp_path):
    mct = _make_cpu_trace()
    spec = mct.GptSpec()
    calib, real = tmp_path / "calib.json.gz", tmp_path / "real.json.gz"
    mct.profile_training(spec, calib)
    mct.profile_training(spec, real)

    rows = rows_from_trace(calib, "cpu")
    db_path = tmp_path / "cpu.sqlite"
    with ProfileDB(db_path) as db:
        db.put(rows)

    model = ModelConfig(num_layers=spec.layers, hidden_size=spec.hidden, num_attention_heads=spec.heads,
                        vocab_size=spec.vocab, max_position_embeddings=spec.seq)
    par = ParallelConfig(world_size=1, micro_batch=spec.batch, global_batch=spec.batch, seq_length=spec.seq,
                         dtype="fp32")
    result = run_workload(build(model, par), load_system(str(ROOT / "tests" / "data" / "cpu1_system.yaml")),
                          profile=db_path, gpu="cpu")
    cov = result.extras["compute_coverage"]
    # Nearly all predicted compute time comes from the imported measurements; the rest
    # (the embedding dropout the torch model does not have) is estimated.
    assert cov.imported_s / cov.total_s > 0.95
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    write_chrome_trace(result, run_dir / "trace.json")

    out = tmp_path / "diff"
    code = diff_trace_main([str(run_dir), str(real), "--out", str(out), "--fail-above", str(BOUND * 100)])
    report = json.loads((out / "diff.json").read_text())
    err = report["iteration"]["error"]
    assert code == 0, f"step-time error {err:+.1%} exceeds {BOUND:.0%}"
    assert abs(err) <= BOUND
    # Every kind of work the real run did is predicted.
    assert report["unmatched_categories"] == []
    measured = {r["key"] for r in report["categories"] if r["measured_s"] > 0 and r["key"].startswith("compute:")}
    assert measured == {f"compute:{k}" for k in
                        ("gemm", "attention", "norm", "elementwise", "embedding", "loss", "optimizer")}
    # Both sides put work on the same layers (embedding -1, layers 0..1, head 2).
    assert {(r["layer"], r["phase"]) for r in report["layers"] if r["measured_s"] > 0} == \
           {(lay, ph) for lay in (-1, 0, 1, 2) for ph in ("fwd", "bwd")}
    assert (out / "timeline.png").stat().st_size > 1000
