"""End to end on real torch, on the CPU: train, profile, calibrate, simulate, diff.

1. A small GPT (scripts/make_cpu_trace.py: 2 layers, hidden 256, 4 heads, seq 128, vocab
   1024, batch 2, fp32, Adam) trains 6 steps under torch.profiler (a fresh trace, so the
   test checks this machine, now).
2. The odd steps become profile rows (compute_profile.trace_import, what
   ``compute-profile import-trace`` runs): the compute profile measured on the same CPU.
3. ``run-analytical`` builds the workload for the same config, attaches those times,
   simulates one iteration on a 1-rank "cpu" system (tests/data/cpu1_system.yaml) and
   writes its run directory.
4. ``diff-trace`` compares it with the median even step of the run.

Bound on the step-time error: 35%. What the prediction does not contain: Python and
autograd-engine overhead between ops (the measured trace's idle time, ~5-8% of a step
here) and unclassified small ops (views, copies: <1%). What varies between the two runs:
CPU timing on a shared 2-core runner: step times of the same script ranged from 63 to
87 ms across quiet runs, and 2-3x that while other test suites ran beside it; taking
calibration and measurement from alternate steps of one run keeps them under the same
load, leaving step-to-step jitter (±15% observed); an attempt disturbed beyond that is
repeated (ATTEMPTS). 35% covers both with margin while still catching a modelling error of the
size that matters (a missing backward pass alone is ~60% of the step, a missing
optimizer ~15%, a layer ~30%).
"""
from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from bench_scripts import script

from compute_profile import attach
from compute_profile.db import ProfileDB
from compute_profile.trace_import import rows_from_trace
from engine.commands.run import analytical_main
from engine.commands.diff import diff_trace_main
from formats.kineto import read_kineto
from workload_gen import build
from workload_gen.core.model_config import ModelConfig
from workload_gen.core.parallel_config import ParallelConfig
from workload_gen.core.records import ComputeOp, TimeSource

ROOT = Path(__file__).resolve().parents[2]
BOUND = 0.35
ATTEMPTS = 3
"""A wall-clock comparison on a shared machine: another process taking the CPU during the
run stretches every step (we saw 2-3x while other suites ran beside it). Such an attempt
is repeated, up to 3 times; a modelling error (a missing pass, layer or optimizer) fails
every attempt the same way."""


def _estimated_ops(spec, db_path: Path) -> set[tuple[str, str]]:
    """(op name, phase) of every compute op whose time did not come from the profile."""
    model = ModelConfig(num_layers=spec.layers, hidden_size=spec.hidden, num_attention_heads=spec.heads,
                        vocab_size=spec.vocab, max_position_embeddings=spec.seq)
    par = ParallelConfig(world_size=1, micro_batch=spec.batch, global_batch=spec.batch,
                         seq_length=spec.seq, dtype="fp32", clip_grad=0.0)
    timed, _ = attach(build(model, par), "cpu", db_path)
    out = set()
    for st in timed.stages:
        placed = [("fwd", op) for ch in st.chunks for op in ch.forward] + \
                 [("bwd", op) for ch in st.chunks for op in ch.backward] + [("iter", op) for op in st.iteration]
        for phase, op in placed:
            if isinstance(op, ComputeOp) and op.source != TimeSource.IMPORTED:
                out.add((op.name, phase))
    return out


def _attempt(mct, tmp_path: Path) -> tuple[int, dict, Path]:
    """Train, calibrate, simulate, diff once; returns (diff-trace exit code, diff.json, output dir)."""
    spec = replace(mct.GptSpec(), steps=6)
    trace = tmp_path / "real.json.gz"
    mct.profile_training(spec, trace)
    # Calibrate on the odd steps, measure an even one (the median): both halves see the same
    # machine load, yet no measured op is its own calibration sample.
    calib_steps, measured_steps = [1, 3, 5], [2, 4, 6]
    db_path = tmp_path / "cpu.sqlite"
    with ProfileDB(db_path) as db:
        db.put(rows_from_trace(trace, "cpu", steps=calib_steps))
        assert len(db) >= 25
    rank = read_kineto(trace).ranks[0]
    step = sorted((s.dur, s.number) for s in rank.steps if s.number in measured_steps)[1][1]

    run_dir = tmp_path / "run"
    assert analytical_main([
        "--num-layers", str(spec.layers), "--hidden-size", str(spec.hidden), "--num-attention-heads", str(spec.heads),
        "--vocab-size", str(spec.vocab), "--max-position-embeddings", str(spec.seq), "--seq-length", str(spec.seq),
        "--micro-batch", str(spec.batch), "--global-batch", str(spec.batch), "--world-size", "1", "--dtype", "fp32",
        "--clip-grad", "0",  # the torch loop does not clip: Megatron then computes no gradient norm
        "--system", str(ROOT / "tests" / "data" / "cpu1_system.yaml"), "--profile", str(db_path), "--gpu", "cpu",
        "--out", str(run_dir), "--no-plot"]) == 0
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["compute_coverage"]["imported_s"] > 0
    # Every op the torch loop runs is matched by an imported measurement; the estimated rest
    # is exactly the Megatron-only work the loop lacks, the bias-gradient kernels of the
    # skip_bias_add linears included (torch's nn.Linear's bias gradient is part of its
    # addmm backward). (Checked by name, not by share of seconds: the estimate is a fixed roofline
    # figure while the imported seconds follow the runner's speed, so a share threshold
    # fails on a fast machine.)
    assert _estimated_ops(spec, db_path) == {("embedding_dropout", "fwd"), ("embedding_dropout", "bwd"),
                                             ("zero_grad", "iter"),
                                             ("step_overhead", "iter"), ("proj.dbias", "bwd"),
                                             ("fc1.dbias", "bwd"), ("fc2.dbias", "bwd")}
    out = tmp_path / "diff"
    code = diff_trace_main([str(run_dir), str(trace), "--step", str(step), "--out", str(out),
                            "--fail-above", str(BOUND * 100)])
    return code, json.loads((out / "diff.json").read_text()), out


@pytest.mark.slow
def test_cpu_gpt_predicted_step_matches_measured(tmp_path):
    mct = script("make_cpu_trace")
    errors = []
    for i in range(ATTEMPTS):
        code, report, out = _attempt(mct, tmp_path / f"attempt{i}")
        errors.append(report["iteration"]["error"])
        if code == 0:
            break
    assert code == 0, f"step-time error beyond {BOUND:.0%} in every attempt: {', '.join(f'{e:+.1%}' for e in errors)}"
    assert abs(errors[-1]) <= BOUND
    # Every kind of work the real run did is predicted.
    assert report["unmatched_categories"] == []
    measured = {r["key"] for r in report["categories"] if r["measured_s"] > 0 and r["key"].startswith("compute:")}
    assert measured == {f"compute:{k}" for k in
                        ("gemm", "attention", "norm", "elementwise", "embedding", "loss", "optimizer")}
    # Both sides put work on the same layers (embedding -1, layers 0..1, head 2).
    assert {(r["layer"], r["phase"]) for r in report["layers"] if r["measured_s"] > 0} == \
           {(lay, ph) for lay in (-1, 0, 1, 2) for ph in ("fwd", "bwd")}
    assert (out / "timeline.png").stat().st_size > 1000
