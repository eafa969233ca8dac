"""Honest warnings when compute times will not be what the user expects (issue 13)."""
from __future__ import annotations

from engine.commands.run import analytical_main


def _profile_for(path, gpu: str) -> None:
    from compute_profile.db import ProfileDB, ProfileRow

    with ProfileDB(path) as db:
        db.put([ProfileRow(gpu=gpu, kind="gemm", shape_key="8x8x8", dtype="bf16", phase="fwd", time_s=1e-6,
                           source="measured")])


def test_profile_without_rows_for_the_simulated_gpu_is_named(tmp_path, capsys):
    db = tmp_path / "cpu.sqlite"
    _profile_for(db, "cpu")
    assert analytical_main(["--model", "gpt3-125m", "--num-layers", "1", "--world-size", "8",
                            "--profile", str(db)]) == 0
    err = capsys.readouterr()
    assert "has no rows for h100-sxm (it has: cpu)" in err.err
    assert "give --profile DB" not in err.out  # it was given: the hint would mislead


def test_workload_timed_on_another_gpu_is_named(tmp_path, capsys):
    from dataclasses import replace

    from compute_profile import attach
    from formats.native import write_native
    from workload_gen import build
    from workload_gen.core.model_presets import get_preset
    from workload_gen.core.parallel_config import ParallelConfig

    w, _ = attach(build(replace(get_preset("gpt3-125m"), num_layers=1), ParallelConfig(world_size=8)), "a100")
    path = tmp_path / "w.txt"
    write_native(w, path)
    assert analytical_main([str(path), "--system", "h100"]) == 0
    assert "compute times are for a100-sxm-80gb but the system's GPU is h100-sxm" in capsys.readouterr().err
