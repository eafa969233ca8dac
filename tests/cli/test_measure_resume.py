"""compute-profile measure saves each shape as it goes and resumes: an interrupted run
leaves the shapes it finished in the database, and the same command then measures only
the rest."""
from __future__ import annotations

import sqlite3

import pytest

pytest.importorskip("torch")

from compute_profile import measure as measure_mod
from engine.commands.compute_profile import main

TINY = ["--num-layers", "1", "--hidden-size", "64", "--num-attention-heads", "2", "--vocab-size", "256",
        "--world-size", "1", "--global-batch", "1", "--seq-length", "32", "--repeats", "1", "--warmup", "0",
        "--max-ops", "6"]


def _rows(db) -> int:
    return sqlite3.connect(db).execute("SELECT COUNT(*) FROM kernel_times").fetchone()[0]


def test_interrupt_keeps_finished_shapes_and_rerun_resumes(tmp_path, monkeypatch, capsys):
    db = tmp_path / "cpu.sqlite"
    real = measure_mod.time_bench
    calls = []

    def interrupted_on_the_fourth(*args, **kwargs):
        calls.append(1)
        if len(calls) == 4:
            raise KeyboardInterrupt  # Ctrl-C while the fourth shape runs
        return real(*args, **kwargs)

    monkeypatch.setattr(measure_mod, "time_bench", interrupted_on_the_fourth)
    assert main(["measure", *TINY, "--profile", str(db)]) == 130
    err = capsys.readouterr().err
    assert "3 shapes of this run are saved" in err and "interrupted" in err
    assert _rows(db) == 3

    monkeypatch.setattr(measure_mod, "time_bench", real)
    calls.clear()
    assert main(["measure", *TINY, "--profile", str(db)]) == 0
    err = capsys.readouterr().err
    assert "measured 3 op shapes" in err and "3 already in the database" in err
    assert err.count("\n") == 1  # not a terminal: one final line
    assert _rows(db) == 6

    # nothing left: a third run measures nothing; --replace measures all again
    assert main(["measure", *TINY, "--profile", str(db), "-q"]) == 0
    assert capsys.readouterr().err == ""
    assert main(["measure", *TINY, "--profile", str(db), "--replace"]) == 0
    assert "measured 6 op shapes" in capsys.readouterr().err and _rows(db) == 6
