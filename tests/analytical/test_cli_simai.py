"""run-analytical on SimAI files with --accounting simai, and bad input (exit 2, nothing written)."""
from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from engine.commands.run import analytical_main

DATA = Path(__file__).resolve().parents[2] / ".." / "shared" / "data"
EXAMPLE = DATA / "simai" / "workload_analytical.txt"
FLAGS = ["--gpus", "9216", "--gpus-per-node", "8", "--nvlink-busbw", "360", "--nic-busbw", "48.5",
         "--nics-per-node", "8"]
# SimAI_analytical's own report for this file and these flags (issue 5), microseconds
OFFICIAL = {"total": 7_545_619, "compute": 4_542_795, "dp": 40_332, "dp_ep": 1_067_010, "tp": 326_686,
            "ep": 1_222_811, "bubble": 345_984, "pp": 0}


def test_simai_accounting_matches_simai_official_example(tmp_path, capsys):
    out = tmp_path / "run"
    assert analytical_main([str(EXAMPLE), *FLAGS, "--accounting", "simai", "--out", str(out), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["iteration_time_s"] == pytest.approx(OFFICIAL["total"] * 1e-6, rel=0.01)
    b = summary["breakdown_s"]
    for ours, theirs in (("compute", "compute"), ("exposed_dp", "dp"), ("exposed_edp", "dp_ep"),
                         ("exposed_tp", "tp"), ("exposed_ep", "ep"), ("bubble", "bubble")):
        assert b[ours] == pytest.approx(OFFICIAL[theirs] * 1e-6, rel=0.01), ours
    rows = list(csv.reader((out / "EndToEnd.csv").open()))
    assert rows[0][0] == "File name" and rows[0][-1].strip() == "Total time"
    assert float(rows[1][-1]) == pytest.approx(OFFICIAL["total"], rel=0.01)
    assert json.loads((out / "summary.json").read_text())["accounting"] == "simai"
    # one per-layer row per record
    layers = list(csv.DictReader((out / "layers.csv").open()))
    assert len(layers) == 1789 and "fwd_compute_s" in layers[0]


@pytest.mark.parametrize("argv, needle", [
    (["/nonexistent/workload.txt"], "workload"),
    (["--system", "h999"], "system"),
    ([str(EXAMPLE), "--accounting", "simai", "--gpus", "9215"], "gpus"),
    ([str(EXAMPLE), "--accounting", "simai", "--dp-overlap", "1.5"], "dp_o"),
    ([str(EXAMPLE), "--tp", "4"], "not both"),
])
def test_bad_input_exits_2_with_one_line_and_writes_nothing(tmp_path, capsys, argv, needle):
    out = tmp_path / "run"
    assert analytical_main([*argv, "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len([ln for ln in err if ln.startswith("error:")]) == 1
    assert needle in err[-1]
    assert not out.exists() or not any(out.iterdir())


def test_bad_simai_file_names_file_and_line(tmp_path, capsys):
    bad = tmp_path / "bad.txt"
    bad.write_text("HYBRID_TRANSFORMER_FWD_IN_BCKWD model_parallel_NPU_group: 2 ep: 1 pp: 1 vpp: 1 ga: 1 "
                   "all_gpus: 8 checkpoints: 0 checkpoint_initiates: 0 pp_comm 0\n1\nlayer -1 x NONE 0 1 NONE 0 1 NONE 0 1\n")
    assert analytical_main([str(bad), "--accounting", "simai", "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "bad.txt:3" in err
    assert not (tmp_path / "o").exists()


def test_simai_accounting_of_a_generated_workload(tmp_path, capsys):
    """Our workload exported to SimAI records (stage 0) and accounted as SimAI would."""
    out = tmp_path / "run"
    assert analytical_main(["--model", "gpt3-125m", "--world-size", "16", "--tp", "2", "--pp", "2",
                            "--global-batch", "16", "--system", "a100", "--accounting", "simai",
                            "--out", str(out), "--no-plot", "--json"]) == 0
    s = json.loads(capsys.readouterr().out)
    assert s["accounting"] == "simai" and s["backend"] == "simai-accounting"
    b = s["breakdown_s"]
    assert sum(b.values()) == pytest.approx(s["iteration_time_s"], rel=1e-9)  # SimAI's Total time
    # SimAI exposes every collective (default overlap 0) and never overlaps PP (pp_o = 1)
    assert b["exposed_tp"] > 0 and b["exposed_pp"] == 0
    rows = list(csv.reader((out / "EndToEnd.csv").open()))
    assert float(rows[1][-1]) == pytest.approx(s["iteration_time_s"] * 1e6, abs=1)
    assert len(rows) > 4  # SimAI's per-record rows follow the header
    assert not (out / "trace.json").exists()  # SimAI's accounting has no timeline
