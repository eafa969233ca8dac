"""diff-trace takes any two traces (issue 29): simulated or real on either side, .json or
.json.gz, a real trace without ProfilerStep markers taken whole as one iteration."""
from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import pytest

from engine.commands.diff import diff_trace_main
from engine.commands.run import analytical_main

REAL = Path(__file__).resolve().parents[1] / "data" / "cpu_gpt2l_h256_trace.json.gz"
"""A real PyTorch-profiler trace (CPU, GPT-2 large shapes at hidden 256), with ProfilerStep#N."""


def _no_markers(tmp_path: Path) -> Path:
    data = json.load(gzip.open(REAL, "rt"))
    data["traceEvents"] = [e for e in data["traceEvents"] if not str(e.get("name", "")).startswith("ProfilerStep#")]
    out = tmp_path / "plain_profile.json.gz"
    with gzip.open(out, "wt") as fh:
        json.dump(data, fh)
    return out


def _diff(tmp_path: Path, a: Path, b: Path, capsys) -> dict:
    out = tmp_path / "d"
    assert diff_trace_main([str(a), str(b), "--out", str(out), "-q"]) == 0
    captured = capsys.readouterr()
    return {"json": json.loads((out / "diff.json").read_text()), "out": captured.out, "err": captured.err}


def test_a_real_gzipped_trace_without_markers_self_diffs_to_zero(tmp_path, capsys):
    plain = _no_markers(tmp_path)
    d = _diff(tmp_path, plain, plain, capsys)
    assert d["err"].count("has no ProfilerStep#N markers: the whole trace is taken as one iteration") == 2
    cats = {r["key"]: r for r in d["json"]["categories"]}
    for kind in ("gemm", "attention", "norm", "optimizer"):
        assert cats[f"compute:{kind}"]["measured_s"] > 0, kind
    assert all(r["diff_s"] == 0 for r in d["json"]["categories"])
    assert d["json"]["iteration"]["diff_s"] == 0


def test_two_real_traces_compare_before_and_after(tmp_path, capsys):
    plain = _no_markers(tmp_path)
    d = _diff(tmp_path, REAL, plain, capsys)  # one step (marked) against the whole three-step trace
    it = d["json"]["iteration"]
    assert it["predicted_s"] < it["measured_s"]  # first = one ProfilerStep, second = the whole trace
    assert "(first argument)" in d["out"] and "(second argument)" in d["out"]


@pytest.mark.parametrize("gz_first", [True, False])
def test_a_simulated_trace_works_gzipped_and_on_either_side(tmp_path, capsys, gz_first):
    run = tmp_path / "run"
    assert analytical_main(["--model", "gpt3-125m", "--world-size", "1", "--global-batch", "1", "--seq-length", "256",
                            "--out", str(run), "--no-plot", "-q"]) == 0
    capsys.readouterr()
    gz = tmp_path / "trace.json.gz"
    with open(run / "trace.json", "rb") as src, gzip.open(gz, "wb") as dst:
        shutil.copyfileobj(src, dst)
    a, b = (gz, REAL) if gz_first else (REAL, run / "trace.json")
    d = _diff(tmp_path, a, b, capsys)
    assert d["json"]["iteration"]["predicted_s"] > 0 and d["json"]["iteration"]["measured_s"] > 0


@pytest.mark.parametrize(("steps", "picked"), [("1,3", 1), ("2,3", 2), ("3", 3), ("1,2,3", 1)])
def test_step_list_takes_the_median_length_step_among_those(tmp_path, capsys, steps, picked):
    """``--step 1,3``: the median-length step of those (the longer of two), read from the
    trace's own ProfilerStep ranges: here 63.35, 123.0 and 60.78 ms for steps 1, 2, 3."""
    from formats.kineto import read_kineto

    durs = {s.number: s.dur for s in read_kineto(REAL).ranks[0].steps}
    pool = sorted((durs[int(n)], int(n)) for n in steps.split(","))
    assert pool[len(pool) // 2][1] == picked  # the rule, by hand
    out = tmp_path / "d"
    assert diff_trace_main([str(REAL), str(REAL), "--step", steps, "--out", str(out), "-q"]) == 0
    it = json.loads((out / "diff.json").read_text())["iteration"]
    assert it["predicted_s"] == it["measured_s"] == pytest.approx(durs[picked])


def test_an_absent_step_in_the_list_is_one_line(tmp_path, capsys):
    assert diff_trace_main([str(REAL), str(REAL), "--step", "2,9", "-q"]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [f"error: {REAL}: step 9 not in trace (rank 0); steps: 1, 2, 3"]
