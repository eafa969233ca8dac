"""compute-profile CLI in-process: measure a tiny model on the CPU, imports, exports, errors."""
from __future__ import annotations

from pathlib import Path

import pytest
from cp_fixtures import SHARED_DATA

from engine.commands.compute_profile import main
from compute_profile.db import ProfileDB
from compute_profile.measure import collect_cases
from workload_gen.builder import build
from workload_gen.core.model_config import ModelConfig
from workload_gen.core.parallel_config import ParallelConfig

TINY = ["--num-layers", "2", "--hidden-size", "128", "--num-attention-heads", "4", "--seq-length", "64",
        "--vocab-size", "512", "--world-size", "1", "--global-batch", "2", "--swiglu", "--normalization", "rmsnorm",
        "--position-embedding-type", "rope", "--disable-bias-linear"]


@pytest.fixture(scope="module")
def measured_db(tmp_path_factory):
    db = tmp_path_factory.mktemp("m") / "cpu.sqlite"
    rc = main(["measure", *TINY, "--profile", str(db), "--repeats", "3", "--warmup", "1"])
    assert rc == 0
    return db


def test_measure_tiny_model_on_cpu_fills_db(measured_db, capsys):
    model = ModelConfig(num_layers=2, hidden_size=128, num_attention_heads=4, vocab_size=512, activation="swiglu",
                        normalization="rmsnorm", position_embedding="rope", add_bias_linear=False)
    w = build(model, ParallelConfig(world_size=1, global_batch=2, seq_length=64))
    with ProfileDB(measured_db, create=False) as db:
        rows = db.rows()
    # every case but the step's fixed host work (no kernel to measure)
    assert len(rows) == len([c for c in collect_cases(w) if c.name != "step_overhead"])
    assert {r.kind for r in rows} >= {"gemm", "attention", "norm", "elementwise", "rope", "embedding", "loss", "optimizer"}
    assert all(r.gpu == "cpu" and r.source == "measured" and r.min_s <= r.time_s <= r.max_s for r in rows)


def test_measure_shows_progress_and_keeps_rows_without_replace(measured_db, capsys):
    rc = main(["measure", *TINY, "--profile", str(measured_db), "--repeats", "1", "--warmup", "0", "--max-ops", "2"])
    assert rc == 0
    err = capsys.readouterr().err
    # the shapes are in the database already: resumed, nothing measured again; not a terminal:
    # one final line (tests/cli/test_measure_resume.py covers interrupting and resuming)
    assert err.count("\n") == 1 and "measured 0 op shapes" in err and "2 already in the database" in err
    assert "0 new, 0 replaced" in err


def test_attach_coverage_of_measured_db_is_complete(measured_db, capsys):
    assert main(["coverage", *TINY, "--gpu", "cpu", "--profile", str(measured_db)]) == 0
    assert "measured 100.0%" in capsys.readouterr().out


def test_stats_and_show(measured_db, capsys):
    assert main(["stats", "--profile", str(measured_db)]) == 0
    out = capsys.readouterr().out
    assert "cpu" in out and "gemm" in out and "total rows" in out
    assert main(["show", "--profile", str(measured_db), "--kind", "gemm", "--limit", "2"]) == 0
    assert "more (--limit 0 lists all)" in capsys.readouterr().out


def test_csv_export_import_round_trip(measured_db, tmp_path, capsys):
    csv_path = tmp_path / "p.csv"
    assert main(["export-csv", "--profile", str(measured_db), "-o", str(csv_path)]) == 0
    other = tmp_path / "copy.sqlite"
    assert main(["import-csv", str(csv_path), "--profile", str(other)]) == 0
    with ProfileDB(measured_db, create=False) as a, ProfileDB(other, create=False) as b:
        assert a.rows() == b.rows()


def test_import_aiob_cli(tmp_path, capsys):
    db = tmp_path / "a.sqlite"
    rc = main(["import-aiob", str(SHARED_DATA / "aicb" / "aiob_inputs_Example.txt"), "--gpu", "a100", "--profile", str(db),
               "--model", "gpt3-13b", "--tp", "8", "--sp", "--seq-length", "2048", "--world-size", "128",
               "--global-batch", "256"])
    assert rc == 0
    assert "10 new" in capsys.readouterr().err
    with ProfileDB(db, create=False) as d:
        assert {r.source for r in d.rows()} == {"imported"}


@pytest.mark.parametrize("argv, msg", [
    (["measure", *TINY, "--repeats", "0"], "repeats"),
    (["show", "--profile", "/nonexistent/x.sqlite"], "x.sqlite"),
    (["import-trace", "/nonexistent/t.json", "--gpu", "h100"], "t.json"),
    (["measure", "--model", "llama3-8b", "--tp", "3", "--max-ops", "1"], "tp"),
    (["coverage", *TINY, "--gpu", "tpu-v9"], "gpu"),
    (["measure", *TINY, "--gpu", "h100", "--device", "cpu"], "rows must be labelled cpu"),
    (["calibrate", "--data", "/nonexistent/real"], "--data='/nonexistent/real'"),
    (["calibrate", "--data", str(SHARED_DATA / "real"), "--holdout", "/nonexistent/held"],
     "--holdout='/nonexistent/held'"),
])
def test_bad_input_is_one_line_exit_2(argv, msg, capsys, tmp_path):
    rc = main([*argv] if "--profile" in argv else [*argv, "--profile", str(tmp_path / "x.sqlite")]
              if argv[0] in ("measure",) else argv)
    assert rc == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:") and msg in err[0]


def test_failed_measure_leaves_no_database(tmp_path):
    db = tmp_path / "never.sqlite"
    assert main(["measure", "--model", "llama3-8b", "--tp", "3", "--profile", str(db)]) == 2
    assert not db.exists()


@pytest.mark.parametrize("cmd", ["measure", "import-aiob", "import-csv", "export-csv", "import-trace", "stats",
                                 "show", "coverage"])
def test_help_everywhere(cmd, capsys):
    with pytest.raises(SystemExit) as e:
        main([cmd, "--help"])
    assert e.value.code == 0
    assert "usage: compute-profile" in capsys.readouterr().out


def test_calibrate_refuses_unwritable_outputs_before_fitting(tmp_path, capsys, monkeypatch):
    """--out/--plot that cannot be written are refused up front (exit 2, one line), not after
    a minute of fitting; a missing parent directory is fine (created on write)."""
    from engine.commands.compute_profile import main

    def no_fitting(*_args, **_kwargs):
        raise AssertionError("calibrate started fitting before checking its outputs")

    monkeypatch.setattr("engine.calibration.cross_validate", no_fitting)
    blocker = tmp_path / "a_file"
    blocker.write_text("x")
    data = str(SHARED_DATA / "real")
    for argv, needle in ((["--out", str(blocker / "r.md")], "not a directory"),
                         (["--plot", str(blocker / "p.png")], "not a directory"),
                         (["--out", str(tmp_path)], "is a directory"),
                         (["--plot", str(tmp_path / "p.jpg")], ".png")):
        assert main(["calibrate", "--data", data, *argv]) == 2
        err = capsys.readouterr().err
        assert needle in err and err.count("\n") == 1


def test_calibrate_refuses_a_table_given_twice(capsys):
    """--data takes several directories; the same runs twice would weigh them double in the
    fit, so a label seen twice is refused in one line before any fitting."""
    data = str(SHARED_DATA / "real")
    assert main(["calibrate", "--data", data, data]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "appears twice" in err[0] and err[0].startswith("error:")


def test_measured_dirs_concatenate_in_order():
    from formats.measured_runs import read_measured_dir, read_measured_dirs

    held = Path(__file__).resolve().parents[2] / "compute_profile" / "data" / "measured"
    both = read_measured_dirs([SHARED_DATA / "real", held])
    assert [r.label for r in both] == [r.label for r in (*read_measured_dir(SHARED_DATA / "real"),
                                                          *read_measured_dir(held))]
