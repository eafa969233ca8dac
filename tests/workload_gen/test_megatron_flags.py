"""Megatron-LM launch arguments: ignored with one note, refused as "not modelled", or
handled by Megatron's own rules (SP off at TP 1); the world size and preset are reported."""
from __future__ import annotations

import shlex

import pytest

from engine.commands.gen_workload import main
from workload_gen.megatron_flags import IGNORED_MEGATRON_FLAGS, NOT_MODELLED_MEGATRON_FLAGS
from workload_gen.core.model_presets import PRESETS

ISSUE_IGNORED = [  # issue 13's list: flags that do not change the simulated iteration
    "--use-rope-scaling", "--rope-scaling-factor 8", "--check-for-nan-in-loss-and-grad", "--use-dist-ckpt",
    "--no-persist-layer-norm", "--calculate-per-token-loss", "--tp-comm-overlap-cfg ub.yaml",
    "--num-distributed-optimizer-instances 1", "--fp8-amax-history-len 1024", "--fp8-amax-compute-algo max",
    "--nccl-communicator-config-path nccl.yaml", "--rampup-batch-size 16 16 5859375",
]
ISSUE_REFUSED = [  # issue 13's list: flags that would change the iteration, not modelled
    # --fp8-param-gather: modelled (test_fp8_param_gather); --overlap-param-gather-with-optimizer-step:
    # runs (modelled, or with its warning: test_moe_flags)
    "--distribute-saved-activations", "--num-distributed-optimizer-instances 2",
]
BASE = ["--model", "llama3-8b", "--tp", "2", "--world-size", "8", "--global-batch", "8"]


def _run(tmp_path, capsys, argv):
    out = tmp_path / "w.txt"
    rc = main([*argv, "-o", str(out)])
    return rc, capsys.readouterr().err, out


def test_issue_flags_are_ignored_with_one_note(tmp_path, capsys):
    argv = [*BASE, "--sequence-parallel"]
    for item in ISSUE_IGNORED:
        argv += shlex.split(item)
    rc, err, out = _run(tmp_path, capsys, argv)
    assert rc == 0 and out.exists()
    notes = [line for line in err.splitlines() if line.startswith("note: ignored Megatron-LM flags")]
    assert len(notes) == 1
    for item in ISSUE_IGNORED:
        assert item.split()[0] in notes[0]
    assert "unrecognized" not in err


def test_ignored_flags_change_nothing(tmp_path, capsys):
    rc, _, out = _run(tmp_path, capsys, BASE)
    plain = out.read_text()
    argv = list(BASE)
    for item in ISSUE_IGNORED:
        argv += shlex.split(item)
    rc2, _, out2 = _run(tmp_path, capsys, argv)
    assert rc == rc2 == 0 and out2.read_text() == plain


def _refused(tmp_path, capsys, argv) -> str:
    """Run gen-workload expecting a refusal: exit 2 (a usage error from the parser, or a
    config error), one line on stderr, no output file. Returns that line."""
    out = tmp_path / "w.txt"
    out.unlink(missing_ok=True)
    try:
        rc = main([*argv, "-o", str(out)])
    except SystemExit as exc:
        rc = exc.code
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1, (argv, err)
    assert "unrecognized" not in err and not out.exists()
    return err


@pytest.mark.parametrize("item", ISSUE_REFUSED)
def test_issue_flags_that_would_change_the_iteration_are_refused(tmp_path, capsys, item):
    """Either refused by the parser (no field yet) or set as a recipe option whose value
    workload_gen.core.unmodelled refuses; both name the flag as 'not modelled'."""
    err = _refused(tmp_path, capsys, [*BASE, *shlex.split(item)])
    assert f"not modelled: {item.split()[0]}" in err or f"not modelled yet: {item.split()[0]}" in err


def test_every_listed_flag_is_accepted_or_refused_never_unrecognized(tmp_path, capsys):
    for flag, takes_value in IGNORED_MEGATRON_FLAGS.items():
        argv = [flag, "1"] if takes_value else [flag]
        assert main([*BASE, *argv, "-o", str(tmp_path / "w.txt")]) == 0, flag
    capsys.readouterr()
    for flag, (takes_value, noop, _) in NOT_MODELLED_MEGATRON_FLAGS.items():
        assert flag not in IGNORED_MEGATRON_FLAGS
        value = "2" if noop == "1" else "7" if noop is not None else "x"
        err = _refused(tmp_path, capsys, [*BASE, *([flag, value] if takes_value else [flag])])
        assert f"not modelled: {flag}" in err, flag
        if noop is not None:
            assert main([*BASE, flag, noop, "-o", str(tmp_path / "w.txt")]) == 0, flag
            capsys.readouterr()


def test_sequence_parallel_at_tp_1_is_switched_off_with_a_warning(tmp_path, capsys):
    rc, err, out = _run(tmp_path, capsys, ["--model", "llama3-8b", "--sequence-parallel", "--world-size", "8"])
    assert rc == 0 and out.exists()
    assert "warning: --sequence-parallel with tensor parallel size 1: sequence parallelism disabled" in err
    assert "sp=0" in err and "error" not in err


def test_missing_world_size_warns_with_the_derived_value(tmp_path, capsys):
    rc, err, _ = _run(tmp_path, capsys, ["--model", "gpt3-175b", "--tp", "8", "--pp", "8"])
    assert rc == 0
    assert "warning: --world-size not given; using 64 GPUs (tp*pp*cp = 8*8*1 = 64" in err
    rc, err, _ = _run(tmp_path, capsys, ["--model", "gpt3-175b", "--tp", "8", "--pp", "8", "--world-size", "64"])
    assert rc == 0 and "--world-size not given" not in err


def test_no_warning_or_note_on_an_invalid_config(tmp_path, capsys):
    """An error stays one line: warnings are only shown for configs that are valid."""
    rc, err, _ = _run(tmp_path, capsys, ["--model", "llama3-8b", "--tp", "3", "--lr", "1e-4"])
    assert rc == 2 and err.count("\n") == 1 and err.startswith("error: ")


def test_model_flags_equal_to_a_preset_name_it(tmp_path, capsys):
    argv = (
        "--num-layers 80 --hidden-size 8192 --ffn-hidden-size 28672 --num-attention-heads 64 "
        "--group-query-attention --num-query-groups 8 --vocab-size 128256 --swiglu --normalization RMSNorm "
        "--position-embedding-type rope --untie-embeddings-and-output-weights --disable-bias-linear "
        "--max-position-embeddings 131072 --tensor-model-parallel-size 8 --world-size 8 --global-batch-size 8"
    ).split()
    rc, err, _ = _run(tmp_path, capsys, argv)
    assert rc == 0 and err.startswith("llama3-70b:")
    # One field off: a custom model.
    argv[argv.index("--vocab-size") + 1] = "128000"
    rc, err, _ = _run(tmp_path, capsys, argv)
    assert rc == 0 and err.startswith("custom:")


def test_preset_equality_ignores_equivalent_spellings():
    from dataclasses import replace

    from workload_gen.core.model_presets import preset_equal_to

    llama = PRESETS["llama2-7b"]
    assert preset_equal_to(replace(llama, name="custom", num_query_groups=None, kv_channels=128)) is llama
    assert preset_equal_to(replace(llama, name="custom", max_position_embeddings=8192)) is llama
    assert preset_equal_to(replace(llama, name="custom", qk_layernorm=True)) is None
    gpt = PRESETS["gpt3-125m"]
    assert preset_equal_to(replace(gpt, name="custom", max_position_embeddings=1024)) is None
