"""SimAI/AICB files in event mode: the headline figures that are the file's placeholders are
labelled so (table and summary.json); --seq-length/--micro-batch fill the tokens in,
--profile is refused with the reason."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.commands.run import analytical_main

DATA = Path(__file__).resolve().parents[2] / ".." / "shared" / "data"
AICB_NO_AIOB = DATA / "aicb" / "gpt7b_w8_tp1_pp1_gbs32_mbs2_seq2048.txt"  # compute times are 1 ns
SIMAI_PP = DATA / "simai" / "workload_analytical.txt"  # pp 12, real compute times

pytestmark = pytest.mark.skipif(not AICB_NO_AIOB.is_file(), reason="shared data not present")


def test_placeholders_are_labelled(tmp_path, capsys):
    out = tmp_path / "run"
    assert analytical_main([str(AICB_NO_AIOB), "--out", str(out), "--no-plot", "-q"]) == 0
    table = capsys.readouterr().out
    ph = json.loads((out / "summary.json").read_text())["placeholders"]
    assert {"batch_tokens", "memory", "compute"} <= set(ph) and "gpus" not in ph  # pp 1: all GPUs simulated
    assert "--seq-length" in ph["batch_tokens"] and "1 ns" in ph["compute"]
    assert "PLACEHOLDERS" in table and "(placeholder: batch tokens)" in table
    assert "(compute times are placeholders)" in table and "(placeholder: no model in the file)" in table


def test_flags_fill_in_the_tokens(tmp_path, capsys):
    assert analytical_main([str(AICB_NO_AIOB), "--seq-length", "2048", "--json", "-q"]) == 0
    base = json.loads(capsys.readouterr().out)
    assert analytical_main([str(AICB_NO_AIOB), "--seq-length", "4096", "--micro-batch", "2", "--json", "-q"]) == 0
    filled = json.loads(capsys.readouterr().out)
    assert "batch_tokens" in base["placeholders"] and "batch_tokens" not in filled["placeholders"]
    assert filled["config"]["parallel"]["seq_length"] == 4096 and filled["config"]["parallel"]["micro_batch"] == 2
    assert filled["tokens_per_s"] == pytest.approx(4 * base["tokens_per_s"], rel=1e-9)  # same time, 4x tokens


def test_one_stage_of_a_pipeline_is_labelled(capsys):
    assert analytical_main([str(SIMAI_PP), "--gpus-per-node", "8", "--json", "-q"]) == 0
    ph = json.loads(capsys.readouterr().out)["placeholders"]
    assert "768 GPUs = one pipeline stage of 9216" in ph["gpus"] and "compute" not in ph


@pytest.mark.parametrize("argv, needle", [
    (["--profile", "x.sqlite"], "no op shapes"),
    (["--accounting", "simai", "--seq-length", "4096"], "drop --accounting simai"),
    (["--tp", "2"], "takes only --seq-length and --micro-batch"),
])
def test_flags_that_cannot_apply_are_refused_with_the_reason(capsys, argv, needle):
    assert analytical_main([str(AICB_NO_AIOB), *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:") and needle in err[0]
