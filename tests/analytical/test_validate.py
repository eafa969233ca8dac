"""Accuracy on the measured runs of ../shared/data/real, judged out of sample.

The suite runs the calibration itself (about 20 s): the declared parameters are fitted on
the runs, then every model family is left out in turn, refitted without it, and predicted
by the full simulator. CI asserts the CROSS-VALIDATED figures (issue 12), not in-sample
ones. The maximum is held at 12.5%: the issue asks 12%, and the B200 Llama-3 70B rows reach
12.2% when their model is left out (docs/validation.md says why).
"""
from __future__ import annotations

import statistics
from pathlib import Path

import pytest
from bench_scripts import script

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT.parent / "shared" / "data" / "real"
HELD_OUT = ROOT / "compute_profile" / "data" / "measured"


FITS_SEEN: list[tuple[int, int]] = []
"""What cross_validate reported to its progress callback while the fixture ran."""


@pytest.fixture(scope="module")
def report():
    from engine.calibration import cross_validate
    from formats.measured_runs import read_measured_dir

    FITS_SEEN.clear()
    return cross_validate(read_measured_dir(DATA), fits_done=lambda done, total: FITS_SEEN.append((done, total)),
                          holdout=read_measured_dir(HELD_OUT))


def _cv_errors(preds):
    return [abs(p.cross_validated_s / p.run.step_time_s - 1) for p in preds]


def test_every_measured_run_is_used(report):
    assert report.rows == 66  # 10 A100 + 12 B200 + 44 H100
    assert report.folds == 14  # 10 GPT sizes, 2 B200 models, 2 H100 models
    assert len(report.parameters) == 7
    # the progress count: the in-sample fit, then one fit per left-out family, 15 in all
    assert FITS_SEEN == [(k, 15) for k in range(1, 16)]


def test_cross_validated_step_time_median_within_5_percent(report):
    bf16 = [p for p in report.predictions if p.run.precision != "fp8"]
    fp8 = [p for p in report.predictions if p.run.precision == "fp8"]
    assert len(fp8) == 22
    for name, preds in (("all", report.predictions), ("bf16/fp16", bf16), ("fp8", fp8)):
        med = statistics.median(_cv_errors(preds))
        assert med <= 0.05, f"{name}: cross-validated median |error| {med:.1%}"


def test_cross_validated_step_time_max_within_12_percent(report):
    """The worst left-out rows: 11.6% (A100 GPT 7.5B) and 11.3% (B200 Llama-3 70B, TP 4, with
    the B200 factor fitted on DeepSeek-V2 alone). It was 12.2% with B200's throughput prior
    at 1.0 and its attention caps from FA4; both now come from SimuMax's B200 kernel
    benchmarks (test_kernel_table.py)."""
    worst = max(_cv_errors(report.predictions))
    assert worst <= 0.12, f"cross-validated max |error| {worst:.1%}"


def test_cross_validated_fp8_speedup_within_5_percent(report):
    """The cross-validated BF16->FP8 speed-up of every pair (model, release, GPU count) is
    within 5% of the measured one, as issue 12 asks, and so is each model's average. The
    two NeMo releases run identical configs yet measure speed-ups up to 4% apart (a release
    effect no configuration input carries), so a pair's margin includes that spread. The
    per-pair table is in docs/validation.md."""
    from engine.calibration import speedups

    pairs = speedups(report)
    assert len(pairs) == 22
    models = {key.split()[0] for key, *_ in pairs}
    assert models == {"llama3.1-8b", "llama3.1-70b"}
    for model in models:
        mine = [(m, cv) for key, m, _, cv in pairs if key.startswith(model + " ")]
        measured = statistics.mean(m for m, _ in mine)
        predicted = statistics.mean(cv for _, cv in mine)
        assert abs(predicted / measured - 1) <= 0.05, f"{model}: {predicted:.3f} vs measured {measured:.3f}"
    for key, measured, _in_sample, cv in pairs:
        assert abs(cv / measured - 1) <= 0.05, f"{key}: BF16->FP8 speed-up {cv:.3f} vs measured {measured:.3f}"


def test_memory_median_within_1_5_percent(report):
    errs = [abs(p.memory_allocated / p.run.mem_allocated - 1) for p in report.predictions if p.memory_allocated]
    errs += [abs(p.memory_reserved / p.run.mem_reserved - 1) for p in report.predictions if p.memory_reserved]
    assert len(errs) == 24
    assert statistics.median(errs) <= 0.015


def test_fitted_parameters_stay_inside_their_bounds(report):
    for d in report.parameters:
        assert d.lower <= report.fitted[d.path] <= d.upper
        lo, hi = report.fold_values[d.path]
        assert d.lower <= lo <= hi <= d.upper


def test_the_shipped_calibration_is_this_fit(report):
    """compute_profile/data/calibrated.yaml holds what calibrating on these runs gives
    (to 2%: the optimiser's tolerance), so the shipped model is the reported one."""
    from compute_profile.estimator import calibrated_values

    shipped = dict(calibrated_values())
    for d in report.parameters:
        assert shipped[d.path] == pytest.approx(report.fitted[d.path], rel=0.02, abs=2e-3), d.path


def test_validate_script_reports_every_row(capsys):
    assert script("validate").main([]) == 0
    out = capsys.readouterr().out
    assert out.count("step_time_s") == 66 and "median |error|" in out


def test_measured_step_time_follows_megatrons_flop_formula():
    """Row 1 of the A100 table: 1.7B (h 2304, 24 layers), 32 GPUs, batch 512, 137 TFLOP/s."""
    from formats.measured_runs import read_measured_runs

    f = 96 * 512 * 2048 * 24 * 2304**2 * (1 + 2048 / (6 * 2304) + 51200 / (16 * 24 * 2304))
    runs = read_measured_runs(DATA / "megatron_a100_2021_weak_scaling.csv")
    assert runs[0].step_time_s == f / (137e12 * 32)
    assert (runs[0].parallel.tp, runs[0].parallel.pp) == (1, 1)
    big = runs[-1]  # 1T: tp x pp = 512 -> TP 8 inside the node, PP 64
    assert (big.parallel.tp, big.parallel.pp, big.parallel.dp) == (8, 64, 6)
    assert runs[0].parallel.attention_backend == "unfused"  # 2021 stack: no fused attention yet


def test_held_out_runs_change_nothing_that_is_fitted():
    """The fit and every fold are the same with and without held-out runs (here on the 12
    B200 rows, two families, to keep it quick); the held-out runs are predicted at the
    in-sample fit."""
    from engine.calibration import cross_validate, simulate_run
    from formats.measured_runs import read_measured_dir, read_measured_runs

    runs = read_measured_runs(DATA / "b200_megatron_measured.csv")
    held = [r for r in read_measured_dir(HELD_OUT) if r.system == "b200"][:1]
    alone = cross_validate(runs, outer=1)
    with_held = cross_validate(runs, outer=1, holdout=held)
    assert with_held.fitted == alone.fitted and with_held.fold_values == alone.fold_values
    assert [p.cross_validated_s for p in with_held.predictions] == [p.cross_validated_s for p in alone.predictions]
    assert with_held.held_out[0].predicted_s == simulate_run(held[0], alone.fitted)[0]


def test_megatron_bridge_step_time_is_tokens_over_throughput():
    """25.11, DGX-B200, Llama 3 8B FP8 current scaling: 30624 tokens/s/GPU on 8 GPUs at
    global batch 128 x 8192 tokens -> 128 * 8192 / (30624 * 8) = 4.2797 s per step."""
    from formats.measured_runs import read_measured_dir

    runs = [r for r in read_measured_dir(HELD_OUT) if "bridge25.11" in r.label and r.system == "b200"
            and r.parallel.fp8_recipe == "tensorwise" and r.model.name == "llama3-8b"]
    assert len(runs) == 1
    run = runs[0]
    assert run.step_time_s == pytest.approx(128 * 8192 / (30624 * 8))
    assert (run.parallel.tp, run.parallel.dp, run.parallel.num_microbatches) == (1, 8, 8)
    assert run.family == "llama3.1-8b"  # same shapes as Llama 3.1 8B: one family across sources


def test_megatron_bridge_405b_rows_use_the_recipe_layout():
    """25.11, DGX-H100, Llama 3.1 405B FP8: 292 tokens/s/GPU on 1024 GPUs at 512 x 8192 tokens
    -> 14.03 s per step; TP 8 PP 8 VP 8 CP 2 with the embedding and loss in layer slots
    (126 + 2 = 128 slots, 2 per virtual stage), DP 8, 64 micro-batches."""
    from formats.measured_runs import read_measured_dir

    run = next(r for r in read_measured_dir(HELD_OUT) if "405b" in r.label and "bridge25.11" in r.label
               and r.system == "h100")
    assert run.step_time_s == pytest.approx(512 * 8192 / (292 * 1024))
    par = run.parallel
    assert (par.tp, par.pp, par.vpp, par.cp, par.dp, par.num_microbatches) == (8, 8, 8, 2, 8, 64)
    assert par.account_for_embedding_in_pipeline_split and par.account_for_loss_in_pipeline_split
    assert run.model.num_layers == 126 and run.model.hidden_size == 16384


def test_held_out_runs_are_predicted_never_fitted(report):
    """The Megatron-Bridge runs and NeMo 25.02's dgxc-benchmarking runs (newer NeMo stacks)
    are predicted by the model fitted on the shared rows and reported on their own; no fold
    sees them."""
    from engine.calibration import render_markdown

    assert len(report.held_out) == 13 + 22
    assert {c.run.system for c in report.held_out} == {"b200", "h100"}
    assert all(c.predicted_s > 0 and c.prior_s > 0 for c in report.held_out)
    assert report.rows == 66
    assert not {p.run.dataset for p in report.predictions} & {"megatron-bridge", "dgxc-nemo25.02"}
    text = render_markdown(report)
    assert "Held out entirely (35 runs from dgxc-nemo25.02, megatron-bridge" in text


def test_nemo_2502_table_is_read_as_published():
    """The 22 NeMo 25.02 rows: the README's layouts (70B FP8 on TP 4, PP 8, VP 5 without CP),
    and 8192 x GBS / step time equals the README's tokens/s column, which the table does not
    carry (four rows checked by hand against dgxc-benchmarking@741c886 llama3.1/README.md)."""
    from formats.measured_runs import read_measured_runs

    runs = read_measured_runs(HELD_OUT / "h100_nemo2502_llama31_measured.csv")
    assert len(runs) == 22 and {r.dataset for r in runs} == {"dgxc-nemo25.02"}
    fp8_70b = [r for r in runs if r.family == "llama3.1-70b" and r.precision == "fp8"]
    assert {(r.parallel.tp, r.parallel.pp, r.parallel.vpp, r.parallel.cp) for r in fp8_70b} == {(4, 8, 5, 1)}
    assert all(r.parallel.distributed_optimizer and r.parallel.optimizer == "adam" for r in runs)
    tokens_per_s = {"H100 llama3.1-8b bf16 nemo25.02 tp1pp1vp1cp2 8g": 85459,
                    "H100 llama3.1-8b fp8 nemo25.02 tp1pp1vp1cp2 128g": 1758618,
                    "H100 llama3.1-70b bf16 nemo25.02 tp4pp4vp5cp2 64g": 71526,
                    "H100 llama3.1-70b fp8 nemo25.02 tp4pp8vp5cp1 2048g": 3305855}
    by_label = {r.label: r for r in runs}
    for label, tps in tokens_per_s.items():
        r = by_label[label]
        assert r.parallel.global_batch * 8192 / r.step_time_s == pytest.approx(tps, rel=1e-4)


def test_held_out_summary_by_source_gpu_and_precision(report):
    """The held-out table's group rows partition the held-out runs by (source, GPU,
    precision), grouped here independently of held_out_groups, and each row's figures are
    the median / max |error| and signed median of exactly its runs."""
    from engine.calibration import held_out_groups, render_markdown

    expected: dict[str, list[float]] = {}
    for c in report.held_out:
        precision = "fp8" if c.run.precision == "fp8" else "bf16/fp16"
        expected.setdefault(f"{c.run.dataset} {c.run.system} {precision}", []).append(
            c.predicted_s / c.run.step_time_s - 1)
    groups = held_out_groups(report)
    assert sum(len(g) for g in groups.values()) == len(report.held_out)
    assert {k: len(v) for k, v in groups.items()} == {k: len(v) for k, v in expected.items()}
    assert set(groups) >= {"dgxc-nemo25.02 h100 fp8", "dgxc-nemo25.02 h100 bf16/fp16", "megatron-bridge b200 fp8"}
    text = render_markdown(report)
    for name, errs in expected.items():
        med, mabs, mx = statistics.median(errs), statistics.median(map(abs, errs)), max(map(abs, errs))
        row = next(line for line in text.splitlines() if line.startswith(f"| {name} | {len(errs)} |"))
        assert row.endswith(f"| {mabs:.1%} / {mx:.1%} ({med:+.1%}) |")
