"""run-analytical end to end: every output with its documented keys and units, the trace
round trip, --json, determinism, SimAI files in the event simulation, bad input."""
from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from engine.commands.run import analytical_main
from engine.pipeline import make_backend, run_analytical
from formats.chrome_trace import STREAMS, read_chrome_trace
from workload_gen.core.model_presets import get_preset
from workload_gen.core.parallel_config import ParallelConfig
from workload_gen.core.records import CollectiveOp, CollKind, Group
from workload_gen.core.system import get_system

DATA = Path(__file__).resolve().parents[2] / ".." / "shared" / "data"
SMALL = ["--model", "gpt3-125m", "--world-size", "16", "--tp", "2", "--pp", "2", "--global-batch", "16",
         "--seq-length", "1024", "--system", "a100"]
SMALL_PAR = ParallelConfig(world_size=16, tp=2, pp=2, global_batch=16, seq_length=1024)
SUMMARY_KEYS = {"iteration_time_s", "tokens_per_s", "tflops_per_gpu", "mfu", "breakdown_s", "stage_breakdowns_s",
                "peak_memory_bytes", "reserved_memory_bytes", "compute_coverage", "units", "config", "backend"}
BREAKDOWN_KEYS = {"compute", "exposed_tp", "exposed_cp", "exposed_ep", "exposed_dp", "exposed_pp", "bubble",
                  "optimizer"}


def test_default_run_writes_every_output(tmp_path, capsys):
    """The README's first command: no workload, no model flags."""
    out = tmp_path / "run"
    assert analytical_main(["--out", str(out)]) == 0
    table = capsys.readouterr().out
    assert "iteration time" in table and "breakdown" in table
    assert sorted(p.name for p in out.iterdir()) == ["EndToEnd.csv", "layers.csv", "run.png", "summary.json",
                                                     "trace.json"]
    s = json.loads((out / "summary.json").read_text())
    assert SUMMARY_KEYS <= set(s)
    assert BREAKDOWN_KEYS <= set(s["breakdown_s"])
    assert s["units"]["time"] == "s" and s["units"]["memory"] == "bytes"
    assert {"model", "parallel", "system"} <= set(s["config"])
    # the parts of the critical stage's breakdown add up to the iteration time
    assert sum(s["breakdown_s"].values()) == pytest.approx(s["iteration_time_s"], rel=1e-6)
    assert len(s["peak_memory_bytes"]) == s["config"]["parallel"]["pp"]
    assert 0 < s["mfu"] < 1
    assert s["compute_coverage"]["estimated"] == pytest.approx(1.0)
    assert (out / "run.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    rows = list(csv.reader((out / "EndToEnd.csv").open()))
    assert float(rows[1][-1]) == pytest.approx(s["iteration_time_s"] * 1e6, abs=1)  # SimAI's us
    header = (out / "layers.csv").read_text().splitlines()[0].split(",")
    assert header[:8] == ["stage", "layer", "phase", "microbatches", "compute_s", "comm_s", "exposed_comm_s",
                          "comm_bytes"]


def test_trace_json_round_trips_the_in_process_timeline(tmp_path):
    out = tmp_path / "run"
    assert analytical_main([*SMALL, "--out", str(out), "--no-plot"]) == 0
    ref = run_analytical(get_preset("gpt3-125m"), SMALL_PAR, "a100")
    back = read_chrome_trace(out / "trace.json")
    assert len(back) == len(ref.intervals) > 0
    for a, b in zip(ref.intervals, back):
        assert (a.stage, a.stream, a.name, a.phase, a.microbatch, a.category, a.bytes) == \
               (b.stage, b.stream, b.name, b.phase, b.microbatch, b.category, b.bytes)
        assert b.start == pytest.approx(a.start, abs=1e-9) and b.end == pytest.approx(a.end, abs=1e-9)
    data = json.loads((out / "trace.json").read_text())
    procs = {e["pid"] for e in data["traceEvents"] if e["ph"] == "M" and e["name"] == "process_name"}
    assert procs == {0, 1}  # one process per stage
    assert {e["tid"] for e in data["traceEvents"] if e["ph"] == "X"} <= set(range(len(STREAMS)))
    assert data["otherData"]["iteration_time_s"] == pytest.approx(ref.iteration_time_s, rel=1e-12)


def test_trace_collectives_take_the_backend_formula():
    """Each TP all-reduce on the timeline lasts what the ring formula gives by hand."""
    model, par = get_preset("gpt3-125m"), SMALL_PAR
    res = run_analytical(model, par, "a100")
    sysc = get_system("a100")
    size = par.micro_batch * par.seq_length * model.hidden_size * 2  # Megatron's b*s*h activations, bf16
    n = par.tp
    moved = 2 * (n - 1) / n * size
    # a100 efficiency curve (network/data/efficiency.yaml): peak 0.859 of 230 GB/s, 77.92 us per call
    expected = 2 * (n - 1) * sysc.nvlink_latency_s + moved / (230e9 * 0.859) + 7.792e-5
    tp = [iv for iv in res.intervals if iv.stream == "tp" and iv.bytes == size]
    assert tp, "no TP all-reduce of b*s*h*2 bytes on the timeline"
    for iv in tp:
        assert iv.end - iv.start == pytest.approx(expected, rel=1e-9)
    b = make_backend(sysc, par.world_size)
    op = CollectiveOp("x", 0, tp[0].phase, CollKind.ALL_REDUCE, Group.TP, n, size)
    assert b.collective_time(op, (0, 1)) == pytest.approx(expected, rel=1e-12)


def test_json_flag_prints_summary_and_outputs_are_deterministic(tmp_path, capsys):
    a, b = tmp_path / "a", tmp_path / "b"
    assert analytical_main([*SMALL, "--out", str(a), "--no-plot", "--json"]) == 0
    printed = capsys.readouterr().out
    assert printed == (a / "summary.json").read_text()
    assert analytical_main([*SMALL, "--out", str(b), "--no-plot", "--json"]) == 0
    capsys.readouterr()
    for name in ("summary.json", "layers.csv", "trace.json", "EndToEnd.csv"):
        assert (a / name).read_bytes() == (b / name).read_bytes(), name


def test_simai_file_runs_in_the_event_simulation(tmp_path, capsys):
    out = tmp_path / "run"
    assert analytical_main([str(DATA / "simai" / "workload_analytical.txt"), "--gpus", "9216", "--gpus-per-node", "8",
                            "--nvlink-busbw", "360", "--nic-busbw", "48.5", "--nics-per-node", "8",
                            "--out", str(out), "--no-plot", "--json"]) == 0
    s = json.loads(capsys.readouterr().out)
    assert s["accounting"] == "event"
    assert s["tflops_per_gpu"] is None  # the file has no model
    # the SimAI cluster flags became the system: NVLink 360 GB/s (GB = 2^30)
    assert s["config"]["system"]["nvlink_busbw"] == pytest.approx(360 * 2**30)
    # compute is the file's own, and SimAI's accounting sums it to 4.54 s (issue 5)
    assert s["breakdown_s"]["compute"] == pytest.approx(4.542795, rel=0.02)
    assert (out / "trace.json").exists() and (out / "EndToEnd.csv").exists()
    # EndToEnd.csv has per-layer rows whose compute adds up to its header's total (in us,
    # each row rounded to 1 us), and that total is SimAI's 4.54 s
    lines = (out / "EndToEnd.csv").read_text().splitlines()
    body = [line for line in lines[3:] if not line.startswith("#")]
    assert len(body) > 10
    header_comp_us = float(next(csv.reader([lines[1]], skipinitialspace=True))[7].split()[0])
    comp_us = sum(float(c) for line in body for c in line.split(",")[2:5])
    assert comp_us == pytest.approx(header_comp_us, abs=len(body) * 1.5 + 1)
    assert comp_us == pytest.approx(4.542795e6, rel=0.02)


def test_busbw_override_reaches_the_timeline(tmp_path):
    """SimAI's busbw.yaml: TP all-reduce at 300 GB/s (2^30), no efficiency curve, latency kept."""
    out = tmp_path / "run"
    assert analytical_main([*SMALL, "--busbw", str(DATA / "simai" / "busbw.yaml"), "--out", str(out),
                            "--no-plot"]) == 0
    model = get_preset("gpt3-125m")
    size = SMALL_PAR.micro_batch * SMALL_PAR.seq_length * model.hidden_size * 2
    want = 2 * get_system("a100").nvlink_latency_s + size / (300 * 2**30)  # n = 2: factor 2(n-1)/n = 1
    tp = [iv for iv in read_chrome_trace(out / "trace.json") if iv.stream == "tp" and iv.bytes == size]
    assert tp and all(iv.end - iv.start == pytest.approx(want, abs=2e-9) for iv in tp)


def test_efficiency_table_option(tmp_path):
    table = tmp_path / "eff.yaml"
    table.write_text("default:\n  nvlink: {peak_fraction: 0.5, half_time_s: 0.0}\n")
    assert analytical_main([*SMALL, "--efficiency", str(table), "--no-plot", "--out", str(tmp_path / "a")]) == 0
    model = get_preset("gpt3-125m")
    size = SMALL_PAR.micro_batch * SMALL_PAR.seq_length * model.hidden_size * 2
    want = 2 * get_system("a100").nvlink_latency_s + size / (230e9 * 0.5)
    tp = [iv for iv in read_chrome_trace(tmp_path / "a" / "trace.json") if iv.stream == "tp" and iv.bytes == size]
    assert tp and all(iv.end - iv.start == pytest.approx(want, abs=2e-9) for iv in tp)


@pytest.mark.parametrize("argv, needle", [
    (["--model", "gpt3-125m", "--tp", "5"], "tp"),
    (["--efficiency", str(DATA / "simai" / "busbw.yaml")], "busbw.yaml:2: invalid YAML"),
    (["--profile", "/nonexistent/profile.sqlite"], "profile"),
    (["--gpu", "nosuchgpu"], "gpu"),
    (["--model", "nosuchmodel"], "model"),
    (["--system", str(DATA / "real" / "README.md")], "README.md:3: invalid YAML"),
])
def test_bad_config_exits_2_and_writes_nothing(tmp_path, capsys, argv, needle):
    out = tmp_path / "run"
    assert analytical_main([*argv, "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("error:") and needle in err[-1]
    assert not out.exists()


def test_out_is_a_file(tmp_path, capsys):
    f = tmp_path / "file"
    f.write_text("x")
    assert analytical_main([*SMALL, "--out", str(f), "--no-plot"]) == 2
    assert "not a directory" in capsys.readouterr().err
    assert f.read_text() == "x"


def test_rerun_into_the_same_dir_leaves_only_this_runs_files(tmp_path):
    out = tmp_path / "run"
    assert analytical_main([*SMALL, "--out", str(out), "--no-plot"]) == 0
    assert (out / "trace.json").exists()
    assert analytical_main([*SMALL, "--out", str(out), "--no-plot", "--no-trace"]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["EndToEnd.csv", "layers.csv", "summary.json"]
