"""Measured kernel tables: reading, SimuMax conversion, and the B200 prior they give.

The figures checked here come from the table itself (SimuMax's B200 kernel benchmarks) or
from hand arithmetic, never from the estimator's own output.
"""
from __future__ import annotations

import json
import math
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from compute_profile.estimator import declared_parameters, load_params
from compute_profile.kernel_check import LONG_KERNEL_S, by_duration, check, p10_p90, sustained_prior, unit_params
from formats.kernel_table import COLUMNS, from_simumax_system, read_kernel_table, write_kernel_table
from workload_gen.core.errors import FormatError
from workload_gen.core.records import OpKind, Phase

ROOT = Path(__file__).resolve().parents[2]
B200_TABLE = ROOT / "compute_profile" / "data" / "kernels" / "b200_simumax_te2.11.csv"
PEAK = 2250e12  # B200 dense bf16, the "tflops" of SimuMax's file


def _system(tmp_path: Path, ops: dict) -> Path:
    p = tmp_path / "sys.json"
    p.write_text(json.dumps({"sys_name": "t", "accelerator": {"op": ops}}))
    return p


def test_simumax_efficiency_becomes_seconds_by_its_own_flop_count(tmp_path):
    ops = {
        "matmul": {"tflops": 2250.0, "accurate_efficient_factor": {
            "b=1, m=4096, k=8192, n=1024, layout=TN, accumulate=False, out_dtype=bf16": 0.5,
            "b=1, m=1024, k=4096, n=8192, layout=NT, accumulate=True, out_dtype=fp32": 0.25,
            "b=2, m=64, k=64, n=64, layout=TN, accumulate=False, out_dtype=bf16": 0.5}},
        "group_matmul": {"tflops": 2250.0, "accurate_efficient_factor": {
            "ng=4, M=100, N=300, K=200, dtype=bf16, stage=bwd_grad_w, main_grad_dtype=fp32": 0.1}},
        "sdp_fwd": {"tflops": 2250.0, "accurate_efficient_factor": {
            "batch=1, seq_len=1024, head_num=8, kv_head_num=2, qk_head_dim=128, v_head_dim=128, qkv_contiguous=True": 0.4,
            "batch=1, seq_len=1024, head_num=8, kv_head_num=2, qk_head_dim=128, v_head_dim=128, qkv_contiguous=False": 0.4}},
    }
    rows = from_simumax_system(_system(tmp_path, ops))
    assert len(rows) == 4  # the batched GEMM and the non-contiguous attention are left out
    fwd, wgrad, grouped, attn = rows
    assert (fwd["phase"], fwd["m"], fwd["n"], fwd["k"]) == ("fwd", 4096, 1024, 8192)
    assert fwd["time_s"] == pytest.approx(2 * 4096 * 1024 * 8192 / (0.5 * PEAK))
    # NT's C[m=1024 (out), n=8192 (in)] is dW^T: stored as the workload's dW[in, out]
    assert (wgrad["phase"], wgrad["m"], wgrad["n"], wgrad["k"], wgrad["grad_bytes"]) == ("bwd-weight", 8192, 1024, 4096, 4)
    assert wgrad["time_s"] == pytest.approx(2 * 1024 * 4096 * 8192 / (0.25 * PEAK))
    # grouped wgrad: dW[K, N] per expert, reduced over the M tokens
    assert (grouped["groups"], grouped["m"], grouped["n"], grouped["k"]) == (4, 200, 300, 100)
    assert grouped["time_s"] == pytest.approx(2 * 4 * 100 * 300 * 200 / (0.1 * PEAK))
    # SimuMax counts the whole score matrix: 2 * s^2 * heads * (d_qk + d_v)
    assert attn["time_s"] == pytest.approx(2 * 1024**2 * 8 * 256 / (0.4 * PEAK))


def test_a_written_table_reads_back_as_the_ops_the_workload_generator_builds(tmp_path):
    rows = [{"kind": "gemm", "phase": "bwd-weight", "m": 1024, "n": 512, "k": 4096, "grad_bytes": 4, "time_s": 1e-4},
            {"kind": "attention", "phase": "fwd", "batch": 1, "heads": 8, "kv_heads": 2, "seq": 1024, "d_qk": 128,
             "d_v": 128, "time_s": 2e-5}]
    path = tmp_path / "k.csv"
    write_kernel_table(rows, path)
    wgrad, attn = read_kernel_table(path)
    assert wgrad.op.kind is OpKind.GEMM and Phase(wgrad.op.phase) is Phase.BWD_WEIGHT
    assert wgrad.op.flops == 2 * 1024 * 512 * 4096
    # reads X and dY in bf16, reads and writes the fp32 main gradient
    assert wgrad.op.bytes == (4096 * 1024 + 4096 * 512) * 2 + 2 * 1024 * 512 * 4
    assert wgrad.time_s == pytest.approx(1e-4)
    # causal: half of 2 * s^2 * heads * (d_qk + d_v)
    assert attn.op.flops == 1024**2 * 8 * 256


@pytest.mark.parametrize("edit, words", [
    (lambda r: r.update(kind="conv"), "column 'kind' is 'conv'"),
    (lambda r: r.update(m="-3"), "column 'm' is -3"),
    (lambda r: r.update(time_s=float("nan")), "column 'time_s' is 'nan'"),
    (lambda r: r.update(phase="bwd-weight", grad_bytes=""), "column 'grad_bytes' is ''"),
])
def test_a_bad_row_names_its_line_column_and_value(tmp_path, edit, words):
    good = {"kind": "gemm", "phase": "fwd", "m": 64, "n": 64, "k": 64, "time_s": 1e-6}
    bad = dict(good)
    edit(bad)
    path = tmp_path / "k.csv"
    write_kernel_table([good, bad], path)
    with pytest.raises(FormatError) as e:
        read_kernel_table(path)
    assert f"{path}:3: {words}" in str(e.value)


def test_the_b200_table_holds_simumax_s_measured_shapes():
    kernels = read_kernel_table(B200_TABLE)
    kinds = {k.op.kind for k in kernels}
    assert kinds == {OpKind.GEMM, OpKind.GROUPED_GEMM, OpKind.ATTENTION}
    assert len(kernels) == 660
    # Llama-3 70B's fc1 forward at TP 1 (4096 tokens, 8192 -> 2 x 28672): SimuMax measured
    # 0.4867 of 2250 TFLOP/s, i.e. 2 * 4096 * 57344 * 8192 / (0.4867 * 2250e12) = 3.514 ms
    fc1 = [k for k in kernels if k.op.kind is OpKind.GEMM and Phase(k.op.phase) is Phase.FWD
           and k.op.shape == (4096, 57344, 8192)]
    assert len(fc1) == 1 and fc1[0].time_s == pytest.approx(3.514e-3, rel=1e-3)


def test_long_b200_gemms_give_the_declared_tensor_throughput_prior():
    """The prior in estimator_params.yaml is what the kernel table says, not a tuned number."""
    prior = sustained_prior(read_kernel_table(B200_TABLE), "b200")
    declared = {d.path: d for d in declared_parameters()}["gpus.b200.tensor_throughput"]
    assert prior.kernels == 163
    assert declared.prior == pytest.approx(prior.value, abs=0.0015)
    assert declared.sigma == pytest.approx(prior.sigma, abs=0.0015)


def test_one_long_gemm_s_ratio_by_hand():
    """Llama-3 70B's fc1 forward at TP 1 (4096 x 57344 x 8192), at B200's published caps:
    256x128 tiles, 16 x 448 = 7168 of them over 148 SMs in 49 waves (utilisation
    7168 / 7252); K-loop factor 8192 / (8192 + 128); GEMM cap 0.70: efficiency 0.68125,
    2.5106 ms plus one 4 us launch = 2.5146 ms, against SimuMax's 3.514 ms: 0.7156 of
    the measured rate, one of the 163 ratios whose median is the prior."""
    eff = 0.70 * (7168 / (49 * 148)) * (8192 / 8320)
    expected = (2 * 4096 * 57344 * 8192 / (2250e12 * eff) + 4e-6) / 3.514e-3
    assert expected == pytest.approx(0.7156, abs=1e-4)
    fc1 = [c for c in check(read_kernel_table(B200_TABLE), "b200", unit_params("b200"))
           if c.kernel.op.shape == (4096, 57344, 8192) and Phase(c.kernel.op.phase) is Phase.FWD]
    assert len(fc1) == 1 and fc1[0].ratio == pytest.approx(expected, rel=1e-4)


def test_b200_gemms_benchmarked_alone_run_faster_the_shorter_they_are():
    """Boost clock for short kernels, the power-limited clock for long ones: at the published
    caps, the measured fraction of the model's rate falls with kernel time."""
    checks = check(read_kernel_table(B200_TABLE), "b200", unit_params("b200"))
    medians = [statistics.median(rs) for _, _, rs in by_duration(checks)]
    assert medians[0] > 0.95 and medians[-1] < 0.75  # under 50 us at the caps; over 2 ms at 0.70
    assert medians[0] - medians[-1] > 0.25


def test_the_fitted_b200_throughput_agrees_with_the_kernel_level_figure():
    """Fitted on 12 step times, checked against 163 long kernels it never saw: the shipped
    calibration times SimuMax's long B200 GEMMs within 5% (median)."""
    checks = check(read_kernel_table(B200_TABLE), "b200", load_params("b200"))
    long_ratios = [c.ratio for c in checks if c.kernel.op.kind is OpKind.GEMM and c.kernel.time_s >= LONG_KERNEL_S]
    assert abs(statistics.median(long_ratios) - 1) < 0.05


def test_percentile_interpolates_like_the_textbook():
    # linear interpolation between order statistics: 10th of 1..5 at 1 + 0.1 x 4
    assert p10_p90([1.0, 2.0, 3.0, 4.0, 5.0])[0] == pytest.approx(1.4)
    assert p10_p90([3.0])[1] == 3.0


def test_check_script_prints_the_prior_and_draws(tmp_path):
    png = tmp_path / "k.png"
    out = subprocess.run([sys.executable, str(ROOT / "scripts" / "kernel_table_check.py"), str(B200_TABLE),
                          "--gpu", "b200", "--plot", str(png)], capture_output=True, text=True, check=True).stdout
    assert "kernel-level tensor_throughput prior: 0.705 (sigma 0.030; median of 163 GEMMs" in out
    assert png.stat().st_size > 10_000


def test_import_script_converts_and_refuses_a_non_simumax_file(tmp_path):
    src = _system(tmp_path, {"matmul": {"tflops": 2250.0, "accurate_efficient_factor": {
        "b=1, m=128, k=128, n=128, layout=NN, accumulate=False, out_dtype=bf16": 0.1}}})
    out = tmp_path / "k.csv"
    script = str(ROOT / "scripts" / "import_simumax_kernels.py")
    r = subprocess.run([sys.executable, script, str(src), "--out", str(out)], capture_output=True, text=True, check=False)
    assert r.returncode == 0 and "wrote 1 kernels" in r.stdout
    assert out.read_text().splitlines()[0] == ",".join(COLUMNS)
    (k,) = read_kernel_table(out)
    assert Phase(k.op.phase) is Phase.BWD_INPUT and math.isclose(k.time_s, 2 * 128**3 / (0.1 * PEAK), rel_tol=1e-3)
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    r = subprocess.run([sys.executable, script, str(bad), "--out", str(out)], capture_output=True, text=True, check=False)
    assert r.returncode == 2 and "not a SimuMax system file" in r.stderr and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_many_small_experts_take_the_host_issue_time_per_expert():
    """Transformer Engine issues one cuBLAS GEMM per expert: in SimuMax's table, grouped
    GEMMs whose experts each have at most 4 GFLOP (under 4 us of GPU work at B200's
    sustained ~1.1 PFLOP/s) still take 8.6-11.3 us per expert, and the declared
    per-expert issue time is their median. (Weight gradients are left out: they are
    bound by the fp32 gradient traffic.)"""
    small = [k.time_s / k.op.shape[0] for k in read_kernel_table(B200_TABLE)
             if k.op.kind is OpKind.GROUPED_GEMM and Phase(k.op.phase) is not Phase.BWD_WEIGHT
             and k.op.flops / k.op.shape[0] <= 4e9]
    assert len(small) == 8
    assert 8.5e-6 < min(small) and max(small) < 11.5e-6
    assert load_params("b200").gemm.grouped_issue_s == pytest.approx(statistics.median(small), abs=0.3e-6)


def test_the_issue_floor_is_for_expert_gemms_only():
    from compute_profile.estimator import explain
    from workload_gen import costs
    from workload_gen.core.gpu_specs import get_gpu
    from workload_gen.core.records import ComputeOp
    b200, p = get_gpu("b200"), load_params("b200")
    # 256 experts of 8 tokens: almost no work, so 256 issues of 9 us = 2.3 ms
    shape, fb = (256, 8, 256, 256), costs.grouped_gemm(256, 8, 256, 256, 2, 2)
    experts = explain(ComputeOp("expert_fc1", 0, Phase.FWD, OpKind.GROUPED_GEMM, shape, "bf16", *fb), b200, p)
    assert experts.time_s == pytest.approx(256 * p.gemm.grouped_issue_s + experts.launch_s)
    # the same shape as unfused attention's batched GEMM (one cuBLAS call): no floor
    batched = explain(ComputeOp("attn_scores", 0, Phase.FWD, OpKind.GROUPED_GEMM, shape, "bf16", *fb), b200, p)
    assert batched.issue_s == 0 and batched.time_s < experts.time_s / 5


@pytest.mark.parametrize("head_dim, phases", [(128, ("fwd",)), (128, ("bwd-input",)), (192, ("fwd", "bwd-input"))])
def test_b200_attention_caps_reproduce_the_long_attention_kernels(head_dim, phases):
    """At B200's throughput prior (what the long GEMMs say), the attention caps time the
    attention kernels SimuMax measured for at least 2 ms (32k-128k tokens; MLA's 192/128
    heads separately) as measured, median within 3%: attention and GEMMs share one
    sustained factor, and the caps carry what differs."""
    prior = {d.path: d for d in declared_parameters()}["gpus.b200.tensor_throughput"].prior
    params = load_params("b200", overrides=(("gpus.b200.tensor_throughput", prior),))
    ratios = [c.ratio for c in check(read_kernel_table(B200_TABLE), "b200", params)
              if c.kernel.op.kind is OpKind.ATTENTION and c.kernel.op.shape[4] == head_dim
              and Phase(c.kernel.op.phase).value in phases and c.kernel.time_s >= LONG_KERNEL_S]
    assert len(ratios) >= 3
    assert statistics.median(ratios) == pytest.approx(1.0, abs=0.03)


def _import(tmp_path, *extra):
    db = tmp_path / "b200.sqlite"
    r = subprocess.run([sys.executable, "-m", "engine.commands.compute_profile", "import-kernels", str(B200_TABLE), "--gpu", "b200",
                        "--profile", str(db), *extra], capture_output=True, text=True, check=False)
    return db, r


def test_import_kernels_keeps_one_gradient_width_and_one_row_per_key(tmp_path):
    from compute_profile.db import ProfileDB
    db, r = _import(tmp_path)
    assert r.returncode == 0, r.stderr
    # 660 kernels: 98 wgrads for bf16 gradients left out; 38 more share a profile key
    # with another row (fwd/dgrad measured once per gradient width, attention per KV-head
    # count) and become one row with their median: 660 - 98 - 38 = 524
    assert "524 new" in r.stderr and "left out 98 weight-gradient rows for 2-byte gradients" in r.stderr
    with ProfileDB(db, create=False) as d:
        rows = d.rows(gpu="b200")
        assert len(rows) == 524 and {row.source for row in rows} == {"imported"}
        # Llama-3 70B fc1 forward at TP 1: SimuMax measured 3.514 ms (efficiency 0.4867)
        fc1 = d.get("b200", "gemm", "4096x57344x8192", "bf16", "fwd")
        assert fc1.time_s == pytest.approx(3.514e-3, rel=1e-3)


def test_a_workload_runs_on_the_imported_kernel_times(tmp_path):
    """Llama-3 70B at TP 2 on B200: the QKV forward GEMM (4096 tokens, 8192 -> 5120) takes
    the time SimuMax measured, 2 * 4096 * 5120 * 8192 / (0.6275 * 2250e12) = 0.2433 ms."""
    from dataclasses import replace

    from compute_profile.attaching import attach
    from workload_gen.builder import build
    from workload_gen.core.model_presets import get_preset
    from workload_gen.core.parallel_config import ParallelConfig
    db, _ = _import(tmp_path)
    model = replace(get_preset("llama3-70b"), num_layers=12)
    par = ParallelConfig(world_size=8, tp=2, sp=True, global_batch=32, seq_length=4096, dtype="bf16",
                         distributed_optimizer=True)
    wl, cov = attach(build(model, par), "b200", db)
    qkv = next(op for op in wl.stages[0].chunks[0].forward if getattr(op, "name", "") == "qkv")
    assert qkv.shape == (4096, 5120, 8192)
    assert qkv.time_s == pytest.approx(2 * 4096 * 5120 * 8192 / (0.6275 * 2250e12), rel=1e-3)
    assert cov.imported > 0.85 * (cov.imported + cov.estimated)


def test_import_kernels_refuses_a_bad_table_in_one_line(tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("kind,phase\ngemm,fwd\n")
    r = subprocess.run([sys.executable, "-m", "engine.commands.compute_profile", "import-kernels", str(bad), "--gpu", "b200",
                        "--profile", str(tmp_path / "x.sqlite")], capture_output=True, text=True, check=False)
    assert r.returncode == 2 and "missing column(s)" in r.stderr and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "x.sqlite").exists()


def test_a_malformed_simumax_key_or_a_directory_output_is_one_line(tmp_path):
    script = str(ROOT / "scripts" / "import_simumax_kernels.py")
    src = _system(tmp_path, {"matmul": {"tflops": 2250.0, "accurate_efficient_factor": {
        "b=1, m=128, k=x, n=128, layout=NN": 0.1}}})
    r = subprocess.run([sys.executable, script, str(src), "--out", str(tmp_path / "k.csv")],
                       capture_output=True, text=True, check=False)
    assert r.returncode == 2 and "needs integer fields b, m, n, k" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and not (tmp_path / "k.csv").exists()
    good = _system(tmp_path, {"matmul": {"tflops": 2250.0, "accurate_efficient_factor": {
        "b=1, m=128, k=128, n=128, layout=NN": 0.1}}})
    r = subprocess.run([sys.executable, script, str(good), "--out", str(tmp_path)],
                       capture_output=True, text=True, check=False)
    assert r.returncode == 2 and "is a directory, not a file" in r.stderr and "Traceback" not in r.stderr
