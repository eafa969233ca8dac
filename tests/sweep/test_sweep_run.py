"""Sweeps end to end: invalid points kept with reasons, resume, local processes and Ray."""
from __future__ import annotations

import json

import pandas as pd
import pytest
import yaml

from engine.commands.sweep import sweep_main
from engine.sweep.execute import journal_path
from engine.sweep.grid import expand, load_spec
from engine.sweep.point import evaluate_config

BASE = {"model": "gpt3-125m", "system": "h100",
        "parallel": {"world_size": 16, "sp": False},
        "training": {"global_batch": 64, "micro_batch": 1, "seq_length": 1024}}


def _spec(tmp_path, grid, output="out.csv", base=BASE):
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump({"base": base, "grid": grid, "output": output}, sort_keys=False))
    return path


def test_row_matches_its_own_definitions():
    row = evaluate_config({**BASE, "parallel": {**BASE["parallel"], "tp": 2}})
    assert row["status"] == "ok", row["reason"]
    # tokens/s is global batch * sequence / iteration time, whatever the engine did
    assert row["tokens_per_s"] == pytest.approx(64 * 1024 / row["iteration_time_s"], rel=1e-12)
    parts = [v for k, v in row.items() if k.startswith("breakdown_s.")]
    assert sum(parts) == pytest.approx(row["iteration_time_s"], rel=1e-6)
    assert 0 < row["mfu"] < 1
    assert row["dp"] == 16 // 2


def test_invalid_points_are_kept_with_the_reason():
    # gpt3-125m has 12 heads: tp=8 cannot divide them
    bad_tp = evaluate_config({**BASE, "parallel": {**BASE["parallel"], "tp": 8}})
    assert bad_tp["status"] == "invalid"
    assert "num_attention_heads=12" in bad_tp["reason"]
    # 175B on 8 GPUs without sharding cannot fit in 80 GB
    big = evaluate_config({"model": "gpt3-175b", "system": "h100", "parallel": {"world_size": 8, "tp": 8},
                           "training": {"global_batch": 8, "seq_length": 2048}})
    assert big["status"] == "invalid"
    assert big["reason"].startswith("memory:")
    assert big["reserved_memory_bytes"] > 80e9


def test_local_sweep_writes_table_and_plots(tmp_path):
    spec = _spec(tmp_path, [{"product": {"parallel.tp": [1, 2, 4, 8], "parallel.pp": [1, 2]}}])
    assert sweep_main([str(spec), "--workers", "2", "--batch-size", "2", "--quiet"]) == 0
    table = pd.read_csv(tmp_path / "out.csv")
    assert len(table) == 8
    assert list(table["parallel.tp"]) == [1, 1, 2, 2, 4, 4, 8, 8]
    assert set(table.loc[table["parallel.tp"] == 8, "status"]) == {"invalid"}
    assert (table.loc[table["status"] == "ok", "iteration_time_s"] > 0).all()
    assert (tmp_path / "out_mfu_tp_pp.png").stat().st_size > 1000
    assert not journal_path(tmp_path / "out.csv").exists()
    # deterministic: a second run from scratch gives the identical file
    first = (tmp_path / "out.csv").read_bytes()
    assert sweep_main([str(spec), "--workers", "1", "--quiet", "--no-plots"]) == 0
    assert (tmp_path / "out.csv").read_bytes() == first


def test_resume_skips_journaled_points(tmp_path):
    spec_path = _spec(tmp_path, [{"product": {"parallel.tp": [1, 2, 4]}}])
    points = expand(load_spec(spec_path))
    journal = journal_path(tmp_path / "out.csv")
    # An interrupted run left the first point done (with a marker value) and a torn line.
    marker = {"status": "ok", "reason": "", "iteration_time_s": 123.0}
    journal.write_text(json.dumps({"key": points[0].key, "row": marker}) + "\n" + '{"key": "torn')
    assert sweep_main([str(spec_path), "--workers", "1", "--quiet", "--no-plots"]) == 0
    table = pd.read_csv(tmp_path / "out.csv")
    assert table["iteration_time_s"].iloc[0] == 123.0  # not recomputed
    assert table["iteration_time_s"].iloc[1] != 123.0 and table["iteration_time_s"].iloc[1] > 0


def test_sweep_on_a_local_ray_instance(tmp_path):
    spec = _spec(tmp_path, [{"product": {"parallel.tp": [1, 2], "training.micro_batch": [1, 2]}}], output="ray.parquet")
    assert sweep_main([str(spec), "--ray", "--batch-size", "1", "--quiet", "--no-plots"]) == 0
    ray_table = pd.read_parquet(tmp_path / "ray.parquet")
    local = _spec(tmp_path, [{"product": {"parallel.tp": [1, 2], "training.micro_batch": [1, 2]}}], output="local.parquet")
    assert sweep_main([str(local), "--workers", "1", "--quiet", "--no-plots"]) == 0
    pd.testing.assert_frame_equal(ray_table, pd.read_parquet(tmp_path / "local.parquet"))


def test_bad_spec_exits_2_with_one_line(tmp_path, capsys):
    path = tmp_path / "bad.yaml"
    path.write_text("grid: [{zip: {parallel.tp: [1, 2], parallel.pp: [1]}}]\n")
    assert sweep_main([str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "bad.yaml" in err[0] and "equal lengths" in err[0]


@pytest.mark.parametrize("flags, needle", [(["--batch-size", "0"], "--batch-size"), (["--workers", "-1"], "--workers")])
def test_bad_execution_flags_exit_2(tmp_path, capsys, flags, needle):
    spec = _spec(tmp_path, [{"product": {"parallel.tp": [1, 2]}}])
    assert sweep_main([str(spec), *flags, "--quiet"]) == 2
    assert needle in capsys.readouterr().err
    assert not list(tmp_path.glob("out.csv*"))
