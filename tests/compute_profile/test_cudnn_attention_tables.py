"""cuDNN frontend's SDPA training benchmark as kernel evidence for the Blackwell rack GPUs.

The published tables (NVIDIA/cudnn-frontend benchmark/sdpa_benchmark_training/results, cuDNN
9.22 on GB200 and GB300) become kernel tables with mask columns; the GB200/GB300 attention caps,
per-row overhead and MLA factor are what a least-squares fit to them gives. Figures checked
here come from the tables or from hand arithmetic (FLOP counts, the benchmark's own
milliseconds), not from the estimator's output.
"""
from __future__ import annotations

import math
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from compute_profile.estimator import explain, load_params
from compute_profile.kernel_check import attention_group, attention_medians, check, fit_attention
from formats.kernel_table import from_cudnn_frontend_sdpa, read_kernel_table, write_kernel_table
from workload_gen.core.errors import FormatError
from workload_gen.core.gpu_specs import get_gpu
from workload_gen.core.records import Phase, attention_mask

ROOT = Path(__file__).resolve().parents[2]
KERNELS = ROOT / "compute_profile" / "data" / "kernels"
TABLES = {"gb200": KERNELS / "gb200_cudnn9.22_sdpa.csv", "gb300": KERNELS / "gb300_cudnn9.22_sdpa.csv"}

HEADER = ("config_name,model_name,backend,data_type,attn_mask,batch_size,q_seqlen,kv_seqlen,num_q_heads,"
          "num_kv_heads,head_dim_qk,head_dim_vo,profile_pass,deterministic_bwd,time_ms,tflops,max_diff,"
          "num_iterations,sliding_window_size,success,error_message,gpu_name,cudnn_version,cudnn_backend_version")


def _row(backend="cudnn", dtype="bfloat16", mask="top_left", s=4096, pas="fwd", det="False", ms="0.5",
         window="", ok="True", err=""):
    return (f"x,x,{backend},{dtype},{mask},2,{s},{s},64,8,128,128,{pas},{det},{ms},1,0,10,{window},{ok},"
            f"{err},NVIDIA GB200,1.21.1,92200")


def test_one_decoder_reads_the_attention_shape_s_mask():
    """records.shape_doc: a five-entry attention shape is causal without a window; the sixth
    entry 0 is no mask; a seventh gives the window's keys."""
    assert attention_mask((1, 8, 4096, 4096, 128)) == (True, 0)
    assert attention_mask((1, 8, 4096, 4096, 128, 0)) == (False, 0)
    assert attention_mask((2, 128, 4096, 4096, 64, 1, 128)) == (True, 128)


def test_the_benchmark_csv_keeps_cudnn_bf16_kernels_that_ran(tmp_path):
    src = tmp_path / "r.csv"
    src.write_text("\n".join([
        HEADER,
        _row(ms="0.391"),                                   # kept: causal forward
        _row(pas="bwd", ms="1.198"),                        # kept: non-deterministic backward
        _row(pas="bwd", det="True", ms="1.5"),              # deterministic backward: not TE's default
        _row(dtype="fp8", ms="0.2"),                        # FP8 attention: not these recipes'
        _row(backend="flash_attention_4", ms="0.3"),        # another backend
        _row(mask="no_mask", ms="0.687"),                   # kept: no mask
        _row(window="128", ms="0.21"),                      # kept: sliding window of 128 keys
        _row(ok="False", ms="inf", err='"Benchmark failed\nwith a traceback"'),  # a failed run, quoted over lines
    ]) + "\n")
    rows = from_cudnn_frontend_sdpa(src)
    assert [(r["phase"], r["causal"], r["window"], r["time_s"]) for r in rows] == [
        ("fwd", 1, "", pytest.approx(0.391e-3)), ("bwd-input", 1, "", pytest.approx(1.198e-3)),
        ("fwd", 0, "", pytest.approx(0.687e-3)), ("fwd", 1, 128, pytest.approx(0.21e-3))]
    out = tmp_path / "k.csv"
    write_kernel_table(rows, out)
    causal, bwd, full, window = read_kernel_table(out)
    # FLOPs by hand: 2 * batch * heads * pairs * (d_qk + d_v); causal pairs s^2/2
    assert causal.op.flops == 2 * 2 * 64 * 4096**2 / 2 * 256
    assert bwd.op.flops == 2.5 * causal.op.flops
    assert full.op.flops == 2 * 2 * 64 * 4096**2 * 256
    # a window of 128 keys back: query i sees min(i + 1, 129) keys
    pairs = sum(min(i + 1, 129) for i in range(4096))
    assert window.op.flops == 2 * 2 * 64 * pairs * 256
    assert window.op.shape[6] == 128


def test_both_layouts_of_the_benchmark_read_alike(tmp_path):
    """Older runs write both passes on one row (fwd_time_ms, bwd_time_ms)."""
    src = tmp_path / "both.csv"
    src.write_text("backend,data_type,attn_mask,batch_size,q_seqlen,kv_seqlen,num_q_heads,num_kv_heads,head_dim_qk,"
                   "head_dim_vo,profile_pass,deterministic_bwd,fwd_time_ms,bwd_time_ms,sliding_window_size,success\n"
                   "cudnn,bfloat16,top_left,1,8192,8192,64,8,128,128,both,False,1.708,5.083,,True\n")
    fwd, bwd = from_cudnn_frontend_sdpa(src)
    assert (fwd["phase"], fwd["time_s"]) == ("fwd", pytest.approx(1.708e-3))
    assert (bwd["phase"], bwd["time_s"]) == ("bwd-input", pytest.approx(5.083e-3))


@pytest.mark.parametrize("edit, words", [
    ({"causal": "2"}, "column 'causal' is '2'"),
    ({"window": "-4"}, "column 'window' is -4"),
    ({"causal": "0", "window": "128"}, "column 'window' is 128 with causal 0"),
])
def test_a_bad_mask_names_its_line_column_and_value(tmp_path, edit, words):
    good = {"kind": "attention", "phase": "fwd", "batch": 1, "heads": 8, "kv_heads": 2, "seq": 1024, "d_qk": 128,
            "d_v": 128, "time_s": 2e-5, "causal": 1, "window": ""}
    path = tmp_path / "k.csv"
    write_kernel_table([good, {**good, **edit}], path)
    with pytest.raises(FormatError) as e:
        read_kernel_table(path)
    assert f"{path}:3: {words}" in str(e.value)


def test_the_shipped_tables_hold_the_published_kernels():
    gb200 = read_kernel_table(TABLES["gb200"])
    assert len(gb200) == 50
    groups = {attention_group(k.op) for k in gb200}
    assert groups == {f"{p} d{d} {m}" for p in ("fwd", "bwd-input") for d in (128, 192) for m in ("causal", "no-mask")} | {
        "fwd d64 window", "bwd-input d64 window"}
    # Llama 3.1 405B per TP 2 shard, 8k tokens, causal forward on GB200: 1.397 ms, which the
    # benchmark itself reports as 1574 TFLOP/s: 2 * 2 * 64 * 8192^2 / 2 * 256 / 1.397 ms
    k = next(k for k in gb200 if k.op.shape == (2, 64, 8192, 8192, 128, 1) and k.op.phase is Phase.FWD)
    assert k.time_s == pytest.approx(1.397e-3, rel=1e-3)
    assert k.op.flops / k.time_s / 1e12 == pytest.approx(1574, rel=0.002)


def test_the_fitter_recovers_the_caps_and_overhead_a_table_was_made_with(tmp_path):
    """A table timed by the estimator itself at known caps and overhead is fitted back to them."""
    spec = get_gpu("gb200")
    p0 = load_params("gb200")
    truth = replace(p0, attention=replace(p0.attention, fwd_max_efficiency=0.8, bwd_max_efficiency=0.6,
                                          seq_overhead=400.0))
    kernels = read_kernel_table(TABLES["gb200"])
    synthetic = [replace(k, time_s=explain(k.op, spec, truth).time_s) for k in kernels]
    fit = fit_attention(synthetic, "gb200")
    assert fit.seq_overhead == 400
    assert fit.fwd_max_efficiency == pytest.approx(0.8, rel=0.01)
    assert fit.bwd_max_efficiency == pytest.approx(0.6, rel=0.01)
    assert fit.rms_log < 0.01
    assert fit.mla_factor == pytest.approx(dict(zip(p0.attention.head_dims, p0.attention.head_dim_factors))[192],
                                           rel=0.01)


@pytest.mark.parametrize("gpu", ["gb200", "gb300"])
def test_the_declared_attention_parameters_are_the_tables_fit(gpu):
    fit = fit_attention(read_kernel_table(TABLES[gpu]), gpu)
    a = load_params(gpu).attention
    assert a.seq_overhead == fit.seq_overhead == 550
    assert a.fwd_max_efficiency == pytest.approx(fit.fwd_max_efficiency, abs=0.002)
    assert a.bwd_max_efficiency == pytest.approx(fit.bwd_max_efficiency, abs=0.002)
    assert dict(zip(a.head_dims, a.head_dim_factors))[192] == pytest.approx(fit.mla_factor, abs=0.002)
    # the fit leaves the 25 kernels within 5% rms; the forward sliding-window kernels it
    # does not fit stay 1.4-1.6x slower than the model
    assert fit.kernels == 25 and fit.rms_log < 0.06
    assert 0.55 < fit.window_fwd_ratio < 0.75


def test_b300_takes_gb300_s_attention():
    """The same Blackwell Ultra silicon; B300 has no table of its own."""
    assert load_params("b300").attention == load_params("gb300").attention


def test_at_the_shipped_parameters_the_tables_kernels_come_out_as_measured():
    for gpu, table in TABLES.items():
        med = attention_medians(check(read_kernel_table(table), gpu))
        for group in ("fwd d128 causal", "bwd-input d128 causal", "fwd d128 no-mask", "bwd-input d128 no-mask",
                      "bwd-input d64 window"):
            assert abs(math.log(med[group][0])) < 0.06, (gpu, group, med[group])


def test_the_check_and_import_scripts_on_attention_tables(tmp_path):
    out = subprocess.run([sys.executable, str(ROOT / "scripts" / "kernel_table_check.py"), str(TABLES["gb300"]),
                          "--gpu", "gb300"], capture_output=True, text=True, check=True).stdout
    assert "fwd d64 window" in out and "tensor_throughput prior" not in out  # no GEMM in the table
    script = str(ROOT / "scripts" / "import_cudnn_sdpa.py")
    src = tmp_path / "r.csv"
    src.write_text(HEADER + "\n" + _row(ms="0.391") + "\n")
    r = subprocess.run([sys.executable, script, str(src), "--out", str(tmp_path / "k.csv")],
                       capture_output=True, text=True, check=True)
    assert "wrote 1 attention kernels" in r.stdout
    bad = tmp_path / "bad.csv"
    bad.write_text(HEADER + "\n" + _row(ms="0.391").replace(",2,4096,", ",two,4096,") + "\n")
    r = subprocess.run([sys.executable, script, str(bad), "--out", str(tmp_path / "k2.csv")],
                       capture_output=True, text=True, check=False)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert r.stderr.strip().count("\n") == 0 and f"{bad}:2" in r.stderr
    assert not (tmp_path / "k2.csv").exists()


def test_the_h200_table_is_a_check_that_leaves_hopper_s_caps_alone():
    """cuDNN 9.19 on H200: the same fit chooses about Blackwell's overhead (500 keys), and
    the shipped H100/H200 caps (cuDNN 9.1.1's) stay: the model is slow on these kernels."""
    kernels = read_kernel_table(KERNELS / "h200_cudnn9.19_sdpa.csv")
    assert len(kernels) == 30
    # Llama 3.1 405B's shard, 16k tokens, causal forward: 6.531 ms, 673 TFLOP/s by hand
    k = next(k for k in kernels if k.op.shape == (1, 64, 16384, 16384, 128, 1) and k.op.phase is Phase.FWD)
    assert k.op.flops / k.time_s / 1e12 == pytest.approx(2 * 64 * 16384**2 / 2 * 256 / 6.531e-3 / 1e12, rel=1e-3)
    fit = fit_attention(kernels, "h200")
    assert fit.seq_overhead == 500 and math.isnan(fit.mla_factor)
    med = attention_medians(check(kernels, "h200"))
    assert med["fwd d128 causal"][0] > 1.4  # the model at cuDNN 9.1.1's caps is that much slower
    assert load_params("h200").attention.seq_overhead == 200
