"""NVIDIA's published MoE recipes, given as their full Megatron-LM flag lists
(compute_profile/data/measured/moe_recipes/, sources in its README), run as written; an option
whose mechanism the simulator leaves out is named in one warning line
(scripts/check_recipes.py is the held-out check; these tests run it as a user would).

What is checked does not come from the code under test: the recipes are NVIDIA's, translated
flag by flag from Megatron-Bridge's configs, and Megatron-LM's own rules decide which
combinations are valid."""
from __future__ import annotations

import math

import pytest

from bench_scripts import script

PARAM_GATHER_ONLY = "bridge-25.09-deepseek-v3-h100-1024gpu-fp8cs"
"""Megatron-Bridge runs this recipe with the parameter all-gather overlapped but not the
gradient reduction. Megatron-LM's CLI asserts --overlap-param-gather needs --overlap-grad-reduce
(megatron/training/arguments.py at d98e8a64, 'Must use --overlap-param-gather with
--overlap-grad-reduce'); Megatron-Core's DDP, which Bridge drives directly, runs it, and so
does the simulator, with a note."""


@pytest.fixture(scope="module")
def outcomes():
    check = script("check_recipes")
    return [check.check(row, simulate=True) for row in check.read_rows()]


def test_every_measured_row_has_its_recipe_or_says_why(outcomes):
    """51 measured runs; the 4 without a published flag list say so, the rest have one."""
    assert len(outcomes) == 51
    missing = [o for o in outcomes if o.status == "no recipe"]
    assert len(missing) == 4 and all("nemotron-3-super" in o.recipe for o in missing)


def test_each_recipe_runs_or_is_refused_for_a_reason_outside_the_moe_physics(outcomes):
    for o in outcomes:
        if o.status == "no recipe":
            continue
        assert o.status in ("ran", "warned"), (o.recipe, o.reason)
        for line in o.warnings:  # each warning is one line naming the flag and what is left out
            assert "\n" not in line and line.startswith("not modelled: --") and "simulated without it" in line


def test_every_recipe_simulates_to_a_finite_step_time(outcomes):
    ran = [o for o in outcomes if o.status in ("ran", "warned")]
    assert len(ran) == 51 - 4
    for o in ran:
        assert o.predicted_s is not None and math.isfinite(o.predicted_s) and o.predicted_s > 0


def test_the_param_gather_only_recipe_runs_with_a_note():
    """The H100 DeepSeek-V3 recipe's line: Megatron-LM's CLI would refuse it, Megatron-Core runs
    it; the simulator runs it and says which check it did not enforce."""
    from workload_gen.flag_values import configs_from_flags

    check = script("check_recipes")
    ns, err = check._parse([*check.recipe_argv(check.MEASURED / "moe_recipes" / f"{PARAM_GATHER_ONLY}.args"),
                            "--world-size", "1024"])
    assert ns is not None, err
    _model, par, notes = configs_from_flags(vars(ns))
    assert par.overlap_param_gather and not par.overlap_grad_reduce
    assert sum("--overlap-param-gather without --overlap-grad-reduce" in n for n in notes) == 1


def test_what_each_recipe_waits_for_agrees_with_the_table_columns(outcomes):
    """The measured table records each run's settings in columns of its own (dispatcher, CUDA
    graphs, fp8 parameter gather, EP all-to-all overlap); the warnings the flag list draws
    must name exactly the mechanisms among those the simulator leaves out, so neither the
    translation nor the warning table drops one."""
    check = script("check_recipes")
    by_name = {o.recipe: o for o in outcomes}
    rows = [r for r in check.read_rows() if r["recipe_args"]]
    for row in rows:
        o = by_name[row["recipe_args"].rsplit("/", 1)[-1].removesuffix(".args")]
        waits = " ".join(o.warnings)
        # modelled (issue 27): the flex dispatcher, the EP all-to-all overlap, delayed wgrad,
        # the fp8 parameter gather, the gather beside the optimizer step, CUDA graphs (the host
        # launch work they remove, engine.host_launch) and the shared experts' side stream
        for flag in ("--moe-token-dispatcher-type", "--overlap-moe-expert-parallel-comm", "--delay-wgrad-compute",
                     "--fp8-param-gather", "--overlap-param-gather-with-optimizer-step", "--moe-hybridep-num-sms",
                     "--cuda-graph-impl", "--cuda-graph-scope", "--moe-shared-expert-overlap"):
            assert flag not in waits, (o.recipe, flag)


MEMORY_SLACK = 0.03
"""The memory model's error a shortfall may be read as: 3% of the GPU (calibration: memory
median error 1.5%, docs/validation.md)."""


def test_every_recipe_nvidia_ran_is_predicted_to_fit(outcomes):
    """NVIDIA ran each of these recipes, so each must fit its GPU in the memory model (within
    the model's own error, MEMORY_SLACK), unless the measured table's row contradicts the
    recipe it names: the 25.11 GPT-OSS-120B H100 row prints micro-batch 4 where the v0.2.0
    recipe sets 1, and a GA that disagrees with its own GBS / (MBS x DP) (its flag file says
    so); at the table's micro-batch 4 the model needs half as much again as the GPU holds."""
    from formats.measured_runs import BRIDGE_SYSTEMS
    from workload_gen.core.gpu_specs import get_gpu
    from workload_gen.core.system import load_system

    check = script("check_recipes")
    rows = {r["recipe_args"].rsplit("/", 1)[-1].removesuffix(".args"): r for r in check.read_rows()
            if r["recipe_args"]}
    for o in outcomes:
        if o.status not in ("ran", "warned"):
            continue
        row = rows[o.recipe]
        capacity = get_gpu(load_system(BRIDGE_SYSTEMS[row["gpu"]]).gpu).memory_bytes
        contradicted = "recipe sets MBS 1" in row["notes"] and "disagrees with its own GBS" in row["notes"]
        if contradicted:
            assert o.short_bytes > MEMORY_SLACK * capacity, o.recipe
        else:
            assert o.short_bytes <= MEMORY_SLACK * capacity, (o.recipe, o.short_bytes / 2**30)


@pytest.mark.parametrize("name", ["check_recipes", "check_rack_scale"])
def test_plot_refused_before_simulating(name, tmp_path, capsys):
    """--plot of either held-out check: a path that cannot be written (a directory), or --plot
    with --no-simulate, is one line and exit 2 before any recipe is simulated; nothing is written."""
    check = script(name)
    assert check.main(["--plot", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--plot" in err[0] and "directory" in err[0]
    assert check.main(["--no-simulate", "--plot", str(tmp_path / "moe.png")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--no-simulate" in err[0]
    assert not (tmp_path / "moe.png").exists()


def test_recipe_plot_draws_only_predicted_runs():
    """scripts/recipe_plot.py: the runs with a finite prediction, as a PNG; none is refused."""
    plot = script("recipe_plot")
    runs = [("b200", "qwen3-30b-a3b", 9.7, 8.6), ("h100", "qwen3-30b-a3b", 29.3, 25.1),
            ("h100", "deepseek-v3", 25.3, None)]
    png = plot.render_png(runs, "test", (0.08, 0.20))
    assert png.startswith(b"\x89PNG\r\n\x1a\n") and len(png) > 10_000
    with pytest.raises(ValueError, match="nothing to plot"):
        plot.render_png(runs[2:], "test", (0.08,))
