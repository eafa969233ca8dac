"""Profile rows from a real torch trace: the keys must be the ones the workload's ops ask for.

The keys are checked against ``workload_gen.build`` for the same model (the consumer),
and the times against the trace's own op durations (the producer)."""
from __future__ import annotations

from pathlib import Path
from statistics import median

import pytest

from compute_profile.db import ProfileDB
from compute_profile.keys import profile_phase, shape_key
from compute_profile.trace_import import rows_from_trace
from formats.kineto import read_kineto
from workload_gen.builder import build
from workload_gen.core.errors import ConfigError
from workload_gen.core.model_config import ModelConfig
from workload_gen.core.parallel_config import ParallelConfig
from workload_gen.core.records import ComputeOp

TRACE = Path(__file__).resolve().parents[1] / "data" / "cpu_gpt2l_h256_trace.json.gz"


@pytest.fixture(scope="module")
def rows():
    return rows_from_trace(TRACE, "cpu")


def test_rows_cover_the_workload_keys(rows):
    model = ModelConfig(num_layers=2, hidden_size=256, num_attention_heads=4, vocab_size=1024,
                        max_position_embeddings=128)
    par = ParallelConfig(world_size=1, micro_batch=2, global_batch=2, seq_length=128, dtype="fp32")
    wl = build(model, par)
    have = {(r.kind, r.shape_key, r.dtype, r.phase) for r in rows}
    want = {(op.kind.value, shape_key(op), op.dtype, profile_phase(op.phase).value)
            for _, _, op in wl.ops() if isinstance(op, ComputeOp)}
    missing = want - have
    # The torch model has no dropout, and its training loop neither clips (no gradient
    # norm) nor zeroes a persistent grad buffer (set_to_none), nor has Megatron's step
    # bookkeeping (step_overhead, shape 0), nor a bias-gradient kernel the importer keys
    # (its nn.Linear's bias gradient is part of the addmm backward; Megatron's skip_bias_add
    # linears, proj, fc1 and fc2, run one of their own: layer_ops); every other op of the
    # workload is measured.
    assert {k[1].split(":")[0] for k in missing} == {"embedding_dropout", "grad_norm", "zero_grad", "0",
                                                     "proj.dbias", "fc1.dbias", "fc2.dbias"}
    assert len(want - missing) >= 25


def test_gemm_keys_and_times_match_the_trace(rows):
    by_key = {(r.kind, r.shape_key, r.phase): r for r in rows}
    T, H = 256, 256
    # fc1 forward: C[T, 4H] = X[T, H] @ W^T -> (m, n, k) = (T, 4H, H). The tied output layer
    # (vocab 1024 = 4H) has the same shape: (2 layers + head) x 3 steps = 9 calls.
    fc1 = by_key[("gemm", f"{T}x{4 * H}x{H}", "fwd")]
    ops = [o for o in read_kineto(TRACE).ranks[0].ops
           if o.category == "gemm" and o.phase == "fwd" and o.input_dims[1] == (4 * H, H)]
    assert fc1.repeats == len(ops) == 9
    assert fc1.time_s == pytest.approx(median(o.dur for o in ops))
    assert fc1.min_s == pytest.approx(min(o.dur for o in ops)) and fc1.source == "imported"
    # fc1 weight gradient in the workload's orientation (in, out, tokens).
    assert ("gemm", f"{H}x{4 * H}x{T}", "bwd-weight") in by_key
    # Optimizer: one row keyed by the parameter count of the model.
    opt = [r for r in rows if r.kind == "optimizer"]
    assert len(opt) == 1 and opt[0].repeats == 3 and int(opt[0].shape_key) == 1874944


def test_rows_load_into_the_profile_db(rows, tmp_path):
    with ProfileDB(tmp_path / "p.sqlite") as db:
        res = db.put(rows)
        assert res.inserted == len(rows) and len(db) == len(rows)
        assert db.get("cpu", "attention", "2x4x128x128x64x1", "fp32", "fwd") is not None


def test_trace_without_shapes_is_an_error(tmp_path):
    (tmp_path / "t.json").write_text('{"traceEvents": [{"ph": "X", "cat": "user_annotation", "name": '
                                     '"ProfilerStep#1", "pid": 1, "tid": 1, "ts": 0, "dur": 10}]}')
    with pytest.raises(ConfigError, match="record_shapes"):
        rows_from_trace(tmp_path / "t.json", "cpu")


def test_compute_profile_import_trace_command(tmp_path, capsys):
    from engine.commands.compute_profile import main

    db = tmp_path / "cpu.sqlite"
    assert main(["import-trace", str(TRACE), "--gpu", "cpu", "--profile", str(db)]) == 0
    with ProfileDB(db, create=False) as d:
        assert len(d) == len(rows_from_trace(TRACE, "cpu"))


def test_rows_are_stored_under_the_name_attach_looks_up():
    """``--gpu h100`` used to store rows under 'h100' while attach looks up 'h100-sxm', so
    they were never used; an unknown name stored rows nothing could use."""
    db = ProfileDB()
    db.put(rows_from_trace(TRACE, "h100"))
    assert db.gpus() == ["h100-sxm"]
    assert db.rows(gpu="h100") == db.rows(gpu="h100-sxm") != []  # a filter by the alias finds them
    with pytest.raises(ConfigError, match="gpu='nosuch' is invalid; valid: "):
        db.put(rows_from_trace(TRACE, "nosuch"))
    assert db.gpus() == ["h100-sxm"]  # nothing of the refused import was written


def test_import_trace_steps_keeps_only_those_steps(tmp_path):
    """``--steps 1,3``: the rows are the medians of those steps' calls alone, so a step held
    back for checking is never its own calibration sample."""
    from engine.commands.compute_profile import main

    db = tmp_path / "cpu.sqlite"
    assert main(["import-trace", str(TRACE), "--gpu", "cpu", "--profile", str(db), "--steps", "1,3"]) == 0
    ops = [o for o in read_kineto(TRACE).ranks[0].ops
           if o.category == "gemm" and o.phase == "fwd" and o.input_dims[1] == (1024, 256) and o.step in (1, 3)]
    assert len(ops) == 6  # (2 layers + tied head) x 2 steps
    with ProfileDB(db, create=False) as d:
        fc1 = d.get("cpu", "gemm", "256x1024x256", "fp32", "fwd")
        opt = [r for r in d.rows(gpu="cpu") if r.kind == "optimizer"]
    assert fc1.repeats == 6 and fc1.time_s == pytest.approx(median(o.dur for o in ops))
    assert len(opt) == 1 and opt[0].repeats == 2


def test_import_trace_absent_step_is_one_line(tmp_path, capsys):
    from engine.commands.compute_profile import main

    db = tmp_path / "cpu.sqlite"
    assert main(["import-trace", str(TRACE), "--gpu", "cpu", "--profile", str(db), "--steps", "1,7"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"error: {TRACE}: step 7 not in trace (rank 0); steps: 1, 2, 3"]
    assert not db.exists()  # nothing written
    for bad in ("1,1", "-1", "x", ""):
        with pytest.raises(SystemExit) as exc:
            main(["import-trace", str(TRACE), "--gpu", "cpu", "--profile", str(db), "--steps", bad])
        assert exc.value.code == 2
        assert "expected ProfilerStep numbers" in capsys.readouterr().err
