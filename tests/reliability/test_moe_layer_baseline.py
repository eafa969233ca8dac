"""Megatron-LM's MoE layer performance baselines (compute_profile/data/measured/
megatron_moe_layer_baseline.csv, from Megatron-LM's functional test moe_perf) run through
scripts/check_moe_layer.py as docs/validation.md runs it.

Only what holds whatever the model's accuracy is asserted: the table is the published one, the
alltoall rows (modelled) give finite positive times with the backward longer than the
forward, the routed experts' FLOPs on one rank are the hand count of the layer Megatron
builds, and a row the simulator cannot predict yet is refused in one line. Issue 27's 15%
goal is the script's report, not an assertion here (it is not met yet)."""
from __future__ import annotations

import math

import pytest

from bench_scripts import script
from workload_gen.core.moe_routing import rank_load_factor

MEGATRON = ("NVIDIA/Megatron-LM@d98e8a64ddf34856e74b24714e3bedb2f5a39553:"
            "tests/functional_tests/test_cases/common/moe_perf/")


@pytest.fixture(scope="module")
def check():
    return script("check_moe_layer")


@pytest.fixture(scope="module")
def rows(check):
    return check.read_rows()


@pytest.fixture(scope="module")
def outcomes(check, rows):
    return [check.check(row) for row in rows]


def test_the_table_is_the_published_one(rows):
    """12 cases: 2 proxies x 3 dispatchers x 2 precisions, each citing its baseline.json lines;
    spot values exactly as baseline.json prints them (L2-7 and L68-73)."""
    assert len(rows) == 12 and len({r["case"] for r in rows}) == 12
    combos = {(r["proxy"], r["dispatcher"], r["flex_backend"], r["precision"]) for r in rows}
    assert combos == {(p, d, b, x) for p in ("mixtral", "deepseek")
                      for d, b in (("alltoall", ""), ("flex", "deepep"), ("flex", "hybridep")) for x in ("bf16", "fp8")}
    for r in rows:
        assert r["source"].startswith(MEGATRON + "baseline.json L"), r["source"]
        assert float(r["forward_ms"]) > 0 and float(r["backward_ms"]) > float(r["forward_ms"])
    by_case = {r["case"]: r for r in rows}
    assert by_case["deepseek_a2a_tp1ep8_bf16"]["forward_ms"] == "7.119169592857361"
    assert by_case["deepseek_a2a_tp1ep8_bf16"]["backward_ms"] == "10.482670497894286"
    assert by_case["mixtral_hybridep_tp1ep8_fp8"]["forward_ms"] == "3.7007392168045046"


def test_alltoall_rows_are_predicted_finite_and_positive(outcomes):
    """The alltoall rows must be predicted; every predicted row (the flex ones too, now that the
    flex dispatcher is modelled) is finite and positive."""
    assert sum(o.dispatcher == "alltoall" and o.prediction is not None for o in outcomes) == 4
    for o in outcomes:
        if o.prediction is None:
            continue
        assert math.isfinite(o.prediction.fwd_s) and o.prediction.fwd_s > 0, o.case
        assert math.isfinite(o.prediction.bwd_s) and o.prediction.bwd_s > 0, o.case


def test_backward_is_longer_than_forward(outcomes):
    """The backward runs each expert GEMM twice (dgrad and wgrad) for the forward's once."""
    for o in outcomes:
        if o.prediction is not None:
            assert o.prediction.bwd_s > o.prediction.fwd_s, o.case


def test_routed_expert_flops_are_the_hand_count(outcomes, rows):
    """Megatron's test builds TransformerConfig without gated_linear_unit or activation_func
    (moe_perf/__main__.py L44-86), so each expert is fc1 h -> f, GELU, fc2 f -> h. Each of the 8
    ranks routes its T = 4096 tokens to k experts; forced balance spreads the 8*T*k copies evenly
    over the E experts, E/8 on each rank, so every rank's experts take T*k rows. Forward, per rank:
    fc1 2*(T*k)*h*f + fc2 2*(T*k)*f*h = 4*T*k*h*f; backward twice that (dgrad and wgrad).
    DeepSeek proxy 4*4096*8*7168*2048 and Mixtral proxy 4*4096*2*4096*14336 are the same
    1,924,145,348,608 FLOPs."""
    assert 4 * 4096 * 8 * 7168 * 2048 == 4 * 4096 * 2 * 4096 * 14336 == 1_924_145_348_608
    by_case = {r["case"]: r for r in rows}
    checked = 0
    for o in outcomes:
        if o.prediction is None:
            continue
        r = by_case[o.case]
        assert r["activation"] == "gelu"
        tokens = int(r["seq_length"]) * int(r["micro_batch"])
        k, h, f = int(r["router_topk"]), int(r["hidden_size"]), int(r["moe_ffn_hidden_size"])
        # the simulated rank is the busiest: forced balance leaves it a fraction of a percent
        # above the mean (workload_gen.core.moe_routing, checked against a Monte-Carlo there)
        model, par, _ = script("check_moe_layer").configs(r)
        load = round(tokens * k * rank_load_factor(model, par, tokens)) / (tokens * k)
        assert 1.0 < load < 1.02, o.case
        assert o.prediction.expert_flops_fwd == pytest.approx(4 * tokens * k * h * f * load, rel=1e-9), o.case
        assert 4 * tokens * k * h * f == 1_924_145_348_608
        assert o.prediction.expert_flops_bwd == 2 * o.prediction.expert_flops_fwd, o.case
        checked += 1
    assert checked >= 4


def test_each_row_is_predicted_or_refused_in_one_line(outcomes):
    """Whatever the library models, the script says for each row whether it was predicted (with
    the library's one-line warning for any setting simulated without its mechanism) or refused
    (the library's one line)."""
    for o in outcomes:
        assert o.status in ("ran", "refused"), o.case
        if o.status == "refused":
            assert o.prediction is None and o.reason and "\n" not in o.reason, o.case
        assert all(w and "\n" not in w for w in o.warnings), o.case


def test_a_row_the_library_refuses_is_reported_not_raised(check, rows):
    """EP 3 cannot divide 8 GPUs: the library's ConfigError becomes the row's one line."""
    o = check.check(dict(rows[0], ep="3"))
    assert o.status == "refused" and o.prediction is None and "\n" not in o.reason and "ep" in o.reason


def test_the_report_prints_every_row(check, capsys):
    assert check.main(["--markdown"]) == 0
    out = capsys.readouterr().out
    assert out.count("| mixtral |") >= 6 and out.count("| deepseek |") >= 6
    assert "rows predicted" in out


def test_fp8_gains_pair_each_proxy_and_dispatcher_across_precisions(check, rows, outcomes):
    """Six BF16/FP8 pairs (2 proxies x 3 dispatchers); the measured gain is the table's own
    (fwd + bwd) ratio, e.g. DeepSeek alltoall from baseline.json: (7.119 + 10.483) / (7.609 +
    10.126) = 0.9925 (FP8 slower); the predicted one is the simulator's same ratio, a finite
    positive number. Their agreement (issue 27: within 7%) is reported, not asserted."""
    gains = check.fp8_gains(outcomes)
    assert {(g.proxy, g.dispatcher) for g in gains} == {(p, d) for p in ("mixtral", "deepseek")
                                                        for d in ("alltoall", "DeepEP", "HybridEP")}
    by = {r["case"]: r for r in rows}
    ds = next(g for g in gains if (g.proxy, g.dispatcher) == ("deepseek", "alltoall"))
    bf, f8 = by["deepseek_a2a_tp1ep8_bf16"], by["deepseek_a2a_tp1ep8_fp8"]
    want = (float(bf["forward_ms"]) + float(bf["backward_ms"])) / (float(f8["forward_ms"]) + float(f8["backward_ms"]))
    assert ds.measured == pytest.approx(want, rel=1e-12) and ds.measured == pytest.approx(0.9925, abs=1e-4)
    assert all(math.isfinite(g.predicted) and g.predicted > 0 for g in gains)
    lines = check.gain_lines(gains)
    assert len(lines) == 7 and lines[-1].split()[1:3] == ["of", "6"]


def test_plot_draws_each_row_twice_and_refuses_a_directory(check, outcomes, tmp_path, capsys):
    """--plot: one point per row and pass (24), coloured by dispatcher, as PNG bytes; a
    directory given as the file is refused in one line before any simulation."""
    runs = check.plot_runs(outcomes)
    assert len(runs) == 24 and {r[0] for r in runs} == {"alltoall", "DeepEP", "HybridEP"}
    assert all(r[2] > 0 and r[3] > 0 for r in runs)
    png = check.recipe_plot.render_png(runs, "test", (check.TARGET,), "layer pass time")
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    assert check.main(["--plot", str(tmp_path)]) == 2
    assert "is a directory" in capsys.readouterr().err
