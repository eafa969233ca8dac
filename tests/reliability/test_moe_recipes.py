"""NVIDIA's published MoE recipes, given as their full Megatron-LM flag lists
(compute_profile/data/measured/moe_recipes/, sources in its README), are accepted as written or
refused only for a mechanism the MoE physics issue models, each named in one line
(scripts/check_recipes.py is the held-out check; these tests run it as a user would).

What is checked does not come from the code under test: the recipes are NVIDIA's, translated
flag by flag from Megatron-Bridge's configs, and Megatron-LM's own rules decide which
combinations are valid."""
from __future__ import annotations

import math

import pytest

from bench_scripts import script

MAMBA_HYBRIDS = "nemotron-3-nano"
"""Hybrid Mamba-Transformer recipes: refused for their Mamba layers, outside the MoE issues."""
NOT_A_MEGATRON_LINE = {"bridge-25.09-deepseek-v3-h100-1024gpu-fp8cs"}
"""Megatron-Bridge runs this recipe with the parameter all-gather overlapped but not the
gradient reduction; Megatron-LM asserts --overlap-param-gather needs --overlap-grad-reduce
(megatron/training/arguments.py at d98e8a64, 'Must use --overlap-param-gather with
--overlap-grad-reduce'), so its Megatron-LM launch line is refused as Megatron would."""


@pytest.fixture(scope="module")
def outcomes():
    check = script("check_recipes")
    return [check.check(row, simulate=True, without_unmodelled=True) for row in check.read_rows()]


def test_every_measured_row_has_its_recipe_or_says_why(outcomes):
    """51 measured runs; the 4 without a published flag list say so, the rest have one."""
    assert len(outcomes) == 51
    missing = [o for o in outcomes if o.status == "no recipe"]
    assert len(missing) == 4 and all("nemotron-3-super" in o.recipe for o in missing)


def test_each_recipe_is_accepted_or_refused_only_for_a_named_mechanism(outcomes):
    for o in outcomes:
        if o.status == "no recipe":
            continue
        if MAMBA_HYBRIDS in o.recipe:
            assert o.status == "refused" and "Mamba" in o.reason and "\n" not in o.reason
            continue
        if o.recipe in NOT_A_MEGATRON_LINE:
            assert o.status == "refused" and "overlap_grad_reduce" in o.reason
            continue
        assert not o.other, (o.recipe, o.reason)
        for line in o.blockers:  # each refusal is one line naming the flag and what is missing
            assert "\n" not in line and "not modelled yet: --" in line and "(" in line


def test_without_their_unmodelled_options_the_recipes_simulate(outcomes):
    """The refused recipes wait only for those mechanisms: switched off, every one builds and
    simulates to a finite, positive step time (the baseline the MoE physics issue starts from)."""
    ran = [o for o in outcomes if o.status in ("ran", "ran without")]
    assert len(ran) == 51 - 4 - 5 - len(NOT_A_MEGATRON_LINE)
    for o in ran:
        assert o.predicted_s is not None and math.isfinite(o.predicted_s) and o.predicted_s > 0


def test_what_each_recipe_waits_for_agrees_with_the_table_columns(outcomes):
    """The measured table records each run's settings in columns of its own (dispatcher, CUDA
    graphs, fp8 parameter gather, EP all-to-all overlap; the fp8 gather is modelled now); the
    refusals the flag list draws must name exactly those mechanisms, so neither the
    translation nor the refusal table drops one."""
    check = script("check_recipes")
    by_name = {o.recipe: o for o in outcomes}
    rows = [r for r in check.read_rows() if r["recipe_args"] and MAMBA_HYBRIDS not in r["model"]]
    for row in rows:
        o = by_name[row["recipe_args"].rsplit("/", 1)[-1].removesuffix(".args")]
        if o.recipe in NOT_A_MEGATRON_LINE:
            continue
        waits = " ".join(o.blockers)
        assert ("--moe-token-dispatcher-type flex" in waits) == row["dispatcher"].startswith("flex"), o.recipe
        assert ("--cuda-graph-impl" in waits) == (row["cuda_graph_impl"] not in ("", "none")), o.recipe
        # fp8 parameter gather is modelled: a recipe with it (column fp8_param_gather = 1) no
        # longer waits for it
        assert "--fp8-param-gather" not in waits, o.recipe
        assert ("--overlap-moe-expert-parallel-comm" in waits) == (row["moe_a2a_overlap"] == "1"), o.recipe
